"""The TFRecord conversion without Beam: the same functions, driven by threads in-process
(or, with ``num_workers=1`` and a local output, on the caller's own thread).

``Dataset.load(path=..., remote_exec=False)`` uses this, and so does ``remote_exec=None``
when an op cannot be pickled (a Beam job must pickle its DoFns to ship them).  Every step
is the one the Beam graph runs (the lifecycle of :mod:`pipelines.job.lifecycle` with its
TFRecord kind) -- :func:`pipelines.job.kinds.tfrecord.piece.convert_to_piece` per input shard,
the greedy packing of :mod:`pipelines.job.kinds.tfrecord.plan`, the same manifest -- so the output files
are byte-identical to a Beam run with the same inputs and options (tested).  With a ``{}``
output template the final shards fill while later input shards still convert
(:mod:`pipelines.inprocess.stream`); otherwise they are planned once every piece is done.
Pieces converted on this process's threads go to that stream in memory (up to
``HOLD_BYTES`` each, then spilled to their file), so each byte is written once; with
worker processes (``pipelines.inprocess.pool``) and a local output, the workers write their
frames into the final shards where the stream places them.  A
rerun with ``resume=True`` after a crash continues after the shards the stream finished
(``pipelines.inprocess.journal``).
"""

from __future__ import annotations

import functools
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

from pipelines.inprocess import journal as shard_journal
from pipelines.inprocess import pool as shard_pool
from pipelines.inprocess import stream as shard_stream
from pipelines.job import lifecycle
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from pipelines.job.kinds.tfrecord.kind import TFRECORD, plan_shards
from pipelines.job.kinds.tfrecord.piece import HOLD_BYTES, ConvertedPiece, convert_to_piece
from pipelines.job.lifecycle import ConvertResult, Job
from pipelines.job.progress import Progress
from transforms.sizes import parse_size
from transforms.stores import split_url
from transforms.stores.retry import interrupt_reads

log = logging.getLogger("tar2tf")


IO_THREADS = 8  # converter threads when the shards or the work files are in a bucket


def auto_processes(workers: int, shards: int, ops: bool = True) -> int:
    """The automatic worker-process count: one per worker, when there is more than one of
    each (a single worker or shard gains nothing from a process) and ``ops``: the job has
    ops that do real work per record (``ConvertConfig.has_heavy_ops``), or its workers
    write their frames into local final shards themselves (a local ``{}`` output: nothing
    then passes through this process).  Otherwise (a passthrough or selections whose
    frames pass through this process) the work is reading, CRC and writing, and threads
    convert as fast without a worker's start (docs/benchmarks.md)."""
    return min(int(workers), shards) if ops and int(workers) > 1 and shards > 1 else 0


def streams(cfg: ConvertConfig) -> bool:
    """Whether the job's final shards can be written while it converts (``{}`` template,
    no shuffle, TFRecord: ArrayRecord shards are planned, pipelines.job.kinds.tfrecord.arrayrecordfile):
    see ``pipelines.inprocess.stream``."""
    return not cfg.shuffle and cfg.format == "tfrecord" and shard_stream.can_stream(cfg.output)


def new_stream(
    cfg: ConvertConfig,
    work: Optional[str] = None,
    resume: Optional[shard_journal.ResumePoint] = None,
    held: Optional[Tuple[str, str]] = None,
) -> Optional[shard_stream.ShardStream]:
    """A shard stream for the job when its output names allow one (:func:`streams`), else
    None; ``work``: the work directory its journal goes to; ``resume``: the journal of an
    interrupted run to continue (see ``pipelines.inprocess.journal``); ``held``: the job's
    output lock (``Job.held``), read again before each shard is renamed into place."""
    if not streams(cfg):
        return None
    return shard_stream.ShardStream(
        cfg.output,
        parse_size(cfg.max_shard_size),
        cfg.records_per_shard,
        cfg.store,
        cfg.dali_index,
        journal=work,
        resume=resume,
        spool_limit=parse_size(cfg.spool_limit),
        guard=None if held is None else functools.partial(lifecycle.check_held, held, cfg.store),
    )


