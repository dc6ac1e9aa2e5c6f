"""Reading tar2tf's ArrayRecord output against its TFRecord output (docs/benchmarks.md,
"ArrayRecord reads").

One command converts the benchmark dataset (``benchmarks.dataset``: ImageNet-like JPEGs
with labels) twice with the same options, ``--format tfrecord`` and ``--format
array_record`` (the default command's 200MB shards), checks that record ``i`` is the same
in both, and times, on one thread of this process:

* **TFRecord, sequential**: ``tf.data.TFRecordDataset`` over the shards (TensorFlow's C++
  reader, as training input reads them), every record once, one at a time and in
  batches of 256; and tar2tf's own Python reader (``transforms.tfrecord.framing``);
* **ArrayRecord, sequential**: ``ArrayRecordDataSource`` (``array_record``'s, which Grain
  reads through), records in order, 256 per ``__getitems__`` call;
* **ArrayRecord, random access**: the same source, one record per ``source[i]`` at
  uniformly random ``i`` (what a Grain sampler that shuffles asks for), and 256 random
  keys per ``__getitems__`` call (a batch).

Each is timed ``--repeat`` times (the median is reported) after one untimed pass, with
the files in the page cache (a dataset that fits in memory), and again with the files
evicted from it before every run (``posix_fadvise(DONTNEED)``: reads from the device).
MB/s counts the serialized records' bytes, the same for both formats, so the figures
compare the readers, not the files' sizes.

    python -m benchmarks.arrayrecord --shards 16 --random 20000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List

BATCH = 256


def _convert(template: str, output: str, fmt: str) -> List[str]:
    from pipelines.inprocess.driver import convert_in_process
    from pipelines.job.kinds.tfrecord.config import ConvertConfig

    cfg = ConvertConfig(
        sources=template,
        output=output,
        max_shard_size="200MB",  # the CLI's default
        type_map={"cls": "int64"},
        progress=False,
        format=fmt,
    )
    res = convert_in_process(cfg, num_workers=os.cpu_count() or 1)
    assert res.exit_code == 0, res.totals
    return list(res.paths)


def drop_cache(paths: List[str]) -> None:
    """Evict the files' pages from the page cache (they are clean: written and synced), so
    that the next read comes from the device."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _timed(fn: Callable[[], int], repeat: int, cold: List[str] = ()) -> Dict[str, float]:
    """``fn`` returns the bytes it read; one warm-up, then the median of ``repeat`` runs,
    each after the files ``cold`` are evicted from the page cache."""
    fn()
    runs = []
    for _ in range(repeat):
        if cold:
            drop_cache(cold)
        t, c = time.perf_counter(), time.process_time()
        n = fn()
        runs.append((time.perf_counter() - t, time.process_time() - c, n))
    return {
        "seconds": statistics.median(r[0] for r in runs),
        # CPU time of this process (all its threads): on a machine shared with other work
        # the steadier figure, since waiting for a core does not count
        "cpu_seconds": statistics.median(r[1] for r in runs),
        "bytes": runs[0][2],
    }


def measure(tf_paths: List[str], ar_paths: List[str], random_reads: int, repeat: int) -> Dict:
    import tensorflow as tf
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    source = ArrayRecordDataSource(ar_paths)
    n = len(source)

    def tf_sequential() -> int:
        total = 0
        for r in tf.data.TFRecordDataset(tf_paths):
            total += len(r.numpy())
        return total

    def tf_sequential_batched() -> int:
        total = 0
        for b in tf.data.TFRecordDataset(tf_paths).batch(BATCH):
            total += sum(len(x) for x in b.numpy())
        return total

    def tf_sequential_python() -> int:
        from transforms.tfrecord.framing import read_records

        return sum(len(r) for p in tf_paths for r in read_records(p))

    def ar_sequential_one() -> int:
        return sum(len(source[i]) for i in range(n))

    def ar_sequential() -> int:
        total = 0
        for start in range(0, n, BATCH):
            for r in source.__getitems__(range(start, min(n, start + BATCH))):
                total += len(r)
        return total

    rng = random.Random(0)
    keys = [rng.randrange(n) for _ in range(random_reads)]

    def ar_random() -> int:
        return sum(len(source[i]) for i in keys)

    def ar_random_batched() -> int:
        total = 0
        for start in range(0, len(keys), BATCH):
            for r in source.__getitems__(keys[start : start + BATCH]):
                total += len(r)
        return total

    out = {
        "records": n,
        "tfrecord_file_bytes": sum(os.path.getsize(p) for p in tf_paths),
        "array_record_file_bytes": sum(os.path.getsize(p) for p in ar_paths),
        "shards": len(ar_paths),
        "random_reads": len(keys),
    }
    for cache, cold in (("warm", []), ("cold", tf_paths + ar_paths)):
        for name, fn in (
            ("tfrecord_sequential", tf_sequential),
            ("tfrecord_sequential_batched", tf_sequential_batched),
            ("tfrecord_sequential_python", tf_sequential_python),
            ("array_record_sequential_one", ar_sequential_one),
            ("array_record_sequential", ar_sequential),
            ("array_record_random", ar_random),
            ("array_record_random_batched", ar_random_batched),
        ):
            r = _timed(fn, repeat, cold)
            reads = len(keys) if "random" in name else n
            out.setdefault(cache, {})[name] = {
                "seconds": round(r["seconds"], 3),
                "cpu_seconds": round(r["cpu_seconds"], 3),
                "records_per_s": round(reads / r["seconds"], 1),
                "mb_per_s": round(r["bytes"] / 1e6 / r["seconds"], 1),
                "records_per_cpu_s": round(reads / max(r["cpu_seconds"], 1e-9), 1),
            }
    return out


