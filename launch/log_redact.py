"""Log records of the CLI's process, redacted and escaped before any handler sees them.

Beam, the object-store SDKs and tar2tf log URLs (an ``--ais-endpoint`` with a password in
it, a signed URL) and names read from tar members (which may hold terminal escapes).  A
record factory applies ``transforms.redact.printable`` to each record's message and to
its formatted traceback as the record is made: only records that pass their logger's
level are made, so quiet loggers cost nothing.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import sys
import traceback
from typing import Iterator

from transforms.redact import printable

_installed = False
# Beam's loggers that log a failed step's traceback (several times over, chained) before
# the failure reaches the CLI, which says it in one line: quiet unless --debug
STEP_FAILURE_LOGGERS = (
    "apache_beam.runners.common",
    "apache_beam.runners.worker.sdk_worker",
    "apache_beam.runners.worker.bundle_processor",
    "apache_beam.runners.direct.executor",
    "apache_beam.runners.portability.fn_api_runner.fn_runner",
)


def _not_a_step_failure(record: logging.LogRecord) -> bool:
    return record.levelno < logging.ERROR


@contextlib.contextmanager
def quiet_step_failures(debug: bool = False) -> Iterator[None]:
    """While a subcommand runs (unless ``debug``): Beam's logs of a failed step are
    dropped, and so is the traceback its SDK worker prints (:func:`quiet_beam_worker`);
    the CLI says the failure in one line.  Undone afterwards (the CLI's ``main`` may run
    in a process that runs other Beam jobs)."""
    if debug:
        yield
        return
    loggers = [logging.getLogger(name) for name in STEP_FAILURE_LOGGERS]
    for lg in loggers:
        lg.addFilter(_not_a_step_failure)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeFilter(_not_a_step_failure)
        worker = sys.modules.get("apache_beam.runners.worker.sdk_worker")
        if worker is not None and getattr(worker, "print", None) is _quiet_print:
            del worker.print


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
        except Exception:
            return record
        if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
            record.exc_text = printable(
                "".join(traceback.format_exception(*record.exc_info))
            ).rstrip("\n")
        return record

    logging.setLogRecordFactory(factory)


def quiet_beam_worker(debug: bool = False) -> None:
    """Beam's SDK worker prints a failed bundle's traceback to stderr itself (``print``,
    besides logging it), and the CLI then says the same failure in its one line: unless
    ``--debug``, that print is dropped (a module-level ``print`` in that module shadows
    the builtin for it alone).  Call before a job runs; imports Beam's worker module."""
    if debug:
        return
    from apache_beam.runners.worker import sdk_worker

    sdk_worker.print = _quiet_print


def _quiet_print(*args, **kwargs):
    if kwargs.get("file") is sys.stderr and args and str(args[0]).startswith("Traceback"):
        return
    builtins.print(*args, **kwargs)
