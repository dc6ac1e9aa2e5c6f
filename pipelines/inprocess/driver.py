"""The in-process driver: one of the lifecycle's two drivers (``pipelines.job.lifecycle.run``),
beside the Beam graph, for any kind of job, with threads (or worker processes) of this
process and no Beam.

``Dataset.load(path=..., remote_exec=False)`` uses it, so do ``tar2tf convert`` and
``tar2tf pcr`` by default, and ``remote_exec=None`` when an op cannot be pickled (a Beam
job must pickle its DoFns to ship them).  The job's steps are the kind's, the ones the Beam
graph runs (``Kind.convert``, ``Kind.plan``, ``Kind.write``, ``Kind.finish``), so the
output files are byte-identical to a Beam run with the same inputs and options (tested).
What the driver asks of the format is one answer (``Kind.in_process``:
:class:`~pipelines.job.lifecycle.InProcessPlan`); it never looks at the format itself:

* **planned** (any kind): the units convert on threads, in unit order; once every one is
  converted the kind's plan is written on threads, then the kind's finish.
* **streamed** (the plan says its outputs may be written in unit order: a TFRecord ``{}``
  template): the final shards fill while later units still convert
  (:mod:`pipelines.inprocess.stream`).  Pieces converted on this process's threads reach
  the stream in memory (up to :data:`HOLD_BYTES` each, then spilled to their file), so each
  byte is written once.  A rerun with ``resume=True`` after a crash continues after the
  shards the stream finished (:mod:`pipelines.inprocess.journal`).
* **worker processes** (the plan says its units can convert in them,
  ``pipelines.inprocess.pool``): they convert instead of the threads; with a streamed,
  local output they write their frames into the final shards where the stream places them
  (``placed``).

Who owns what: the driver's thread owns the job's list of summaries, its counters and its
progress; converting threads only return results (:func:`_threaded` hands them over in
unit order through futures); the stream and the pool own their own state (their module
docstrings say how).
"""

from __future__ import annotations

import functools
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from pipelines.inprocess import HOLD_BYTES
from pipelines.inprocess import journal as shard_journal
from pipelines.inprocess import pool as shard_pool
from pipelines.inprocess import stream as shard_stream
from pipelines.job import kinds, lifecycle
from pipelines.job.lifecycle import (
    Converted,
    ConvertResult,
    InProcessPlan,
    Job,
    Kind,
    StreamSpec,
)
from pipelines.job.progress import Progress
from transforms.stores import StoreConfig, split_url
from transforms.stores.retry import interrupt_reads

log = logging.getLogger("tar2tf")


IO_THREADS = 8  # converter threads when the inputs or the work files are in a bucket


def auto_processes(workers: int, units: int, ops: bool = True) -> int:
    """The automatic worker-process count: one per worker, when there is more than one of
    each (a single worker or unit gains nothing from a process) and ``ops``: the job has
    ops that do real work per record (``InProcessPlan.heavy``), or its workers write
    their frames into local final shards themselves (a local ``{}`` output: nothing then
    passes through this process).  Otherwise (a passthrough or selections whose frames
    pass through this process) the work is reading, CRC and writing, and threads convert
    as fast without a worker's start (docs/benchmarks.md)."""
    return min(int(workers), units) if ops and int(workers) > 1 and units > 1 else 0


def run(kind: Kind, cfg, num_workers: int = 1) -> ConvertResult:
    """The job of ``kind`` with ``num_workers`` threads and no Beam (and ``cfg.processes``
    worker processes converting its units, if set and the kind's units can)."""
    return lifecycle.run(kind, cfg, InProcessDriver(num_workers))


def convert_in_process(cfg, num_workers: int = 1) -> ConvertResult:
    """Like :func:`pipelines.beam.convert.convert` (or ``convert_pcr`` for a ``PcrConfig``),
    run by this driver: the job's kind is its config's (``pipelines.job.kinds.of``)."""
    return run(kinds.of(cfg), cfg, num_workers)


def new_stream(
    spec: StreamSpec,
    store: Optional[StoreConfig] = None,
    work: Optional[str] = None,
    resume: Optional[shard_journal.ResumePoint] = None,
    held: Optional[Tuple[str, str]] = None,
) -> shard_stream.ShardStream:
    """The shard stream ``spec`` describes (``Kind.in_process``); ``work``: the work
    directory its journal goes to; ``resume``: the journal of an interrupted run to
    continue (see ``pipelines.inprocess.journal``); ``held``: the job's output lock
    (``Job.held``), read again before each shard is renamed into place."""
    return shard_stream.ShardStream(
        spec.output,
        spec.max_bytes,
        spec.max_records,
        store,
        spec.dali_index,
        journal=work,
        resume=resume,
        spool_limit=spec.spool_limit,
        guard=None if held is None else functools.partial(lifecycle.check_held, held, store),
    )


