"""The size of a Beam job's graph, and what the launcher pays to build it, by unit count.

    python -m benchmarks.graph_size [--units 1000,100000,1000000]

Each count is measured in a fresh process: a TFRecord job of that many input shards on
``gs://`` (synthetic names; nothing is read or run) is built as ``tar2tf convert
--runner beam`` builds it (``pipelines.beam.convert.ConvertTFRecords``), and its pipeline
proto serialised as a runner receives it.  Reported: the proto's bytes, the seconds to
build and serialise it (the unit list made before the clock starts), and the process's
RSS at its start, with the unit list, and at its peak (the launcher holds the list it
resolved either way; the graph should add nothing per unit).
JSON lines on stdout, one per count.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def synthetic_job(units: int):
    """A ``units``-shard TFRecord job on ``gs://``, as ``lifecycle.prepare`` leaves it."""
    from pipelines.job.kinds.tfrecord.config import ConvertConfig
    from pipelines.job.kinds.tfrecord.kind import TFRECORD
    from pipelines.job.lifecycle import Job

    inputs = [f"gs://bucket/inputs/shard-{i:07d}.tar" for i in range(units)]
    cfg = ConvertConfig(sources=inputs, output="gs://bucket/out/train-{}.record", progress=False)
    return Job(TFRECORD, cfg, list(enumerate(inputs)), inputs, [], {}, "gs://bucket/work/j", 0.0)


def proto_bytes(job) -> int:
    """The serialised pipeline proto of ``job``'s Beam graph."""
    import apache_beam as beam

    from pipelines.beam.convert import ConvertTFRecords

    p = beam.Pipeline()
    _ = p | ConvertTFRecords(job)
    return len(p.to_runner_api().SerializeToString())


def _measure(units: int) -> dict:
    import apache_beam  # noqa: F401  (imported before the clock, as a launcher has it)

    import pipelines.beam.convert  # noqa: F401

    base = _rss_mb()
    job = synthetic_job(units)
    listed = _rss_mb()
    t0 = time.time()
    size = proto_bytes(job)
    return {
        "units": units,
        "proto_bytes": size,
        "build_s": round(time.time() - t0, 2),
        "rss_start_mb": round(base, 1),
        "rss_with_units_mb": round(listed, 1),
        "peak_rss_mb": round(_rss_mb(), 1),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.graph_size", description=__doc__)
    ap.add_argument("--units", default="1000,100000,1000000")
    ap.add_argument("--_one", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._one is not None:
        print(json.dumps(_measure(a._one)), flush=True)
        return
    for n in (int(float(x)) for x in a.units.split(",")):
        cmd = [sys.executable, "-m", "benchmarks.graph_size", "--_one", str(n)]
        out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
        print(out.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
