"""How a job's memory and time grow with its record count (docs/benchmarks.md, "Scale").

Two measurements::

    python -m benchmarks.scale real [--records 100000,1000000] [--per-shard 5000]
    python -m benchmarks.scale sim  [--records 100000000] [--shards 10000]

``real``: real ``tar2tf convert`` runs over shards of tiny records (one 4-byte member
each, so that per-record costs dominate), on Beam's default runner and on the in-process
driver (``--runner inprocess``), each as a user starts it.  Reported: the peak RSS of the
job's largest process (the maximum over the CLI and every process it started and
reaped: ``getrusage(RUSAGE_CHILDREN)`` of a wrapper process), wall time and time per
record.

``sim``: the job's global steps at a scale no real run here reaches.  Synthetic piece
summaries and record files (``pipelines.job.kinds.tfrecord.piecefiles``: sizes, key hashes, keys) are
written into a work directory by one process; a second, fresh process then runs the real
plan (``pipelines.job.kinds.tfrecord.plan.stream_plan``, every task drawn), the duplicate-key check and
the job's end (``pipelines.job.kinds.tfrecord.kind.finish``: totals, rejects, manifest) over them,
and reports its own peak RSS and the time of each step.  A few pieces repeat earlier
keys, and a few carry a reject, so those paths run too.

Results go to stdout as JSON lines (one per measurement).  Inputs and work files live
under ``--dir`` (default: a directory in the system's temporary directory), reused
between runs of the same sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# -- real runs --------------------------------------------------------------------------


def make_tiny_shards(d: str, records: int, per_shard: int) -> str:
    """``records`` one-member samples (``<key>.cls``, 4 bytes) in shards of
    ``per_shard``; returns the brace pattern of the shards."""
    n = (records + per_shard - 1) // per_shard
    done = os.path.join(d, "done")
    if not os.path.exists(done):
        os.makedirs(d, exist_ok=True)
        for s in range(n):
            with tarfile.open(os.path.join(d, f"tiny-{s:05d}.tar"), "w") as tf:
                for r in range(min(per_shard, records - s * per_shard)):
                    info = tarfile.TarInfo(f"s{s:05d}/r{r:06d}.cls")
                    info.size = 4
                    tf.addfile(info, _Bytes(b"%04d" % (r % 10000)))
        open(done, "w").close()
    return os.path.join(d, f"tiny-{{00000..{n - 1:05d}}}.tar")


class _Bytes:
    def __init__(self, data: bytes):
        self.data = data

    def read(self, n: int = -1) -> bytes:
        out, self.data = self.data, b""
        return out


def measured(cmd: List[str], env: Dict[str, str]) -> Dict[str, float]:
    """Run ``cmd`` in a wrapper process; its wall time, the peak RSS (MB) of the largest
    process it or its descendants ran, and the bytes they had written to the disk device
    (``ru_oublock``: what reached the block layer, so page-cache reads do not count)."""
    wrapper = (
        "import resource, subprocess, sys, time\n"
        "t = time.time()\n"
        "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(rc, time.time() - t, u.ru_maxrss, u.ru_oublock)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", wrapper] + cmd, env=env, capture_output=True, text=True, cwd=ROOT
    )
    rc, secs, rss_kb, blocks = out.stdout.split()
    if int(rc) != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr[-2000:]}")
    return {
        "seconds": float(secs),
        "peak_rss_mb": int(rss_kb) / 1024,
        "disk_written_mb": int(blocks) * 512 / 1e6,
    }


def _size(d: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def real(args) -> None:
    env = dict(os.environ)
    env.pop("TAR2TF_DIRECT_RUNNING_MODE", None)  # the default runner as a user gets it
    for records in [int(x) for x in args.records.split(",")]:
        pattern = make_tiny_shards(
            os.path.join(args.dir, f"tiny-{records}-{args.per_shard}"), records, args.per_shard
        )
        for driver in args.drivers.split(","):
            out = tempfile.mkdtemp(prefix="scale-out-", dir=args.dir)
            cmd = [sys.executable, "-m", "launch.cli", "convert", pattern]
            cmd += ["--output", os.path.join(out, "t-{}.record"), "--no-progress"]
            cmd += ["--runner", driver]  # inprocess or beam
            m = measured(cmd, env)
            m["output_mb"] = _size(out) / 1e6
            subprocess.run(["rm", "-rf", out])
            m.update(
                kind="real",
                driver=driver,
                records=records,
                shards=(records + args.per_shard - 1) // args.per_shard,
                us_per_record=round(m["seconds"] / records * 1e6, 1),
            )
            print(json.dumps(m), flush=True)


# -- simulation of the global steps -------------------------------------------------------


def _synthetic_work(work: str, records: int, shards: int) -> None:
    """Record files and summaries of ``shards`` pieces holding ``records`` in all."""
    import numpy as np

    from pipelines.job.kinds.tfrecord import piecefiles
    from transforms.tfrecord import digests

    done = os.path.join(work, "summaries.jsonl")
    if os.path.exists(done):
        return
    os.makedirs(work, exist_ok=True)
    rnd = np.random.default_rng(0)
    per = records // shards
    digits = 10 ** np.arange(9, -1, -1, dtype=np.int64)
    prev = np.zeros((0, 2), dtype=">u8")  # the key hashes of the shard before
    with open(done + ".tmp", "w") as summaries:
        for i in range(shards):
            n = per + (1 if i < records % shards else 0)
            sizes = rnd.integers(40, 400, n, dtype=np.int64)
            hashes = rnd.integers(0, 2**63, (n, 2), dtype=np.uint64).astype(">u8")
            if i % 1000 == 999:  # repeats keys of the shard before: duplicates to report
                hashes[: len(prev[:10])] = prev[:10]
            prev = hashes
            idx = np.arange(n, dtype=np.int64) + i * per
            keys = np.zeros((n, 11), dtype=np.uint8)
            keys[:, :10] = (idx[:, None] // digits) % 10 + 48
            rejects = (
                [] if i % 500 else [{"stage": "tar", "url": f"s{i}", "key": "k", "reason": "x"}]
            )
            piece = os.path.join(work, f"piece-{i:06d}.tfrecord")
            data = piecefiles.pack(
                {
                    "sizes": sizes,
                    "hashes": hashes.view(piecefiles.HASH).ravel(),
                    "keys": keys.ravel()[:-1] if n else keys.ravel(),
                    "rejects": np.frombuffer(
                        "".join(json.dumps(r) + "\n" for r in rejects).encode(), np.uint8
                    ),
                }
            )
            with open(piecefiles.url_of(piece), "wb") as f:
                f.write(data)
            recs_digest = digests.new("crc32c")
            recs_digest.update(data)
            summary = {
                "index": i,
                "shard": f"gs://corpus/shard-{i:06d}.tar",
                "piece": piece,
                "records": int(n),
                "bytes": int(sizes.sum()),
                "records_read": int(n) + len(rejects),
                "filtered": 0,
                "records_rejected": len(rejects),
                "shards_rejected": 0,
                "reject_counts": [["tar", "x", len(rejects)]] if rejects else [],
                "members": 2 * int(n),
                "skipped_members": 0,
                "duplicate_members": 0,
                "member_bytes": int(sizes.sum()),
                "schema": {
                    "cls": {"dtype": "int64", "shape": [1]},
                    "jpg": {"dtype": "bytes", "shape": [1]},
                },
                "first_types": {"cls": "int64", "jpg": "bytes"},
                "recs_crc32c": digests.hexdigest(recs_digest),
            }
            summaries.write(json.dumps(summary) + "\n")
    os.rename(done + ".tmp", done)


def _delayed(latency_s: float) -> None:
    """Every request the global steps make to the work directory's store waits
    ``latency_s`` first, as a bucket's round trip would: record-file reads, deletes,
    writes (the synthetic work directory is local)."""
    from pipelines.job.kinds.tfrecord import piecefiles
    from transforms.stores.registry import LocalStore

    def slow(fn):
        def call(*a, **k):
            time.sleep(latency_s)
            return fn(*a, **k)

        return call

    piecefiles._members = slow(piecefiles._members)
    piecefiles._load = slow(piecefiles._load)
    for name in ("read_bytes", "write_bytes", "delete", "exists", "size"):
        setattr(LocalStore, name, slow(getattr(LocalStore, name)))


def _global_steps(work: str, out: str, max_shard_size: str, latency_ms: float = 0) -> None:
    """In a fresh process: the real plan, duplicate check and finish over ``work``."""
    import resource

    if latency_ms:
        _delayed(latency_ms / 1000)

    from pipelines.job import inflight
    from pipelines.job.kinds.tfrecord import duplicates
    from pipelines.job.kinds.tfrecord.config import ConvertConfig
    from pipelines.job.kinds.tfrecord.kind import finish, plan_shards
    from pipelines.job.kinds.tfrecord.summary import PieceSummary

    t0 = time.time()
    with open(os.path.join(work, "summaries.jsonl")) as f:
        pieces = [PieceSummary.from_json(json.loads(line)) for line in f]
    t1 = time.time()
    cfg = ConvertConfig(
        sources=[], output=os.path.join(out, "t.record"), max_shard_size=max_shard_size
    )
    rows = []
    for task in plan_shards(pieces, cfg):  # every task drawn, as WriteShard would
        rows.append(
            {
                "path": task.path,
                "records": task.records,
                "bytes": task.bytes,
                "crc32c": "0",
            }
        )
    t2 = time.time()
    found = duplicates.scan_here(pieces)
    t3 = time.time()
    # the job's end as the in-process driver runs it (its duplicate check included, so
    # timed again there)
    manifest = finish(rows, pieces, cfg, [], [p.shard for p in pieces])
    t4 = time.time()
    # the job's end as the Beam graph's Manifest step runs it: the duplicate buckets were
    # scanned on the workers (pipelines.beam.duplicates), only their merge is left
    finish(rows, pieces, cfg, [], [p.shard for p in pieces], found)
    t5 = time.time()
    print(
        json.dumps(
            {
                "load_summaries_s": round(t1 - t0, 1),
                "plan_s": round(t2 - t1, 1),
                "duplicates_s": round(t3 - t2, 1),
                "finish_s": round(t4 - t3, 1),
                "finish_beam_s": round(t5 - t4, 1),
                "latency_ms": latency_ms,
                "requests_in_flight": inflight.REQUESTS,
                "final_shards": len(rows),
                "duplicate_count": found[0],
                "records_written": manifest["totals"]["records_written"],
                "rejects": manifest["rejects"]["count"],
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


def sim(args) -> None:
    records = int(float(args.records))
    shards = int(float(args.shards))
    work = os.path.join(args.dir, f"sim-{records}-{shards}")
    t0 = time.time()
    subprocess.run(
        [sys.executable, "-m", "benchmarks.scale", "_make", work, str(records), str(shards)],
        check=True,
        cwd=ROOT,
    )
    made = time.time() - t0
    out = tempfile.mkdtemp(prefix="scale-sim-out-", dir=args.dir)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.scale",
            "_steps",
            work,
            out,
            args.max_shard_size,
            str(args.latency_ms),
        ],
        check=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    subprocess.run(["rm", "-rf", out])
    m = json.loads(res.stdout.strip().splitlines()[-1])
    m.update(kind="sim", records=records, input_shards=shards, synthetic_files_s=round(made, 1))
    print(json.dumps(m), flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.scale", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "tar2tf-scale"))
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("real", help="real runs of tiny records on both drivers")
    r.add_argument("--records", default="100000,1000000")
    r.add_argument("--per-shard", type=int, default=5000)
    r.add_argument("--drivers", default="inprocess,beam")
    s = sub.add_parser("sim", help="the global steps over synthetic record files")
    s.add_argument("--records", default="1e8")
    s.add_argument("--shards", default="1e4")
    s.add_argument("--max-shard-size", default="256MB")
    s.add_argument(
        "--latency-ms",
        type=float,
        default=0,
        help="delay every request to the work directory by this much, as a bucket would",
    )
    m = sub.add_parser("_make")
    m.add_argument("work")
    m.add_argument("records", type=int)
    m.add_argument("shards", type=int)
    g = sub.add_parser("_steps")
    g.add_argument("work")
    g.add_argument("out")
    g.add_argument("max_shard_size")
    g.add_argument("latency_ms", type=float, nargs="?", default=0)
    args = ap.parse_args(argv)
    if args.cmd == "real":
        real(args)
    elif args.cmd == "sim":
        sim(args)
    elif args.cmd == "_make":
        _synthetic_work(args.work, args.records, args.shards)
    else:
        _global_steps(args.work, args.out, args.max_shard_size, args.latency_ms)


if __name__ == "__main__":
    main()
