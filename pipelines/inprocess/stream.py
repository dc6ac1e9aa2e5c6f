"""Final TFRecord shards written while the input shards are still converting (the
in-process driver's way to write them).

The planned path (``pipelines.job.kinds.tfrecord.plan.stream_plan`` + ``write_shard``, which the Beam
graph takes) waits for every piece, then copies byte ranges into final shards.  Here
pieces are taken in input order as they finish (from the driver's converting threads in
that order, or through :class:`PieceFeed`: placed in any order, from any thread), and
their frames go straight into the open final shard, under the same greedy rule
(:class:`transforms.tfrecord.framing.Packer`, which depends only on the sizes seen so far)
-- so the shards, their names and bytes are the same as the planned path's (tested), and
the copy overlaps the conversion of later pieces.  The driver's worker processes do not
hand their frames over at all: :meth:`PieceFeed.place` reserves each run's byte range in
its final shard (:meth:`ShardFile.reserve <pipelines.job.kinds.tfrecord.shardfile.ShardFile.reserve>`),
the worker writes it there, and the shard's CRC-32C is combined from the runs' CRCs when
it closes.

Only for outputs whose shard names do not depend on the shard count (``{}`` templates:
``train-{}.record`` -> ``train-1.record`` ...): a ``-NNNNN-of-NNNNN`` name is only known
once every record has been counted.  A finished shard is made durable (fsync, rename) on a
background thread while the next one fills, then journaled in the job's work directory
(``pipelines.inprocess.journal``): ``resume`` continues after the journaled shards, and the
pieces wholly inside them are deleted.  A shard for a bucket waits for that thread's upload
in a local spool file (``transforms.stores.upload``): when uploads are slower than conversion, the
writer finishing a shard waits while more than the spool limit (``spool_limit``: the
job's ``ConvertConfig.spool_limit`` / ``--spool-limit``, else ``$TAR2TF_SPOOL_LIMIT``, else
1 GB) of finished shards wait, so the spool holds at most that plus the shard being written
(a shard larger than the limit goes alone).  Once an upload has failed, or the job stops
(:meth:`abort`, :meth:`cancel`), the shards still queued are dropped, not uploaded.  A
piece the in-process driver held in memory (``ConvertedPiece.frames``) is written once,
here.

Which thread owns what (every other thread reaches it only the way the last column says):

==============================  ===============================  ==============================
state                           owner                            how other threads reach it
==============================  ===============================  ==============================
a stream's packer, its          the stream's writer: the one     not at all; a thread that
``current`` shard, shard        thread that calls ``add``,       joined the writer may call
count, the pieces ended, the    ``finish``, ``abort`` (the       ``abort`` or ``finish`` after
close futures                   driver's, or a feed's thread)    it (``PieceFeed``)
a finished shard (sealed)       the closer thread                handed over by the closer's
                                                                 queue (``submit``)
the live shards, the spooled    ``_Shards``, under its one lock  ``ShardStream.cancel`` (any
bytes, the first failed close,                                   thread), the closer, the
the stream's stop                                                writer
a shard's reserved ranges and   its ``RangeLedger``, under its   ``ShardFile.filled`` (pool
their CRC-32C                   one lock (``shardfile``)         threads), ``ShardFile.cancel``
                                                                 (any thread)
a feed's pieces placed and not  the feed's one lock              ``PieceFeed.place`` (pool
added, its next index, closed                                    threads), the feed's thread,
                                                                 ``PieceFeed.pieces``
a placed piece's runs           the feed's thread (sets them     the future ``place`` waits on
                                once)
how a feed's thread ended       the feed's thread (sets it once  a future, read after joining
                                as it ends)                      the thread
==============================  ===============================  ==============================
"""

from __future__ import annotations

import itertools
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from pipelines.inprocess import journal as shard_journal
from pipelines.job import names, workfiles
from pipelines.job.kinds.tfrecord import piecefiles
from pipelines.job.kinds.tfrecord.piece import ConvertedPiece
from pipelines.job.kinds.tfrecord.plan import Oversized
from pipelines.job.kinds.tfrecord.shardfile import ShardFile
from pipelines.job.kinds.tfrecord.summary import PieceSummary
from transforms.stores import StoreConfig, get_store, split_url, upload
from transforms.tfrecord.framing import Packer

log = logging.getLogger("tar2tf")


def can_stream(output: str) -> bool:
    """Whether final shard names are known before the last record is (``{}`` or
    ``{:05d}`` templates)."""
    return names.is_template(output)


