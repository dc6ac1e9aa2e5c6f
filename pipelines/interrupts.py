"""Ctrl-C during a local Beam job stays a plain ``KeyboardInterrupt``.

When Beam's local runner runs the bundle on the launching thread (``in_memory`` mode, which
tar2tf uses when its worker pool converts every shard: ``pipelines.options.collecting_args``),
that thread spends the job inside ``ConvertShard`` waiting for the pool, so that is where
Ctrl-C lands.  Beam turns any exception raised in a DoFn into one of the same type with
the step's name appended to its first argument, or, when that fails (``KeyboardInterrupt()``
has no argument), into a ``RuntimeError``, and logs it with its traceback at ERROR level.
A user who pressed Ctrl-C would get a traceback and a "job failed" exit instead of an
interruption.  So the DoFn raises :class:`Interrupted` instead (Beam rebuilds it with the
step name, as it does for any exception type), :func:`translated` turns it back into
``KeyboardInterrupt`` around the job, and Beam's log record of it is dropped.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

# the logger through which Beam reports an exception raised in a DoFn
_BEAM_DOFN_LOGGER = "apache_beam.runners.common"


class Interrupted(Exception):
    """Ctrl-C reached a DoFn while it waited (see the module docstring)."""


def _not_interrupted(record: logging.LogRecord) -> bool:
    return not (record.exc_info and isinstance(record.exc_info[1], Interrupted))


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Around a Beam job's run: an :class:`Interrupted` from a DoFn leaves as
    ``KeyboardInterrupt``, and Beam does not log it as a DoFn failure."""
    logger = logging.getLogger(_BEAM_DOFN_LOGGER)
    logger.addFilter(_not_interrupted)
    try:
        yield
    except Interrupted:
        raise KeyboardInterrupt from None
    finally:
        logger.removeFilter(_not_interrupted)
