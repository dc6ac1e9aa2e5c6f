"""Log records of Beam's local SDK worker processes, as a user reads them.

In its ``multi_processing`` mode, Beam's local runner forwards every log record of its worker
processes to the launching process as one line of protobuf text (``Worker: severity: WARN
timestamp { ... } message: "..." log_location: "..." ...``).  That is where tar2tf's own
warnings come from in the default mode (a lone record over the shard size, a type map naming
no feature), so :func:`install` turns each back into its message, logged by the ``tar2tf``
logger at its level, and drops what Beam's own worker code says below ERROR (start-up
notices such as "No semi_persistent_directory found", which a user can do nothing about).
"""

from __future__ import annotations

import logging
import re

WORKER_LOGGER = "apache_beam.runners.portability.local_job_service"
_FIELD = r'{}: "((?:[^"\\]|\\.)*)"'
_MESSAGE = re.compile(_FIELD.format("message"))
_LOCATION = re.compile(_FIELD.format("log_location"))


def _unescape(text: str) -> str:
    """Protobuf text-format escapes (``\\"``, ``\\n``, octal UTF-8 bytes) -> the string."""
    raw = text.encode("latin-1", "backslashreplace").decode("unicode_escape")
    return raw.encode("latin-1", "replace").decode("utf-8", "replace")


class _WorkerRecords(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        # the message as formatted: the CLI's record factory may have formatted (and
        # redacted) it already (launch.log_redact)
        entry = record.getMessage()
        if not entry.startswith("Worker: "):
            return True
        message, location = _MESSAGE.search(entry), _LOCATION.search(entry)
        if message is None:
            return True
        where = _unescape(location.group(1)) if location else ""
        text = _unescape(message.group(1))
        if "/apache_beam/" in where and (
            record.levelno < logging.ERROR or "KeyboardInterrupt" in text
        ):
            return False  # Beam's own notices, and its workers' reports of Ctrl-C
        logging.getLogger("tar2tf").log(record.levelno, "%s", text)
        return False


_FILTER = _WorkerRecords()


def install() -> None:
    """Translate the worker records of this process's local Beam jobs (idempotent)."""
    logger = logging.getLogger(WORKER_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