def resume_point(cfg: ConvertConfig, work: str) -> shard_journal.ResumePoint:
    """Where a streamed job continues: the journal of an interrupted run when ``resume``
    asks for it, else the start.  A job that starts over clears any journal first."""
    if cfg.resume and streams(cfg):
        point = shard_journal.load(work, cfg.store, cfg.output)  # only this output's names
        if point is not None:
            log.info(
                "resumed: %d final shard(s) of an interrupted run kept; converting from input shard %d",
                point.shards,
                point.next_piece,
            )
            return point
    else:
        shard_journal.clear(work, cfg.store)
    return shard_journal.ResumePoint()


def convert_in_process(cfg: ConvertConfig, num_workers: int = 1) -> ConvertResult:
    """Like :func:`pipelines.beam.convert.convert`, with ``num_workers`` threads and no Beam
    (and ``cfg.processes`` worker processes converting the shards, if set)."""
    if cfg.shuffle:
        raise ValueError(
            "a shuffled job needs the Beam graph, not the in-process driver: run it on a Beam "
            "runner"
        )
    job = lifecycle.prepare(TFRECORD, cfg)
    with lifecycle.cleaned_on_failure(job):
        return _convert(job, num_workers)


def _convert(job: Job, num_workers: int) -> ConvertResult:
    cfg, urls, work = job.cfg, job.urls, job.work
    stages = cfg.stages()
    resumed = resume_point(cfg, work)  # the journal of an interrupted run, with resume=True
    auto = cfg.processes is None
    # worker processes pay off for heavy ops, and for any job whose workers write their
    # frames into local final shards themselves (a '{}' output): nothing then passes
    # through this process (auto_processes)
    local_output = split_url(cfg.output)[0] == ""
    placed = streams(cfg) and local_output
    left = len(urls) - resumed.next_piece
    # never more workers than shards to convert: one more would only start and wait
    procs = (
        auto_processes(num_workers, left, cfg.has_heavy_ops() or placed)
        if auto
        else min(int(cfg.processes), left)
    )
    # automatic: ops that cannot be pickled (the reason this path runs) stay on threads
    blob = shard_pool.pack(cfg, required=not auto) if procs else None
    lifecycle.start(job)
    # None: shard names need the count, plan at the end
    stream = new_stream(cfg, work, resumed, job.held)
    tasks = list(enumerate(urls))[resumed.next_piece :]
    if blob is not None and stream is not None and local_output:
        # local final shards: the workers write their frames into them where the stream
        # places them, converting in input order
        feed = shard_stream.PieceFeed(stream, len(urls), resumed.next_piece)
        return _placed(job, blob, procs, feed, tasks, resumed)
    workers = shard_pool.Pool(blob, work, procs) if blob is not None else None
    # pieces converted on these threads reach the stream in memory (written once); the
    # stream's journal is what a rerun with resume=True continues from
    hold = HOLD_BYTES if stream is not None and workers is None else 0

    reused = []  # pieces an interrupted run left, verified

    def convert(task):  # the piece with its sizes: the stream places its records by them
        if workers is not None:
            return workers.convert(*task)
        return convert_to_piece(*task, work, cfg, stages, hold)

    def one(task) -> ConvertedPiece:
        got, was_reused = job.kind.convert_unit(cfg, work, task, stages, convert)
        if was_reused:  # a summary: its sizes are in its record file
            reused.append(task[0])
            return ConvertedPiece(got)
        return got

    threads = max(1, int(num_workers), procs)
    if workers is None and any(split_url(u)[0] != "" for u in urls[:1] + [work]):
        # a shard's fetch and its work file's upload are round trips to a bucket, one after
        # another within a shard: more shards at once keep requests in flight (the CPU
        # work per shard is the same); the pieces held in memory share the same budget
        threads, hold = max(threads, IO_THREADS), hold * threads // max(threads, IO_THREADS)
    # one thread writing to a local disk: convert on this thread between writes.  A second
    # thread would only overlap copies into the page cache, and the two threads' hand-offs
    # of the GIL cost more than that (docs/benchmarks.md); output elsewhere is
    # a network upload, which a converter thread keeps overlapping with the next fetch
    inline = threads == 1 and workers is None and local_output
    converted = _inline(one, tasks) if inline else _threaded(one, tasks, threads)
    bar = _bar(job, resumed)
    try:
        pieces = list(resumed.pieces)
        try:
            for piece in converted:
                pieces.append(piece.summary)  # all the job keeps of it
                bar.shard_done(piece.summary.records, piece.summary.member_bytes)
                if stream is not None:
                    stream.add(piece)  # in input order, while later pieces convert
                del piece  # its sizes and held frames go once written
            if stream is not None:
                shards = stream.finish()
            else:  # the Beam graph's planning step
                # the lock read again before the first final shard is written (as Beam's
                # plan step does)
                lifecycle.check_held(job.held, cfg.store)
                with ThreadPoolExecutor(threads, thread_name_prefix="tar2tf-write") as pool:
                    shards = list(
                        pool.map(
                            lambda t: job.kind.write(t, cfg),
                            plan_shards(pieces, cfg),
                        )
                    )
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
        bar.close()
    return _result(job, shards, pieces, num_workers, len(resumed.pieces) + len(reused))


