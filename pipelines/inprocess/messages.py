"""The messages between the in-process driver's pool and its worker processes.

The parent side is :class:`pipelines.inprocess.handle.Worker` (driven by
:class:`pipelines.inprocess.pool.Pool`), the child side :mod:`pipelines.inprocess.worker`.  Each
message is pickled on its own onto the worker's stdin (parent to worker) or its reply
stream (worker to parent), and its class says what it is: the receiver dispatches with
``isinstance``, never ``==`` (as tuples, ``NEXT == STOP`` and ``Sized(i) == Converted(i)``).
They are NamedTuples because a NamedTuple pickles as a tuple of its fields plus its class's
name (a few dozen bytes more than a bare tuple), and because this module then imports
nothing but :mod:`typing`, which a worker imports anyway: a worker must start without Beam,
TensorFlow or the pool's machinery (``pipelines.inprocess.worker``).

A worker's life, in messages (→: to the worker, ←: to the parent):

* → :class:`Job` once, at start.
* A piece-file conversion: → :class:`ConvertTask` (``place`` false); ← :class:`Converted` or
  :class:`Failed`.
* A placed conversion: → :class:`ConvertTask` (``place`` true); ← :class:`Sized` or
  :class:`Failed`.  Then, for each :class:`Sized` in order, → :class:`Runs` (usually after
  the worker's next :class:`ConvertTask`); ← :class:`Written` or :class:`WriteFailed`, in any
  order with the next task's answer.
* A streamed shard: → :class:`Stream`; ← :class:`Items`, answered → :data:`NEXT` or
  :data:`STOP`, until ← :class:`End` or :class:`StreamFailed`.
* The worker exits when its stdin closes.
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Tuple

# (what, reject) as given to a streamed shard's ``note`` callback: the counts of
# ``transforms.shard_elements.shard_elements``.  Plain tuples: there is one per record.
Note = Tuple[str, Any]


# parent → worker


class Job(NamedTuple):
    """→ The job, once, the first message a worker reads: ``blob`` is its
    :class:`~pipelines.job.kinds.tfrecord.config.ConvertConfig` pickled with cloudpickle
    (:func:`pipelines.inprocess.pool.pack`), ``work`` its work directory (piece files);
    ``log_level`` and ``log_format``: the parent's logging, which the worker's log records
    follow, redacted and escaped (``transforms.redact.log_settings``)."""

    blob: bytes
    work: str
    log_level: int = 30  # logging.WARNING, without importing logging here
    log_format: Optional[str] = None


class ConvertTask(NamedTuple):
    """→ Convert input shard number ``index`` at ``url``.  ``place`` false: into a piece
    file, answered :class:`Converted`.  ``place`` true (the shard stream places the
    pieces): the worker keeps the piece's frames (spilling to its piece file beyond
    ``HOLD_BYTES``), answers :class:`Sized` and waits for its :class:`Runs`.  Either way
    :class:`Failed` if the conversion raised."""

    index: int
    url: str
    place: bool


class Run(NamedTuple):
    """Records ``lo..hi-1`` of a held piece go at byte ``offset`` of the final shard's
    temporary file ``path`` (one item of :class:`Runs`)."""

    path: str
    offset: int
    lo: int
    hi: int


class Runs(NamedTuple):
    """→ Where the oldest piece the worker holds goes, once the shard stream has placed it
    (one per :class:`Sized`, in the same order); ``runs`` empty: drop the piece.  The
    worker's reader thread writes them as soon as they come, while the worker converts its
    next task, and answers :class:`Written` or :class:`WriteFailed`."""

    runs: List[Run]


class Stream(NamedTuple):
    """→ Send the elements of the shard at ``url`` for ``Dataset.load(template)``
    (``transforms.shard_elements``), ``chunk`` at a time: answered :class:`Items` (each
    waiting for :data:`NEXT` or :data:`STOP`), then :class:`End` or :class:`StreamFailed`."""

    url: str
    chunk: int


class Next(NamedTuple):
    """→ The answer to :class:`Items`: send the next chunk (use :data:`NEXT`)."""


class Stop(NamedTuple):
    """→ The answer to :class:`Items` when the consumer is gone: end the shard now, with an
    empty :class:`End` (use :data:`STOP`)."""


NEXT = Next()
STOP = Stop()


# worker → parent


class Converted(NamedTuple):
    """← A :class:`ConvertTask` without ``place`` done: ``piece``, what
    ``pipelines.job.kinds.tfrecord.piece.convert_to_piece`` returned (a ``ConvertedPiece``: its summary and
    sizes), its piece file written."""

    piece: Any


class Sized(NamedTuple):
    """← A :class:`ConvertTask` with ``place`` done: ``piece``, the ``ConvertedPiece``
    (its summary and sizes, no frames); the worker holds the frames until its
    :class:`Runs` come."""

    piece: Any


class Failed(NamedTuple):
    """← A :class:`ConvertTask` raised: ``trace``, its traceback in the worker (which goes on
    with its next task)."""

    trace: str


class Written(NamedTuple):
    """← A :class:`Runs` written: ``crcs``, the CRC-32C of each run, in order."""

    crcs: List[int]


class WriteFailed(NamedTuple):
    """← Writing a :class:`Runs` raised: ``trace``, its traceback in the worker."""

    trace: str


class Items(NamedTuple):
    """← The next ``chunk`` elements of a :class:`Stream`, and ``notes``, the counts since
    the last message; the worker waits for :data:`NEXT` or :data:`STOP`."""

    elements: List[Any]
    notes: List[Note]


class End(NamedTuple):
    """← A :class:`Stream` finished (or stopped): its last ``elements`` (maybe none), and
    ``notes``, the counts since the last message."""

    elements: List[Any]
    notes: List[Note]


class StreamFailed(NamedTuple):
    """← A :class:`Stream` raised: ``trace``, its traceback in the worker, and ``notes``,
    the counts since the last message (the elements before it were sent)."""

    trace: str
    notes: List[Note]


__all__ = [
    "Job",
    "ConvertTask",
    "Run",
    "Runs",
    "Stream",
    "Next",
    "Stop",
    "NEXT",
    "STOP",
    "Converted",
    "Sized",
    "Failed",
    "Written",
    "WriteFailed",
    "Items",
    "End",
    "StreamFailed",
    "Note",
]
