"""Ctrl-C during a local Beam job stays a plain ``KeyboardInterrupt``.

When Beam's local runner runs the bundle on the launching thread (``in_memory`` mode, which
tar2tf uses when its worker pool converts every shard: ``pipelines.options.collecting_args``),
Ctrl-C lands inside a DoFn (there, ``ConvertShard`` waiting for the pool).  Beam turns any
exception raised in a DoFn into one of the same type with the step's name appended to its
first argument, or, when that fails (``KeyboardInterrupt()`` has no argument), into a
``RuntimeError`` raised while handling the original, and logs it at ERROR level with its
traceback.  A user who pressed Ctrl-C would get a traceback and a "job failed" exit
instead of an interruption.  :func:`translated` turns such an exception back into
``KeyboardInterrupt`` around the job, whichever step it came from, and drops Beam's log
record of it.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator, Optional

# the logger through which Beam reports an exception raised in a DoFn
_BEAM_DOFN_LOGGER = "apache_beam.runners.common"


def from_ctrl_c(exc: Optional[BaseException]) -> bool:
    """Whether ``exc`` is a ``KeyboardInterrupt`` or was raised while handling one."""
    for _ in range(8):  # Beam wraps once; a few layers more are allowed for
        if exc is None:
            return False
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _not_ctrl_c(record: logging.LogRecord) -> bool:
    return not (record.exc_info and from_ctrl_c(record.exc_info[1]))


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Around a Beam job's run: Beam's wrapping of a Ctrl-C in a DoFn leaves as
    ``KeyboardInterrupt``, and Beam does not log it as a step failure."""
    logger = logging.getLogger(_BEAM_DOFN_LOGGER)
    logger.addFilter(_not_ctrl_c)
    try:
        yield
    except Exception as e:
        if from_ctrl_c(e):
            raise KeyboardInterrupt from None
        raise
    finally:
        logger.removeFilter(_not_ctrl_c)