class _Shards:
    """What the stream's writer thread, its closer thread and :meth:`ShardStream.cancel`
    (any thread) share, under its one lock: the shards opened and not yet closed or
    dropped (what a cancellation must reach), the bytes of those handed to the closer and
    not closed yet (the spool), the first close that failed, and the stream's stop."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._live: List[ShardFile] = []
        self._waiting = 0
        self._close_error: Optional[BaseException] = None
        self._stopped: Optional[BaseException] = None

    def opened(self, shard: ShardFile) -> Optional[BaseException]:
        """The writer opened ``shard``; the stream's stop if it came first (in the same
        step, so that a shard is either reached by :meth:`stop` or told of it here)."""
        with self._cv:
            self._live.append(shard)
            return self._stopped

    def handed(self, shard: ShardFile) -> None:
        """The writer handed ``shard`` (sealed) to the closer."""
        with self._cv:
            self._waiting += shard.bytes

    def make_room(self, size: int, limit: int) -> None:
        """Wait while the shards handed over and not closed, and ``size`` more bytes, would
        be more than ``limit`` (never when none waits); raises a failed close's error or the
        stop's instead of waiting for ever."""
        with self._cv:
            while (
                self._waiting
                and self._waiting + size > limit
                and self._close_error is None
                and self._stopped is None
            ):
                self._cv.wait()
            if self._close_error is not None:
                raise self._close_error
            if self._stopped is not None:
                raise self._stopped

    def failures(self) -> Tuple[Optional[BaseException], Optional[BaseException]]:
        """The first failed close and the stop, as they are now."""
        with self._cv:
            return self._close_error, self._stopped

    def settled(self, shard: ShardFile, handed: bool, error: Optional[BaseException]) -> None:
        """``shard`` is closed, or dropped (``error``: why it failed, if it did); ``handed``:
        it was handed to the closer (its bytes leave the spool)."""
        with self._cv:
            if shard in self._live:
                self._live.remove(shard)
            if handed:
                self._waiting -= shard.bytes
            if error is not None and self._close_error is None:
                self._close_error = error
            self._cv.notify_all()

    def stop(self, exc: BaseException) -> List[ShardFile]:
        """The stream stops (the first ``exc`` stays): a writer waiting for room gives up;
        the shards live now, which the caller cancels."""
        with self._cv:
            self._stopped = self._stopped or exc
            self._cv.notify_all()
            return list(self._live)


