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

This docstring is the one description of the protocol; the modules on either side point
here.

A worker's life, in messages (→: to the worker, on its stdin; ←: to the parent, on its
reply stream).  The parent talks to a worker from one thread at a time (the one that
borrowed it from the pool); the worker reads every message on a reader thread and converts
on its main thread, both sending replies under one lock.

* → :class:`Setup` once, at start, read before anything else.
* A piece-file conversion: → :class:`ConvertTask` (``place`` false); ← :class:`Converted`
  or :class:`Failed`.  The parent sends nothing else to that worker until the answer.
* A placed conversion (the parent's ``Pool._pipeline``): → :class:`ConvertTask` (``place``
  true); ← :class:`Sized` (the worker holds the frames) or :class:`Failed` (it holds
  nothing).  For each :class:`Sized`, in the same order, the parent sends one → :class:`Runs`
  once its shard stream has placed the piece -- usually after the worker's next
  :class:`ConvertTask`, so the worker converts meanwhile -- and the worker's reader thread
  writes them at once and answers ← :class:`Written` or :class:`WriteFailed`.  So after
  → ``ConvertTask``, → ``Runs`` the two answers come in either order; the worker holds at
  most two pieces.  ``Runs`` with no runs: drop the piece, answered ``Written([])``.
  ``Runs`` when the worker holds no piece (a parent out of step) is answered
  :class:`WriteFailed`, never ignored.
* A streamed shard: → :class:`Stream`; ← :class:`Items`, each answered → :data:`NEXT` or
  :data:`STOP`, until ← :class:`End` or :class:`StreamFailed`.  The parent sends nothing
  else to that worker until then; after ``STOP`` it reads on to the ``End``.

When something ends:

* The worker's stdin closes (``Pool.close``, or the parent died): an idle worker exits at
  once; a busy one exits too (``os._exit``: nobody will read its answer, and an op that
  hangs must not keep it alive).  A reply the worker cannot write (the parent is gone)
  ends it the same way.
* The worker dies (a crash in native code, ``os._exit`` or ``SystemExit`` in an op, a
  kill): the parent's next send or read fails, and it raises ``WorkerDied`` (with the exit
  code) to what it was doing; the pool is broken from then on, every later call failing
  the same way.  Runs sent to a dead worker will never be written: the parent cancels
  their shards (``ShardFile.cancel``), whose close then fails instead of waiting for ever.
* The job stops (an error, Ctrl-C, a cancellation): the parent's stream is cancelled (no
  shard waits for ranges), the pool's tasks not started are cancelled, idle workers get
  their stdin closed and busy ones are killed, then every worker is reaped
  (``Pool.close``).  Workers ignore SIGINT: only the parent handles Ctrl-C.
* A conversion that raises (an op's error, a bad input) is not an end: ← :class:`Failed`
  (or :class:`StreamFailed`) with the traceback, and the worker takes its next task.
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Tuple

# (what, reject) as given to a streamed shard's ``note`` callback: the counts of
# ``transforms.shard_elements.shard_elements``.  Plain tuples: there is one per record.
Note = Tuple[str, Any]


# parent → worker


class Setup(NamedTuple):
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
    "Setup",
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
