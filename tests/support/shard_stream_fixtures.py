"""Helpers of the shard-stream tests (test_inprocess_stream, test_inprocess_stream_placing):
piece files of random records as the converter returns them (``ConvertedPiece``: summary
and sizes), and the shards the planned path (``pipelines.job.kinds.tfrecord.plan``) and the
stream (``pipelines.inprocess.stream``) make of them."""

import dataclasses
import os
import random
import threading
import time

from pipelines.inprocess.stream import ShardStream
from pipelines.job.kinds.tfrecord import shardfile
from pipelines.job.kinds.tfrecord.piece import ConvertedPiece
from pipelines.job.kinds.tfrecord.plan import stream_plan
from pipelines.job.kinds.tfrecord.summary import PieceSummary


def piece_summary(index, piece="", records=0, **fields):
    """A piece's summary with the given fields, and zero counts for the others."""
    base = dict(
        index=index,
        shard=f"in-{index}.tar",
        piece=piece,
        records=records,
        bytes=0,
        records_read=records,
        filtered=0,
        records_rejected=0,
        shards_rejected=0,
        reject_counts=[],
        members=0,
        skipped_members=0,
        duplicate_members=0,
        member_bytes=0,
        schema={},
        first_types={},
        recs_crc32c="",
    )
    return PieceSummary(**dict(base, **fields))


def _pieces(d, layout, seed=0):
    """Piece files of random bytes with the given record sizes, as converted pieces."""
    rnd = random.Random(seed)
    out = []
    for i, sizes in enumerate(layout):
        path = os.path.join(d, f"piece-{i:06d}.tfrecord")
        with open(path, "wb") as f:
            f.write(rnd.randbytes(sum(sizes)))
        summary = piece_summary(i, path, len(sizes), bytes=sum(sizes))
        out.append(ConvertedPiece(summary, list(sizes)))
    return out


def _planned(pieces, output, max_bytes, max_records, dali):
    sizes = {p.summary.index: p.sizes for p in pieces}
    tasks = stream_plan(
        [p.summary for p in pieces],
        output,
        max_bytes,
        max_records,
        None,
        dali,
        sizes_of=lambda s: sizes[s.index],
    )
    return [shardfile.write_shard(t, None, dali) for t in tasks]


def _frames_of(p):
    data, frames, pos = open(p.summary.piece, "rb").read(), [], 0
    for size in p.sizes:
        frames.append(data[pos : pos + size])
        pos += size
    return frames


def _held(p):
    """``p`` as the in-process driver hands it over: the frames in memory, no file."""
    return ConvertedPiece(dataclasses.replace(p.summary, piece=""), p.sizes, _frames_of(p))


def _streamed(pieces, output, max_bytes, max_records, dali, held=False):
    s = ShardStream(output, max_bytes, max_records, None, dali)
    for p in pieces:
        s.add(_held(p) if held else p)
    return s.finish()


def _files(d):
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


def _info(p):
    """``p`` with its piece file's digest (a piece file: what a journaled stream deletes)."""
    from transforms.tfrecord import digests

    d = digests.new("crc32c")
    d.update(open(p.summary.piece, "rb").read())
    return dataclasses.replace(
        p, summary=dataclasses.replace(p.summary, crc32c=digests.hexdigest(d))
    )


def _rows(rows, d):
    return [dict(r, path=os.path.relpath(r["path"], d)) for r in rows]


def _wait_for(cond, timeout=30.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def _as_worker(feed, p, held=False, errors=None):
    """What a worker process does with its piece (pipelines/inprocess/worker.py): place it
    (``PieceFeed.place``, which waits for its predecessors), write its runs into the
    final shards from memory (``held``) or from its piece file, and report each run."""
    from pipelines.inprocess.messages import Run
    from pipelines.inprocess.worker import write_runs

    try:
        runs = feed.place(p) or []
        crcs = write_runs(
            [Run(sh.local_path, off, lo, hi) for sh, off, lo, hi in runs],
            dataclasses.replace(p, frames=_frames_of(p) if held else None),
        )
        for (sh, off, _, _), crc in zip(runs, crcs):
            sh.filled(off, crc)
    except BaseException as e:
        if errors is None:
            raise
        errors.append(e)


def _workers(feed, pieces, order=None, held=None, errors=None):
    """One thread per piece doing :func:`_as_worker`, started in ``order``; the threads."""
    threads = []
    for i in order if order is not None else range(len(pieces)):
        h = bool(held and held[i])
        t = threading.Thread(target=_as_worker, args=(feed, pieces[i], h, errors), daemon=True)
        t.start()
        threads.append(t)
    return threads