class InProcessDriver(lifecycle.Driver):
    """The driver (module docstring).  :meth:`build` decides, before the job writes
    anything, how it runs: what can fail there (ops that cannot be pickled for worker
    processes) leaves no file behind."""

    def __init__(self, num_workers: int = 1):
        self.num_workers = num_workers

    def build(self, job: Job) -> None:
        kind, cfg = job.kind, job.cfg
        plan: InProcessPlan = kind.in_process(cfg)
        if plan.refused is not None:
            raise ValueError(plan.refused)
        self.plan = plan
        # only a streamed job continues an interrupted run's journal (resume=True); any
        # other starts over, its journal cleared once it has started (execute)
        self.continues = cfg.resume and plan.stream is not None
        self.stages = kind.stages(cfg)
        self.resumed = self._resume_point(job)  # read only
        left = len(job.units) - self.resumed.next_piece
        # worker processes pay off for heavy ops, and for any job whose workers write
        # their frames into local final shards themselves: nothing then passes through
        # this process (auto_processes)
        self.local_output = split_url(cfg.output)[0] == ""
        placed = plan.stream is not None and self.local_output
        auto = cfg.processes is None
        if not plan.processes:
            procs = 0
        elif auto:
            procs = auto_processes(self.num_workers, left, plan.heavy or placed)
        else:  # never more workers than units to convert: one more would only start and wait
            procs = min(int(cfg.processes), left)
        self.procs = procs
        # automatic: ops that cannot be pickled (the reason this path runs) stay on threads
        self.blob = shard_pool.pack(cfg, required=not auto) if procs else None

    def _resume_point(self, job: Job) -> shard_journal.ResumePoint:
        if self.continues:
            spec = self.plan.stream  # this output's names only
            point = shard_journal.load(job.work, job.cfg.store, spec.output)
            if point is not None:
                log.info(
                    "resumed: %d final shard(s) of an interrupted run kept; converting from "
                    "input shard %d",
                    point.shards,
                    point.next_piece,
                )
                return point
        return shard_journal.ResumePoint()

    def execute(self, job: Job):
        cfg, resumed = job.cfg, self.resumed
        if not self.continues:
            shard_journal.clear(job.work, cfg.store)
        stream = self._new_stream(job)
        tasks = job.units[resumed.next_piece :]
        tally = _Tally(job, resumed)
        try:
            if self.blob is not None and stream is not None and self.local_output:
                # local final shards: the workers write their frames into them where the
                # stream places them, converting in unit order
                feed = shard_stream.PieceFeed(stream, len(job.units), resumed.next_piece)
                rows = self._placed(job, feed, tasks, tally)
                summaries = list(resumed.pieces) + feed.pieces()
            else:
                rows, summaries = self._converted(job, stream, tasks, tally)
        finally:
            tally.close()
        manifest = lifecycle.finish(job, rows, summaries)
        return tally.counters, manifest

    def _new_stream(self, job: Job) -> Optional[shard_stream.ShardStream]:
        """The stream of the job's final shards, when the kind's plan has one; journaled in
        the work directory, each shard's rename guarded by the output's lock."""
        spec = self.plan.stream
        if spec is None:
            return None
        return new_stream(spec, job.cfg.store, job.work, self.resumed, job.held)

    def _placed(self, job: Job, feed, tasks: Sequence, tally: "_Tally") -> List[Dict[str, Any]]:
        """The rows of a job whose worker processes write into the final shards where
        ``feed`` places their pieces; the pool converts ``tasks`` in order, this thread
        takes the results."""
        pool = shard_pool.Pool(self.blob, job.work, self.procs, tasks=tasks, place=feed.place)
        try:
            for index, url in tasks:
                tally.done(pool.convert(index, url).summary)  # raises a worker's error
            return feed.finish(len(job.units))
        except BaseException as e:
            if not feed.settled:
                feed.abort(e)  # the shards it finished stay if journaled, for resume=True
            raise
        finally:
            pool.close()

    def _converted(self, job: Job, stream, tasks: Sequence, tally: "_Tally"):
        """``(rows, summaries)`` of a job converted on threads (or by worker processes that
        write work files): streamed into the final shards as units finish, or planned
        and written once every unit is converted."""
        kind, cfg, work = job.kind, job.cfg, job.work
        workers = shard_pool.Pool(self.blob, work, self.procs) if self.blob is not None else None
        # pieces converted on these threads reach the stream in memory (written once)
        hold = HOLD_BYTES if stream is not None and workers is None else 0
        threads = max(1, int(self.num_workers), self.procs)
        if workers is None and tasks and lifecycle.reaches_bucket(tasks[0], work):
            # a unit's fetch and its work file's upload are round trips to a bucket, one
            # after another within a unit: more units at once keep requests in flight (the
            # CPU work per unit is the same); the held pieces share the same budget
            threads, hold = max(threads, IO_THREADS), hold * threads // max(threads, IO_THREADS)

        def one(unit) -> Tuple[Converted, bool]:  # (the unit, whether it was reused)
            found = lifecycle.reused(kind, cfg, work, unit)
            if found is not None:  # verified work an interrupted run left
                return Converted(found), True
            if workers is not None:
                return workers.convert(*unit), False
            return kind.convert(cfg, work, unit, self.stages, hold), False

        # one thread writing to a local disk: convert on this thread between writes.  A
        # second thread would only overlap copies into the page cache, and the two
        # threads' hand-offs of the GIL cost more than that (docs/benchmarks.md); output
        # elsewhere is a network upload, which a converter thread keeps overlapping with
        # the next fetch
        inline = threads == 1 and workers is None and self.local_output
        converted = _inline(one, tasks) if inline else _threaded(one, tasks, threads)
        summaries = list(self.resumed.pieces)
        try:
            for piece, reused in converted:
                summaries.append(piece.summary)  # all the job keeps of it
                tally.done(piece.summary)
                tally.reused += reused
                if stream is not None:
                    stream.add(piece)  # in unit order, while later units convert
                del piece  # its sizes and held frames go once written
            if stream is not None:
                return stream.finish(), summaries
            # the lock read again before the first final output is written (as Beam's
            # plan step does)
            lifecycle.check_held(job.held, cfg.store)
            with ThreadPoolExecutor(threads, thread_name_prefix="tar2tf-write") as pool:
                rows = list(pool.map(lambda t: kind.write(t, cfg), kind.plan(summaries, cfg)))
            return rows, summaries
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                interrupt_reads()  # threads blocked in slow reads: closing waits for them
            converted.close()  # cancels the conversions not started
            if stream is not None:
                stream.abort(e)  # the shards it finished stay, for resume=True
            raise
        finally:
            if workers is not None:
                workers.close()


