"""Whether the job of this process has begun to write its output.

The CLI maps a ``ValueError`` to exit status 2 ("bad usage or options") only while the
job is being set up: its options, inputs and outputs are checked then, and a bad one is
the user's to fix.  The same exception type raised once the job runs (in a worker, in an
op, in a store's client) is a failure of the job: exit status 1.  The pipelines mark the
moment (:func:`start`) just before their first write to the output; the CLI reads it
(:func:`started`) when a job raised.
"""

from __future__ import annotations

_started = False


def reset() -> None:
    global _started
    _started = False


def start() -> None:
    global _started
    _started = True


def started() -> bool:
    return _started