def _placed(
    job: Job,
    blob: bytes,
    procs: int,
    feed: "shard_stream.PieceFeed",
    tasks: Sequence,
    resumed: shard_journal.ResumePoint,
) -> ConvertResult:
    """The job whose ``procs`` worker processes write into the final shards where ``feed``
    places their pieces; the pool converts ``tasks`` in order, this thread takes the results."""
    bar = _bar(job, resumed)
    pool = shard_pool.Pool(blob, job.work, procs, tasks=tasks, place=feed.place)
    try:
        for index, url in tasks:
            summary = pool.convert(index, url).summary  # raises a worker's error
            bar.shard_done(summary.records, summary.member_bytes)
        shards = feed.finish(len(job.urls))
    except BaseException as e:
        if not feed.settled:
            feed.abort(e)  # the shards it finished stay if journaled, for resume=True
        raise
    finally:
        pool.close()
        bar.close()
    return _result(job, shards, list(resumed.pieces) + feed.pieces(), procs, len(resumed.pieces))


def _bar(job: Job, resumed: shard_journal.ResumePoint) -> Progress:
    """The job's progress (a bar on a terminal, else lines; none if turned off), counting
    the shards a resumed job's journal already holds."""
    bar = Progress(len(job.urls), job.cfg.progress, job.cfg.progress_every)
    for piece in resumed.pieces:
        bar.shard_done(piece.records, piece.member_bytes, resumed=True)
    return bar


def _result(job: Job, shards, pieces, num_workers: int, resumed: int = 0) -> ConvertResult:
    """Manifest and rejects written (``lifecycle.finish``); the job's result.
    ``num_workers``: for a second pass of a job whose features had several types."""
    manifest = lifecycle.finish(job, shards, pieces)
    # the counts a Beam job's counters hold, from the pieces this process saw
    counters = {"shards_rejected": len(job.list_rejects), "shards_resumed": resumed}
    for piece in pieces:
        for name, n in job.kind.counts(piece).items():
            counters[name] = counters.get(name, 0) + n
    res = lifecycle.result_of(job, counters, manifest)
    again = job.kind.again(job.cfg, res.manifest)
    return res if again is None else convert_in_process(again, num_workers)


def _inline(one: Callable, tasks: Sequence) -> Iterator:
    """The pieces of ``tasks``, converted on the caller's thread as it asks for each."""
    for task in tasks:
        yield one(task)


def _threaded(one: Callable, tasks: Sequence, threads: int) -> Iterator:
    """The pieces of ``tasks`` in input order, converted on ``threads`` threads.  At most
    2 x threads pieces are converted ahead of the one the caller is writing, so the memory
    of held pieces stays bounded whatever one slow shard does.  Closing the generator
    cancels the conversions not started (and waits for the running ones)."""
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
