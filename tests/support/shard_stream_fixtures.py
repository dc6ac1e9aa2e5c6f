"""Helpers of the shard-stream tests (test_shard_stream, test_shard_placement): piece
files of random records with their sidecar dicts, and the shards the planned path
(``pipelines.job.plan``) and the stream (``pipelines.inprocess.stream``) make of them."""

import os
import random
import time

from pipelines.inprocess.stream import ShardStream
from pipelines.job import shardfile
from pipelines.job.plan import stream_plan


def _pieces(d, layout, seed=0):
    """Piece files of random bytes with the given record sizes, and their sidecar dicts."""
    rnd = random.Random(seed)
    out = []
    for i, sizes in enumerate(layout):
        path = os.path.join(d, f"piece-{i:06d}.tfrecord")
        with open(path, "wb") as f:
            f.write(rnd.randbytes(sum(sizes)))
        out.append({"index": i, "piece": path, "sizes": list(sizes), "records": len(sizes)})
    return out


def _planned(pieces, output, max_bytes, max_records, dali):
    tasks = stream_plan(
        pieces, output, max_bytes, max_records, None, dali, sizes_of=lambda p: p["sizes"]
    )
    return [shardfile.write_shard(t, None, dali) for t in tasks]


def _frames_of(p):
    data, frames, pos = open(p["piece"], "rb").read(), [], 0
    for size in p["sizes"]:
        frames.append(data[pos : pos + size])
        pos += size
    return frames


def _streamed(pieces, output, max_bytes, max_records, dali, held=False):
    s = ShardStream(output, max_bytes, max_records, None, dali)
    for p in pieces:
        if held:  # as the in-process driver hands them over: the frames in memory, no file
            p = dict(p, piece=None, frames=_frames_of(p))
        s.add(p)
    return s.finish()


def _files(d):
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


def _info(p):
    """A piece dict as convert_to_piece returns it (no rejects), with its digest."""
    from transforms.tfrecord import digests

    d = digests.new("crc32c")
    d.update(open(p["piece"], "rb").read())
    return dict(
        p,
        shard=f"in-{p['index']}.tar",
        records_read=len(p["sizes"]),
        filtered=0,
        rejects=[],
        schema={},
        keys=[f"k{i}" for i in range(len(p["sizes"]))],
        crc32c=digests.hexdigest(d),
    )


def _rows(rows, d):
    return [dict(r, path=os.path.relpath(r["path"], d)) for r in rows]


def _wait_for(cond, timeout=30.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)