class ShardStream:
    """Feed pieces (:class:`~pipelines.job.kinds.tfrecord.piece.ConvertedPiece`) with :meth:`add` in
    input order, then
    :meth:`finish` for the manifest rows; :meth:`abort` on failure.

    ``journal``: the job's work directory.  Each shard, once durable, gets its journal
    entry there (``pipelines.inprocess.journal``), and the pieces whose records all sit in
    journaled shards are deleted.  :meth:`abort` then keeps the finished shards, which a
    rerun with ``resume`` continues from (``resume``: the point :func:`~pipelines.
    shard_journal.load` found; the stream starts after its shards).  Without a journal,
    :meth:`abort` removes the shards this stream finished, so nothing is left behind.

    ``spool_limit`` (remote outputs; default :func:`transforms.stores.upload.spool_limit`): the
    bytes of finished shards that may wait for the closer thread's upload before the
    writer waits too (:meth:`_make_room`).

    Which thread owns what: the module's docstring.
    """

    def __init__(
        self,
        output: str,
        max_bytes: Optional[int],
        max_records: Optional[int],
        config: Optional[StoreConfig] = None,
        dali_index: bool = False,
        journal: Optional[str] = None,
        resume: Optional[shard_journal.ResumePoint] = None,
        spool_limit: Optional[int] = None,
        guard: Optional[Callable[[], None]] = None,
    ):
        if not can_stream(output):
            raise ValueError(f"streamed shards need a '{{}}' output template, not {output!r}")
        self.output, self.config, self.dali_index = output, config, dali_index
        self.journal = journal
        # called before each shard is renamed into place (the job still holds its output's
        # lock: lifecycle.check_held); what it raises stops the job, that shard unwritten
        self.guard = guard
        self.packer = Packer(max_bytes, max_records)
        self.oversized = Oversized(max_bytes)  # said once, when the stream finishes
        self.current: Optional[ShardFile] = None
        resume = resume or shard_journal.ResumePoint()
        self._before = list(resume.rows)  # journaled by a run before
        self.count = len(self._before)
        self._skip = (resume.next_piece, resume.skip)
        self._ended: List[PieceSummary] = []  # pieces finished while the current shard is open
        self._last = self._skip[0] - 1  # index of the last piece added
        self._closing: List[Future] = []
        self._closer = ThreadPoolExecutor(1, thread_name_prefix="tar2tf-shard-close")
        self._shards = _Shards()
        self.done = False  # finished or aborted
        # a shard for a bucket waits for its upload in a local spool file: at most this many
        # bytes of them (None: a local output, whose waiting shards are the output itself)
        self.remote = split_url(output)[0] != ""
        self.spool_limit = (spool_limit or upload.spool_limit()) if self.remote else None

    def _close_current(self, position: Tuple[int, int], wait: bool = True) -> None:
        """Close the open shard, if any, in the background; ``position`` = (piece index,
        record within the piece) is where the next shard starts.  ``wait``: first wait
        for room in the spool (:meth:`_make_room`)."""
        shard = self.current
        if shard is not None:
            entry = (self._ended, list(position))  # the journal's, once the shard is durable
            # sealed here, on the writer, so that the closer only reads what is final; and
            # parked: it may wait long (for the closer, for workers' ranges)
            shard.park()
            if wait:
                self._make_room(shard.bytes)
            self.current = None
            self._shards.handed(shard)
            self._closing.append(self._closer.submit(self._close, shard, self.count, entry))
            self._ended = []

    def _next_shard(self, position: Tuple[int, int]) -> None:
        """Close the current shard and open the next, whose first record is ``position``."""
        self._close_current(position)
        self.count += 1
        shard = ShardFile(names.fill(self.output, self.count), self.config, self.dali_index)
        self.current = shard
        stopped = self._shards.opened(shard)
        if stopped is not None:  # opened after cancel() looked: its ranges may never be filled
            shard.cancel(stopped)

    def _make_room(self, size: int) -> None:
        """Before a finished shard of ``size`` bytes is handed to the closer of a remote
        output: wait while the shards it has not closed yet and this one would spool more
        than :attr:`spool_limit` (never for a first one: a shard larger than the limit goes
        alone).  Raises the error of a close that failed (the job fails now, not at
        :meth:`finish`) or of :meth:`cancel`, so the writer never waits for ever."""
        if self.spool_limit is not None:
            self._shards.make_room(size, self.spool_limit)

    def _close(self, shard: ShardFile, n: int, entry: Tuple[list, list]) -> Dict[str, Any]:
        """The closer thread's work for one shard: its manifest row."""
        error: Optional[BaseException] = None
        try:
            failed, stopped = self._shards.failures()
            if (failed is not None or stopped is not None) and self.remote:
                # an earlier shard's upload failed, or the job is stopping (abort, cancel):
                # the shards queued behind are dropped (spool file removed), not uploaded
                # under their final names only to be deleted again -- or, with a journal,
                # kept past a gap that resume does not read beyond, with their pieces
                # already deleted; a stopping job need not wait for their uploads either
                # (with a journal, resume converts their input shards again).  (A local
                # shard may wait for ranges worker processes still write into its temp
                # file: it is closed as before.)
                why = (
                    f"an earlier shard failed ({failed})"
                    if failed is not None
                    else f"the job stopped ({stopped})"
                )
                skipped = RuntimeError(f"{shard.path} not written: {why}")
                shard.abort(skipped)
                raise skipped from (failed or stopped)
            return self._close_shard(shard, n, entry)
        except BaseException as e:
            error = e
            raise
        finally:
            self._shards.settled(shard, handed=True, error=error)

    def _close_shard(self, shard: ShardFile, n: int, entry: Tuple[list, list]) -> Dict[str, Any]:
        row = shard.close(self.guard)
        if self.journal is not None:
            pieces, position = entry
            shard_journal.write(self.journal, n, row, pieces, position, self.config)
            for piece in pieces:  # wholly inside journaled shards: not needed again
                if piece.crc32c is not None:  # a piece file (a piece held in memory has none)
                    store = get_store(piece.piece, self.config)
                    store.delete(piece.piece)
                    store.delete(workfiles.sidecar_of(piece.piece))
        return row

    def _runs(self, index: int, sizes: List[int], skip: int):
        """Records ``skip..`` of piece ``index`` as runs ``(lo, hi)`` that each go whole into
        the open shard; the next shard opens between two runs (after the caller wrote the
        first)."""
        lo = skip
        for r in range(skip, len(sizes)):
            if self.packer.starts_shard(sizes[r]):
                if r > lo:
                    yield lo, r
                self._next_shard((index, r))
                lo = r
                self.oversized.note(sizes[r], self.current.path)
        if len(sizes) > lo:
            yield lo, len(sizes)

    def add(self, piece: ConvertedPiece, place: Optional[Future] = None) -> None:
        """Write ``piece``'s records into the final shards.  ``place``: a worker process
        holds its frames (:meth:`PieceFeed.place`): the future gets the runs it writes, or
        the error that stopped this call."""
        try:
            self._add(piece, place)
        except BaseException as e:
            if place is not None and not place.done():  # this thread is its only setter
                place.set_exception(e)
            raise

    def _add(self, piece: ConvertedPiece, place: Optional[Future]) -> None:
        summary = piece.summary
        index = summary.index
        sizes = piece.sizes  # only this piece's: what is kept is its summary
        if sizes is None:  # a piece an interrupted run left: its record file has them
            sizes = piecefiles.sizes(summary, self.config).tolist()
        frames = piece.frames  # a piece kept in memory: written once, here
        skip = self._skip[1] if index == self._skip[0] else 0  # already in journaled shards
        self._last = index
        if place is not None:
            runs = []
            for lo, hi in self._runs(index, sizes, skip):
                shard = self.current
                runs.append((shard, shard.reserve(sum(sizes[lo:hi]), sizes[lo:hi]), lo, hi))
            place.set_result(runs)
        elif frames is not None:
            for lo, hi in self._runs(index, sizes, skip):
                self.current.write(frames[lo:hi], sizes[lo:hi])
        elif len(sizes) > skip:
            url = summary.piece
            ends = list(
                itertools.accumulate(sizes, initial=0)
            )  # record r is bytes [ends[r], ends[r + 1])
            with get_store(url, self.config).open_read(url) as src:
                for lo, hi in self._runs(index, sizes, skip):
                    self.current.copy(src, ends[lo], ends[hi] - ends[lo], sizes[lo:hi])
        self._ended.append(summary)

    def finish(self) -> List[Dict[str, Any]]:
        """The manifest rows, once every shard is closed (the writer's last call)."""
        self.done = True
        self._close_current((self._last + 1, 0), wait=False)  # the closer's queue drains next
        self._closer.shutdown(wait=True)
        try:
            rows = self._before + [f.result() for f in self._closing]
            self.oversized.say()
            return rows
        except BaseException:
            if self.journal is None:  # with a journal, what was finished is kept for resume
                self._remove_finished()
            raise

    def abort(self, exc: Optional[BaseException] = None) -> None:
        """The job failed: the shard being written is dropped.  The shards this stream
        finished stay if they are journaled (a rerun with ``resume`` continues after them);
        without a journal they are removed too, so the failed job leaves no output of its
        own (as on the planned path, which writes nothing before every piece is done).
        Called by the writer, or by a thread that joined it (:class:`PieceFeed`)."""
        self.done = True
        self.cancel(exc)
        shard, self.current = self.current, None
        if shard is not None:
            shard.abort(exc)
            self._shards.settled(shard, handed=False, error=None)
        self._closer.shutdown(wait=True)
        if self.journal is None:
            self._remove_finished()

    def cancel(self, exc: Optional[BaseException] = None) -> None:
        """Ranges left to worker processes will not be filled: the shards waiting for
        them fail (see :meth:`ShardFile.cancel`) instead of waiting for ever.  From any
        thread."""
        exc = exc or RuntimeError("the shard stream was stopped")
        # every live shard: one the writer opens later is told by _Shards.opened
        for shard in self._shards.stop(exc):
            shard.cancel(exc)

    def _remove_finished(self) -> None:
        for f in self._closing:
            if f.exception() is None:
                row = f.result()
                store = get_store(row["path"], self.config)
                store.delete(row["path"])
                if self.dali_index:
                    store.delete(row["path"] + ".idx")


