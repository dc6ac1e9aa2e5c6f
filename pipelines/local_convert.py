"""The TFRecord conversion without Beam: the same functions, driven by threads in-process
(or, with ``num_workers=1`` and a local output, on the caller's own thread).

``Dataset.load(path=..., remote_exec=False)`` uses this, and so does ``remote_exec=None``
when an op cannot be pickled (a Beam job must pickle its DoFns to ship them).  Every step
is the one the Beam graph runs -- :func:`pipelines.convert.convert_shard` per input shard,
the greedy packing of :mod:`pipelines.finalize`, the same manifest -- so the output files
are byte-identical to a Beam run with the same inputs and options (tested).  With a ``{}``
output template the final shards fill while later input shards still convert
(:mod:`pipelines.shard_stream`); otherwise they are planned once every piece is done.
Pieces converted on this process's threads go to that stream in memory (up to
``HOLD_BYTES`` each, then spilled to their file), so each byte is written once; with
worker processes (``pipelines.shard_pool``) and a local output, the workers write their
frames into the final shards where the stream places them, as in a local Beam job.  A
rerun with ``resume=True`` after a crash continues after the shards the stream finished
(``pipelines.shard_journal``).
"""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterator, List, Sequence

from pipelines import convert as cv
from pipelines import finalize, options as opts, shard_pool, shard_stream
from pipelines import overlap, replace
from pipelines.shard_convert import HOLD_BYTES
from transforms.sizes import parse_size
from transforms.sources import resolve
from transforms.stores import get_store, split_url


def convert_in_process(cfg: "cv.ConvertConfig", num_workers: int = 1) -> "cv.ConvertResult":
    """Like :func:`pipelines.convert.convert`, with ``num_workers`` threads and no Beam
    (and ``cfg.processes`` worker processes converting the shards, if set)."""
    t0 = time.time()
    if cfg.output.count("{}") > 1:
        raise ValueError("output may contain '{}' only once")
    parse_size(cfg.max_shard_size), parse_size(cfg.max_member_size), parse_size(cfg.spool_limit)
    urls, list_rejects = resolve(cfg.sources, cfg.base, cfg.store)
    work = cv.work_dir_for(cfg, urls)
    cv.check_outputs(cfg, work, "overwrite=True", "resume=True", inputs=urls)
    overlap.check_convert(cfg.output, urls, work, [finalize.companion(cfg.output, x) for x in cv.COMPANIONS])
    stages = cfg.stages()
    if cfg.shuffle:
        raise ValueError("shuffle=True needs the Beam pipeline (remote_exec=True/None)")
    job = uuid.uuid4().hex
    resumed = cv.resume_point(cfg, work)  # the journal of an interrupted run, with resume=True
    auto = cfg.processes is None  # as for the local Beam runner: one process per worker thread
    # worker processes pay off for heavy ops, and for any job whose workers write their
    # frames into local final shards themselves (a '{}' output): nothing then passes
    # through this process (opts.auto_processes)
    placed = shard_stream.can_stream(cfg.output) and split_url(cfg.output)[0] == ""
    procs = opts.auto_processes(num_workers, len(urls) - resumed.next_piece, cfg.has_heavy_ops() or placed) if auto \
        else int(cfg.processes)
    # automatic: ops that cannot be pickled (the reason this path runs) stay on threads
    blob = shard_pool.pack(cfg, required=not auto) if procs else None
    cv.record_job(cfg, urls, work)
    replace.begin(finalize.companion(cfg.output, ".manifest.json"), cfg.store, output=cfg.output, work=work)
    stream = cv.new_stream(cfg, work, resumed)  # None: shard names need the count, plan at the end
    tasks = list(enumerate(urls))[resumed.next_piece:]
    if blob is not None and stream is not None and split_url(cfg.output)[0] == "":
        # local final shards: the workers write their frames into them where the stream
        # places them, converting in input order, as in a local Beam job (pipelines.convert)
        feed = shard_stream.PieceFeed(stream, len(urls), resumed.next_piece)
        return _placed(cfg, job, blob, procs, feed, tasks, list_rejects, urls, work, resumed, t0)
    if blob is not None:
        shard_pool.start(job, cfg, work, procs, blob=blob)
    workers = shard_pool.get(job)
    # pieces converted on these threads reach the stream in memory (written once); the
    # stream's journal is what a rerun with resume=True continues from
    hold = HOLD_BYTES if stream is not None and workers is None else 0

    def one(task):
        index, url = task
        info = cv.load_verified_piece(index, work, cfg.store) if cfg.resume else None
        if info is not None:
            return info
        if workers is not None:
            return workers.convert(index, url)
        return cv.convert_shard(index, url, work, cfg, stages, hold)

    threads = max(1, int(num_workers), procs)
    # one thread writing to a local disk: convert on this thread between writes.  A second
    # thread would only overlap copies into the page cache, and the two threads' hand-offs
    # of the GIL cost more than that (docs/benchmarks.md, session 17); output elsewhere is
    # a network upload, which a converter thread keeps overlapping with the next fetch
    inline = threads == 1 and workers is None and split_url(cfg.output)[0] == ""
    converted = _inline(one, tasks) if inline else _threaded(one, tasks, threads)
    try:
        pieces = list(resumed.pieces)
        try:
            for piece in converted:
                pieces.append(piece)
                if stream is not None:
                    stream.add(piece)  # in input order, while later pieces convert
            if stream is not None:
                shards = stream.finish()
            else:  # the Beam graph's planning step
                with ThreadPoolExecutor(threads, thread_name_prefix="tar2tf-write") as pool:
                    shards = list(pool.map(lambda t: finalize.write_shard(t, cfg.store, cfg.dali_index),
                                           cv.plan_shards(pieces, cfg)))
        except BaseException as e:
            converted.close()  # cancels the conversions not started
            if stream is not None:
                stream.abort(e)  # the shards it finished stay, for resume=True
            raise
    finally:
        shard_pool.stop(job)
    return _result(cfg, shards, pieces, list_rejects, urls, work, t0)


