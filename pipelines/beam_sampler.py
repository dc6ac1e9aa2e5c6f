"""Beam's local runner ends every bundle up to 200 ms late: tar2tf shortens that wait.

Each bundle the Python SDK harness processes has a ``StateSampler``
(``apache_beam.runners.worker.statesampler``): a native thread that wakes at a period
growing from 2 ms to ``sampling_period_ms`` (200 ms by default, with no option to change
it) and charges the elapsed time to the step that is running.  When the bundle ends,
``stop()`` joins that thread, which may have just gone to sleep for a whole period.  A
bundle that lasts a second or more therefore ends 100 ms late on average; on the local
runner a tar2tf job is one long bundle per worker thread, so the job waits for it at the
very end, when nothing else is left to overlap.

Measured on the 2-core benchmark machine (resize224, 5,120 images, ~6.5 s jobs): the
runner returned 0.085-0.114 s after the last shard was closed with the default period,
0.016-0.022 s with 10 ms.  The sampler thread does its accounting without the GIL;
waking every 10 ms instead of 200 ms costs nothing measurable.

The period is only a default argument of ``StateSampler.__init__`` (Beam 2.x), so
:func:`shorten` replaces that default in this process, after checking that the
signature is the one it expects (otherwise it leaves Beam alone).  Only jobs whose DoFns
run in this process call it (``options.dofns_run_here``): other runners' SDK harnesses
are other processes, untouched.  Beam's step-time metrics only get finer.
"""

from __future__ import annotations

import inspect
import logging
from typing import Optional

log = logging.getLogger("tar2tf")

PERIOD_MS = 10  # the longest the end of a bundle waits for the sampler thread
_PARAM = "sampling_period_ms"


def shorten(cls: Optional[type] = None, period_ms: int = PERIOD_MS) -> bool:
    """Make ``cls`` (default: Beam's ``StateSampler``) sample every ``period_ms`` at most
    when created without an explicit period (a shorter default is kept).  True if done (or
    already so); False if the class does not look as expected: nothing is changed then."""
    if cls is None:
        from apache_beam.runners.worker.statesampler import StateSampler as cls
    init = getattr(cls, "__init__", None)
    try:
        params = list(inspect.signature(init).parameters.values())
    except (TypeError, ValueError):
        params = []
    defaults = getattr(init, "__defaults__", None)
    if not params or params[-1].name != _PARAM or params[-1].default is inspect.Parameter.empty \
            or not defaults:
        log.debug("Beam's StateSampler has no trailing %s default; its period is left as is", _PARAM)
        return False
    if not isinstance(defaults[-1], (int, float)) or defaults[-1] > period_ms:
        init.__defaults__ = defaults[:-1] + (int(period_ms),)
    return True