class MissingPieces(RuntimeError):
    """The job finished but some pieces never reached the feed."""


class _Outcome(NamedTuple):
    """How a :class:`PieceFeed`'s writer thread ended."""

    rows: Optional[List[Dict[str, Any]]]  # the stream finished once every piece was in
    error: Optional[BaseException]  # adding a piece raised: the stream is not finished
    finish_error: Optional[BaseException]  # finishing the stream raised (it cleaned up)


class PieceFeed:
    """Pieces placed in any order, from any thread (the worker pool's threads, one per
    worker process: :meth:`place`); a writer thread adds them to the :class:`ShardStream`
    in input order (piece ``index`` 0, 1, 2, ...) as soon as each one's predecessors are
    in.

    ``first``: the first piece index (a resumed job's first piece after its journal).
    ``expect``: the job's piece count.  When the last of them is in, the writer closes the
    last shard at once, and :meth:`finish` returns its result.  Until :meth:`finish` has
    returned, :meth:`abort` (a failed job) still aborts the stream (see
    :meth:`ShardStream.abort` for what stays).

    Which thread owns what: the module's docstring.
    """

    def __init__(self, stream: ShardStream, expect: Optional[int] = None, first: int = 0):
        self.stream = stream
        self._expect = expect
        self.settled = False  # finish() returned the rows, or cleaned up after its error
        self._cv = threading.Condition()
        # index -> the piece, and the future of its PieceFeed.place
        self._pending: Dict[int, Tuple[ConvertedPiece, Future]] = {}
        self._placed: Dict[int, PieceSummary] = {}
        self._next = first  # a resumed job's stream starts after its journaled pieces
        self._closed = False
        self._outcome: "Future[_Outcome]" = Future()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tar2tf-shard-stream")
        self._thread.start()

    def place(self, piece: ConvertedPiece) -> Optional[List[Tuple[ShardFile, int, int, int]]]:
        """Offer a piece whose frames a worker process holds, and wait for the stream to
        reach it: returns its runs ``(shard, offset, lo, hi)`` -- records ``lo..hi-1``
        go at ``offset`` of ``shard.local_path``, and the writer reports each run with
        ``shard.filled(offset, crc)`` -- or None if the piece was placed before (a second
        conversion of a piece is never written twice).  Raises if the stream stopped first."""
        fut: Future = Future()
        index = piece.summary.index
        with self._cv:
            if index < self._next or index in self._placed:
                return None
            if self._closed:
                raise RuntimeError("the shard stream was stopped")
            self._pending[index] = (piece, fut)
            self._placed[index] = piece.summary
            self._cv.notify()
        return fut.result()

    def _fail_pending(self, exc: BaseException) -> None:
        """Pieces placed but never added: their :meth:`place` calls raise ``exc``."""
        with self._cv:
            self._closed = True
            for _, fut in self._pending.values():
                fut.set_exception(exc)
            self._pending.clear()
            self._cv.notify()

    def pieces(self) -> List[PieceSummary]:
        """The summaries of the pieces placed so far, in input order."""
        with self._cv:
            return [self._placed[i] for i in sorted(self._placed)]

    def _take(self) -> Optional[Tuple[ConvertedPiece, Future, bool]]:
        """The next piece in input order once it is placed, and whether it is the last
        expected; None once the feed is closed without it."""
        with self._cv:
            while self._next not in self._pending and not self._closed:
                self._cv.wait()
            if self._next not in self._pending:
                return None
            piece, place = self._pending.pop(self._next)
            self._next += 1
            return piece, place, self._next == self._expect

    def _run(self) -> None:
        """The writer thread."""
        rows = error = finish_error = None
        try:
            while True:
                taken = self._take()
                if taken is None:
                    break
                piece, place, last = taken
                self.stream.add(piece, place)
                del piece, place, taken  # written: its sizes (and held frames) go while this waits
                if last:  # every piece is in: close the last shard now
                    try:
                        rows = self.stream.finish()
                    except BaseException as e:
                        finish_error = e
                    break
        except BaseException as e:
            error = e
            self._fail_pending(e)
        self._outcome.set_result(_Outcome(rows, error, finish_error))

    def _close(self) -> _Outcome:
        """Stop taking pieces, wait for the writer thread to end: how it ended."""
        self._fail_pending(RuntimeError("the shard stream was stopped"))
        self._thread.join()
        return self._outcome.result()

    def finish(self, count: int) -> List[Dict[str, Any]]:
        """The manifest rows, once pieces ``0 .. count-1`` are all written; raises the
        writer's error, or :class:`MissingPieces` (after :meth:`abort`) if some never came."""
        outcome = self._close()
        with self._cv:
            added = self._next
        try:  # every way out leaves the stream finished or cleaned up: settled
            if outcome.error is not None:
                self.stream.abort(outcome.error)
                raise outcome.error
            if outcome.finish_error is not None:
                raise outcome.finish_error
            if added != count:
                self.stream.abort()
                raise MissingPieces(
                    f"{count - added} of {count} pieces never reached the shard stream"
                )
            return outcome.rows if outcome.rows is not None else self.stream.finish()
        finally:
            self.settled = True

    def abort(self, exc: Optional[BaseException] = None) -> None:
        self.stream.cancel(exc)  # the writer thread may wait in finish() for ranges of dead workers
        self._close()
        self.stream.abort(exc)