def _placed(cfg, job: str, blob: bytes, procs: int, feed: "shard_stream.PieceFeed", tasks: Sequence,
            list_rejects, urls: List[str], work: str, resumed, t0: float) -> "cv.ConvertResult":
    """The job whose ``procs`` worker processes write into the final shards where ``feed``
    places their pieces; the pool converts ``tasks`` in order, this thread takes the results."""
    try:
        shard_pool.start(job, cfg, work, procs, tasks=tasks, place=feed.place, blob=blob)
        pool = shard_pool.get(job)
        for index, url in tasks:
            pool.convert(index, url)  # raises a worker's error
        shards = feed.finish(len(urls))
    except BaseException as e:
        if not feed.settled:
            feed.abort(e)  # the shards it finished stay if journaled, for resume=True
        raise
    finally:
        shard_pool.stop(job)
    return _result(cfg, shards, list(resumed.pieces) + feed.pieces(), list_rejects, urls, work, t0)


def _result(cfg, shards, pieces, list_rejects, urls: List[str], work: str, t0: float) -> "cv.ConvertResult":
    """Manifest and rejects written (``pipelines.convert.finish_job``); the job's result."""
    manifest = next(iter(cv.finish_job(shards, pieces, cfg, list_rejects, urls, work)))
    manifest_path = finalize.companion(cfg.output, ".manifest.json")
    written = json.loads(get_store(manifest_path, cfg.store).read_bytes(manifest_path))
    assert written["totals"] == manifest["totals"]
    rejected = manifest["rejects"]["count"]
    return cv.ConvertResult(paths=[s["path"] for s in manifest["shards"]], manifest=manifest,
                            manifest_path=manifest_path,
                            rejects_path=finalize.companion(cfg.output, ".rejects.jsonl"),
                            totals=manifest["totals"], counters={}, seconds=time.time() - t0,
                            exit_code=0 if rejected <= cfg.max_rejects else 3)


def _inline(one: Callable, tasks: Sequence) -> Iterator:
    """The pieces of ``tasks``, converted on the caller's thread as it asks for each."""
    for task in tasks:
        yield one(task)


def _threaded(one: Callable, tasks: Sequence, threads: int) -> Iterator:
    """The pieces of ``tasks`` in input order, converted on ``threads`` threads.  At most
    2 x threads pieces are converted ahead of the one the caller is writing, so the memory
    of held pieces stays bounded whatever one slow shard does.  Closing the generator
    cancels the conversions not started (and waits for the running ones)."""
    futures: List[Future] = []
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tar2tf-convert") as pool:
        def submit_until(n: int) -> None:
            while len(futures) < min(n, len(tasks)):
                futures.append(pool.submit(one, tasks[len(futures)]))
        try:
            submit_until(2 * threads)
            for i in range(len(tasks)):
                piece = futures[i].result()
                submit_until(i + 1 + 2 * threads)
                yield piece
        finally:
            for f in futures:
                f.cancel()
