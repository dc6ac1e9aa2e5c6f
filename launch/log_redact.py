"""Log records of the CLI's process, redacted and escaped before any handler sees them.

Beam, the object-store SDKs and tar2tf log URLs (an ``--ais-endpoint`` with a password in
it, a signed URL) and names read from tar members (which may hold terminal escapes).
:func:`install` puts in the record factory of ``transforms.redact.install_log_redaction``,
which the in-process driver's worker processes install too (they print to the same
terminal).
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Iterator

from transforms.redact import install_log_redaction

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
    dropped, and so is the traceback its SDK worker prints
    (:func:`pipelines.beam.worker_logs.quiet_beam_worker`);
    the CLI says the failure in one line.  Undone afterwards (the CLI's ``main`` may run
    in a process that runs other Beam jobs)."""
    from pipelines.beam import worker_logs

    if debug:  # Beam's worker processes, started later by this process, print theirs too
        old = os.environ.get(worker_logs.DEBUG_ENV)
        os.environ[worker_logs.DEBUG_ENV] = "1"
        try:
            yield
        finally:
            if old is None:
                os.environ.pop(worker_logs.DEBUG_ENV, None)
            else:
                os.environ[worker_logs.DEBUG_ENV] = old
        return
    loggers = [logging.getLogger(name) for name in STEP_FAILURE_LOGGERS]
    for lg in loggers:
        lg.addFilter(_not_a_step_failure)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeFilter(_not_a_step_failure)
        worker_logs.unquiet_beam_worker()


def install() -> None:
    """Every log record of this process redacted and escaped as it is made."""
    install_log_redaction()
