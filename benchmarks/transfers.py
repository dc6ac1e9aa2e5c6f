"""Bytes each store moves per output byte in a Beam passthrough (docs/benchmarks.md,
"Bytes read and written per output byte")::

    python -m benchmarks.transfers [--shards 8] [--stores local,s3,gs,ais] [--max-shard-size 100MB]

A passthrough job (JPEG bytes as read, ``pipelines.beam.convert.convert`` on Beam's
FnApiRunner, 2 worker processes) over the first ``--shards`` shards of the benchmark
dataset (``benchmarks.dataset``, 17.5 MB and 320 images each), from local disk to an
output whose work directory sits beside it: on local disk, or in a bucket of a test
server started here (moto's S3 server, fake-gcs-server, a one-target AIS cluster: the
test suite's, ``tests/support/*_fixtures.py``; each started and stopped by its PID).

Each set-up runs twice: with the store's own copies (the default) and with
``TAR2TF_STORE_COPY=0`` (every range of a piece read and written by tar2tf); local disk
a third time with ``TAR2TF_KERNEL_COPY=1`` (``copy_file_range``).  Counted by
the store clients themselves (``transforms.stores.traffic``, summed over every process of
the job): bytes read, written and copied by the store, per scheme.  Reported per output
byte, with the input tars' bytes taken out of the local reads.  The two runs' manifests
must list the same shards, sizes and CRC-32C, or the benchmark fails.

Results: one JSON line per run on stdout and a Markdown table at the end.

``python -m benchmarks.transfers --local-copy [--shards 64] [--rounds 6]`` times the
local copy alone: the dataset's tars as pieces (with the sidecars a piece writer leaves)
in a local directory, in the page cache, copied by ``write_shard`` into fsync'ed 100 MB
shards three ways (tar2tf's read and write hashing every byte; the same with whole
pieces' CRC-32C from their sidecars; ``copy_file_range``), the order rotated each round;
median wall and CPU seconds of each.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
STORES = ("local", "s3", "gs", "ais")


def _fixtures():
    """The test suite's server classes (one definition of how each server starts)."""
    if TESTS not in sys.path:
        sys.path.insert(0, TESTS)
    from support import ais_fixtures, gcs_fixtures, s3_fixtures

    return ais_fixtures, gcs_fixtures, s3_fixtures


@contextlib.contextmanager
def server(kind: str):
    """``(env, output root)`` for a set-up; a server started for it is stopped after."""
    if kind == "local":
        d = tempfile.mkdtemp(prefix="tar2tf-xfer-")
        try:
            yield {}, d
        finally:
            shutil.rmtree(d, ignore_errors=True)
        return
    ais, gcs, s3 = _fixtures()
    if kind == "s3":
        srv = s3.MotoServer().start()
        env = {
            "AWS_ACCESS_KEY_ID": s3.ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": s3.SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_S3": srv.url,
        }
    elif kind == "gs":
        binary = gcs.emulator_binary()
        if binary is None:
            raise SystemExit("no fake-gcs-server (launch/setup.d/31-fake-gcs-server.sh)")
        srv = gcs.GCSEmulator(binary).start()
        env = {"STORAGE_EMULATOR_HOST": srv.url}
    elif kind == "ais":
        binary = ais.aisnode_binary()
        if binary is None:
            raise SystemExit("no aisnode (launch/setup.d/30-aisnode.sh)")
        srv = ais.AISCluster(binary).start()
        env = {"AIS_ENDPOINT": srv.endpoint}
    else:
        raise SystemExit(f"unknown store {kind!r}: one of {', '.join(STORES)}")
    try:
        yield env, f"{kind}://{srv.new_bucket()}"
    finally:
        srv.stop()


def run_one(spec: Dict) -> Dict:
    """One job in this (fresh) process: the Beam passthrough of ``spec``."""
    from benchmarks import dataset
    from benchmarks.variants import BEAM_MODES, TYPE_MAP
    from pipelines.beam.convert import convert
    from pipelines.job.kinds.tfrecord.config import ConvertConfig

    data = dataset.build(spec.get("size", "full"), spec.get("data_dir")).subset(spec["shards"])
    cfg = ConvertConfig(
        sources=data.template(),
        output=spec["output"],
        type_map=TYPE_MAP,
        max_shard_size=spec["max_shard_size"],
        overwrite=True,
        progress=False,
    )
    beam = [a.replace("{n}", "2") for a in BEAM_MODES["tar2tf-beam"]]
    t = time.perf_counter()
    res = convert(cfg, beam_args=beam)
    seconds = time.perf_counter() - t
    if res.exit_code != 0:
        raise SystemExit(f"convert exited with {res.exit_code}")
    shards = [[s["path"], s["bytes"], s["crc32c"]] for s in res.manifest["shards"]]
    return {
        "seconds": seconds,
        "bytes_in": data.tar_bytes,
        "bytes_out": sum(s[1] for s in shards),
        "records": res.totals["records_written"],
        "shards": shards,
    }


