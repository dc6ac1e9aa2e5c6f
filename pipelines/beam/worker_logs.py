"""Log records and prints of Beam's local SDK worker processes, as a user reads them.

In its ``multi_processing`` mode, Beam's local runner forwards every log record of its worker
processes to the launching process as one line of protobuf text (``Worker: severity: WARN
timestamp { ... } message: "..." log_location: "..." ...``).  That is where tar2tf's own
warnings come from in the default mode (a lone record over the shard size, a type map naming
no feature), so :func:`install` turns each back into its message, logged by the ``tar2tf``
logger at its level.  What Beam's own worker code says goes to the logger of the module
that said it (``apache_beam.runners.worker.sdk_worker``, ...), as if logged in this process:
below ERROR it is dropped (start-up notices such as "No semi_persistent_directory found",
which a user can do nothing about), and the CLI's filters of a failed step's logs apply to
the rest (``launch.log_redact.quiet_step_failures``).

Beam's SDK worker also prints a failed bundle's traceback to stderr itself, besides logging
it; :func:`quiet_beam_worker` drops that print, in the launching process (threads of the
local runner) and in each worker process (``pipelines.beam.sdk_worker``) unless
``$TAR2TF_DEBUG`` is 1 (the CLI's ``--debug``).
"""

from __future__ import annotations

import builtins
import logging
import re
import sys

WORKER_LOGGER = "apache_beam.runners.portability.local_job_service"
DEBUG_ENV = "TAR2TF_DEBUG"
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
        beam_module = _beam_module(where)
        if beam_module is None:
            logging.getLogger("tar2tf").log(record.levelno, "%s", text)
        elif record.levelno >= logging.ERROR and "KeyboardInterrupt" not in text:
            logging.getLogger(beam_module).log(record.levelno, "%s", text)
        return False  # below ERROR: Beam's own notices; and its workers' reports of Ctrl-C


def _beam_module(location: str):
    """``.../site-packages/apache_beam/runners/worker/sdk_worker.py:310`` ->
    ``apache_beam.runners.worker.sdk_worker``; None outside Beam's code."""
    path = location.rsplit(":", 1)[0]
    if "/apache_beam/" not in path:
        return None
    tail = "apache_beam/" + path.rsplit("/apache_beam/", 1)[1]
    return tail[: -len(".py")].replace("/", ".") if tail.endswith(".py") else "apache_beam"


_FILTER = _WorkerRecords()


def install() -> None:
    """Translate the worker records of this process's local Beam jobs (idempotent)."""
    logger = logging.getLogger(WORKER_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)


def quiet_beam_worker(debug: bool = False) -> None:
    """Unless ``debug``, drop the traceback Beam's SDK worker prints for a failed bundle (a
    module-level ``print`` in that module shadows the builtin for it alone): the failure
    is said once, in the CLI's one line.  Imports Beam's worker module."""
    if debug:
        return
    from apache_beam.runners.worker import sdk_worker

    sdk_worker.print = _quiet_print


def unquiet_beam_worker() -> None:
    """Undo :func:`quiet_beam_worker` (a process that runs other Beam jobs after the CLI's)."""
    worker = sys.modules.get("apache_beam.runners.worker.sdk_worker")
    if worker is not None and getattr(worker, "print", None) is _quiet_print:
        del worker.print


def _quiet_print(*args, **kwargs):
    if kwargs.get("file") is sys.stderr and args and str(args[0]).startswith("Traceback"):
        return
    builtins.print(*args, **kwargs)