class _Tally:
    """The job's counters and progress, kept by the driver's thread from the summaries
    it takes (the counts a Beam job's counters hold), the resumed ones included."""

    def __init__(self, job: Job, resumed: shard_journal.ResumePoint):
        self.kind = job.kind
        self.counters: Dict[str, int] = {"shards_rejected": len(job.list_rejects)}
        self.reused = 0  # units whose verified work an interrupted run left
        self.from_journal = len(resumed.pieces)
        self.bar = Progress(len(job.units), job.cfg.progress, job.cfg.progress_every)
        for summary in resumed.pieces:
            self.done(summary, resumed=True)

    def done(self, summary, resumed: bool = False) -> None:
        counts = self.kind.counts(summary)
        for name, n in counts.items():
            self.counters[name] = self.counters.get(name, 0) + n
        self.bar.shard_done(
            counts.get("records_written", 0), counts.get("member_bytes_read", 0), resumed=resumed
        )

    def close(self) -> None:
        self.counters["shards_resumed"] = self.from_journal + self.reused
        self.bar.close()


def _inline(one: Callable, tasks: Sequence) -> Iterator:
    """The units of ``tasks``, converted on the caller's thread as it asks for each."""
    for task in tasks:
        yield one(task)


def _threaded(one: Callable, tasks: Sequence, threads: int) -> Iterator:
    """The units of ``tasks`` in order, converted on ``threads`` threads.  At most 2 x
    threads units are converted ahead of the one the caller is writing, so the memory of
    held pieces stays bounded whatever one slow unit does.  Closing the generator cancels
    the conversions not started (and waits for the running ones)."""
    futures: List[Optional[Future]] = []  # None: taken by the caller
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tar2tf-convert") as pool:

        def submit_until(n: int) -> None:
            while len(futures) < min(n, len(tasks)):
                futures.append(pool.submit(one, tasks[len(futures)]))

        try:
            submit_until(2 * threads)
            for i in range(len(tasks)):
                piece = futures[i].result()
                futures[i] = None  # its held frames and sizes go once the caller wrote them
                submit_until(i + 1 + 2 * threads)
                yield piece
        except KeyboardInterrupt:
            # Ctrl-C while waiting here: leaving the executor waits for the running
            # conversions, which may be reading a source that trickles for hours
            interrupt_reads()
            raise
        finally:
            for f in futures:
                if f is not None:
                    f.cancel()