def measure(kind: str, root: str, env: Dict, copy: str, args) -> Dict:
    """One run; ``copy``: ``off``, ``on`` or ``kernel``."""
    from transforms.stores import traffic

    counts = tempfile.mkdtemp(prefix="tar2tf-traffic-")
    spec = {
        "shards": args.shards,
        "output": f"{root}/{copy}/train-{{}}.record",
        "max_shard_size": args.max_shard_size,
        "data_dir": args.data_dir,
        "size": args.size,
    }
    child_env = dict(os.environ, **env, **{traffic.ENV: counts})
    child_env["TAR2TF_STORE_COPY"] = "0" if copy == "off" else "1"
    child_env["TAR2TF_KERNEL_COPY"] = "1" if copy == "kernel" else "0"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.transfers", "--one", json.dumps(spec)],
        cwd=ROOT,
        env=child_env,
        capture_output=True,
        text=True,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("XFER-RESULT ")), None)
    if proc.returncode or line is None:
        raise SystemExit(f"{kind} run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    r = json.loads(line.split(" ", 1)[1])
    r.update(store=kind, store_copy=copy, counts=traffic.collect(counts))
    shutil.rmtree(counts, ignore_errors=True)
    return r


def per_byte(r: Dict) -> Dict[str, float]:
    """The counts per output byte; the local reads without the input tars'."""
    out = {}
    for k, v in sorted(r["counts"].items()):
        if k == "local.read":
            v -= r["bytes_in"]
        out[k] = v / r["bytes_out"]
    return out


def table(rows: List[Dict]) -> str:
    lines = [
        "| work dir and output | store copies | seconds | read | written | copied by the store |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        pb, scheme = per_byte(r), r["store"]
        lines.append(
            f"| {scheme} | {r['store_copy']} | {r['seconds']:.1f} | "
            f"{pb.get(scheme + '.read', 0):.2f} | {pb.get(scheme + '.write', 0):.2f} | "
            f"{pb.get(scheme + '.copy', 0):.2f} |"
        )
    return "\n".join(lines)


def local_copy(args) -> Dict[str, Dict[str, float]]:
    """The planned local copy alone, three ways (see the module docstring)."""
    import resource
    import statistics

    import google_crc32c

    from benchmarks import dataset
    from pipelines.job.kinds.tfrecord.shardfile import write_shard
    from pipelines.job.workfiles import write_sidecar

    data = dataset.build("full", args.data_dir).subset(args.shards)
    root = tempfile.mkdtemp(prefix="tar2tf-copy-")
    try:
        pieces = []
        for i, tar in enumerate(data.shards):
            with open(tar, "rb") as f:
                blob = f.read()
            url = os.path.join(root, "work", f"piece-{i:06d}.tfrecord")
            os.makedirs(os.path.dirname(url), exist_ok=True)
            with open(url, "wb") as f:
                f.write(blob)
            crc = f"{google_crc32c.value(blob):08x}"
            write_sidecar(url, {"piece": url, "bytes": len(blob), "crc32c": crc})
            pieces.append((url, len(blob)))
        cap, tasks, cur, acc = 100_000_000, [], [], 0  # greedy 100 MB shards, pieces split
        for url, n in pieces:
            off = 0
            while off < n:
                take = min(n - off, cap - acc)
                cur.append([url, off, take])
                acc, off = acc + take, off + take
                if acc == cap:
                    tasks.append(cur)
                    cur, acc = [], 0
        tasks += [cur] if cur else []
        ways = {
            "through tar2tf, every byte hashed": {"TAR2TF_STORE_COPY": "0"},
            "through tar2tf, whole pieces' CRC from sidecars": {"TAR2TF_KERNEL_COPY": "0"},
            "copy_file_range": {"TAR2TF_KERNEL_COPY": "1"},
        }
        names = list(ways)
        runs: Dict[str, List] = {w: [] for w in names}
        crcs = set()
        for rnd in range(args.rounds):
            for way in names[rnd % 3 :] + names[: rnd % 3]:
                os.environ.update({"TAR2TF_STORE_COPY": "1", **ways[way]})
                out = os.path.join(root, "out")
                os.makedirs(out)
                os.sync()
                time.sleep(0.5)
                r0, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
                rows = [
                    write_shard({"path": f"{out}/s-{k}.record", "ranges": r, "records": 1})
                    for k, r in enumerate(tasks)
                ]
                wall, r1 = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF)
                cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
                runs[way].append((wall, cpu))
                crcs.add(tuple(r["crc32c"] for r in rows))
                shutil.rmtree(out)
        if len(crcs) != 1:
            raise SystemExit(f"the ways wrote different shards: {crcs}")
        return {
            w: {
                "wall_s": statistics.median(x[0] for x in v),
                "cpu_s": statistics.median(x[1] for x in v),
                "bytes": sum(n for _, n in pieces),
                "shards": len(tasks),
            }
            for w, v in runs.items()
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", type=int, default=8, help="input shards (17.5 MB each)")
    ap.add_argument(
        "--size", default="full", help="benchmarks.dataset size (quick: the smoke test's)"
    )
    ap.add_argument("--stores", default=",".join(STORES))
    ap.add_argument("--max-shard-size", default="100MB")
    ap.add_argument("--data-dir", default=None, help="dataset root (benchmarks.dataset)")
    ap.add_argument("--local-copy", action="store_true", help="time the local copy alone")
    ap.add_argument("--rounds", type=int, default=6, help="rounds of --local-copy")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.local_copy:
        for way, r in local_copy(args).items():
            print(json.dumps({"way": way, **r}), flush=True)
        return 0
    if args.one:
        print("XFER-RESULT " + json.dumps(run_one(json.loads(args.one))), flush=True)
        return 0
    from benchmarks import dataset

    dataset.build(args.size, args.data_dir)  # built and cached once, outside the timed runs
    rows = []
    for kind in args.stores.split(","):
        with server(kind) as (env, root):
            modes = ("off", "on", "kernel") if kind == "local" else ("off", "on")
            runs = [measure(kind, root, env, copy, args) for copy in modes]
        shards = [[[os.path.basename(p), n, c] for p, n, c in r["shards"]] for r in runs]
        if any(s != shards[0] for s in shards):
            raise SystemExit(f"{kind}: the runs wrote different shards:\n{shards}")
        for r in runs:
            print(json.dumps({k: v for k, v in r.items() if k != "shards"}), flush=True)
            rows.append(r)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