def check_same_records(tf_paths: List[str], ar_paths: List[str]) -> int:
    """Record i is the same in both outputs (the benchmark reads what the job wrote)."""
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    from transforms.tfrecord.framing import read_records

    source = ArrayRecordDataSource(ar_paths)
    i = 0
    for p in tf_paths:
        for rec in read_records(p):
            if source[i] != rec:
                raise AssertionError(f"record {i} differs between the two outputs")
            i += 1
    if i != len(source):
        raise AssertionError(f"{i} TFRecord records, {len(source)} ArrayRecord records")
    return i


def markdown(r: Dict) -> str:
    rows = [
        ("TFRecord, sequential (`tf.data.TFRecordDataset`)", "tfrecord_sequential"),
        ("TFRecord, sequential, `.batch(256)`", "tfrecord_sequential_batched"),
        (
            "TFRecord, sequential (tar2tf's Python reader, CRCs checked)",
            "tfrecord_sequential_python",
        ),
        ("ArrayRecord, sequential (`source[i]`)", "array_record_sequential_one"),
        ("ArrayRecord, sequential (256 keys per `__getitems__`)", "array_record_sequential"),
        ("ArrayRecord, random (`source[i]`)", "array_record_random"),
        ("ArrayRecord, random (256 random keys per `__getitems__`)", "array_record_random_batched"),
    ]
    w, c = r["warm"], r["cold"]
    lines = [
        "| read | records/s (page cache) | MB/s (page cache) | records per CPU-second (page cache) "
        "| records/s (evicted) | MB/s (evicted) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, key in rows:
        lines.append(
            f"| {label} | {w[key]['records_per_s']:,.0f} | {w[key]['mb_per_s']:,.0f} "
            f"| {w[key]['records_per_cpu_s']:,.0f} "
            f"| {c[key]['records_per_s']:,.0f} | {c[key]['mb_per_s']:,.0f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    from benchmarks import dataset

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="full", choices=sorted(dataset.SIZES))
    ap.add_argument("--shards", type=int, help="the first N input shards only")
    ap.add_argument("--random", type=int, default=20000, help="random reads per pass")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work-dir", help="where the outputs go (default: a temporary directory)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)

    data = dataset.build(args.size, log=lambda m: print(m, file=sys.stderr))
    if args.shards:
        data = data.subset(args.shards)
    work = tempfile.mkdtemp(prefix="tar2tf-arbench-", dir=args.work_dir)
    try:
        t = time.perf_counter()
        tf_paths = _convert(data.template(), os.path.join(work, "tf", "train.tfrecord"), "tfrecord")
        convert_tf = time.perf_counter() - t
        t = time.perf_counter()
        ar_paths = _convert(
            data.template(), os.path.join(work, "ar", "train.array_record"), "array_record"
        )
        convert_ar = time.perf_counter() - t
        check_same_records(tf_paths, ar_paths)
        r = measure(tf_paths, ar_paths, args.random, args.repeat)
        # the whole job's time (one run each: a rough cost of writing the other format)
        r["convert_seconds"] = {
            "tfrecord": round(convert_tf, 2),
            "array_record": round(convert_ar, 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    r["input_shards"] = len(data.shards)
    print(json.dumps(r, indent=1))
    print(markdown(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
