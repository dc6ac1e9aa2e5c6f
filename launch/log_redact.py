"""Log records of the CLI's process, redacted and escaped before any handler sees them.

Beam, the object-store SDKs and tar2tf log URLs (an ``--ais-endpoint`` with a password in
it, a signed URL) and names read from tar members (which may hold terminal escapes).  A
record factory applies ``transforms.redact.printable`` to each record's message and to
its formatted traceback as the record is made: only records that pass their logger's
level are made, so quiet loggers cost nothing.
"""

from __future__ import annotations

import logging
import traceback

from transforms.redact import printable

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    make = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = make(*args, **kwargs)
        try:
            record.msg, record.args = printable(record.getMessage()), None
        except Exception:  # noqa: BLE001 - a record whose message cannot be formatted: logging says so itself
            return record
        if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
            record.exc_text = printable("".join(traceback.format_exception(*record.exc_info))).rstrip("\n")
        return record
    logging.setLogRecordFactory(factory)
