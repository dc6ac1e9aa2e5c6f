"""How the PCR job's plan grows with its image count (docs/benchmarks.md, "Scale").

::

    python -m benchmarks.pcr_scale [--images 1000000] [--units 10000] [--seed 1]

Synthetic unit sidecars (each image's description, as ``pipelines.job.kinds.pcr.kind`` writes
them) are written into a work directory by this process; a fresh process then draws
every record task of the real plan (``pipelines.job.kinds.pcr.records.plan_records``),
seeded unless ``--seed none``, and reports its peak RSS, its time, and how many sidecar
bytes it read, against the bytes of all sidecars together.  A seeded plan sorts every
image by key, so one record's images come from anywhere in the input: the sidecar bytes
read show whether the plan reads each sidecar once.

Results go to stdout as one JSON line.  The sidecars live under ``--dir`` (default: a
directory in the system's temporary directory), reused between runs of the same sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Dict, List

from pipelines.job.kinds.pcr.records import unit_info_url, write_unit_info

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _description(u: int, i: int) -> Dict:
    """One image's description, shaped as a converted unit's (sizes and scan map vary)."""
    return {
        "key": f"n{u % 1000:05d}/img{u:07d}_{i:05d}",
        "label": u % 1000,
        "offset": i * 40_000,
        "piece_sizes": [3_000 + i % 97, 9_000, 14_000, 14_000 - i % 89],
        "scan_map": [1, 2, 3, 4],
        "orientation": 1,
        "lossless": True,
        "source_format": "JPEG",
        "width": 500,
        "height": 375,
        "components": 3,
    }


def make_units(work: str, images: int, units: int) -> List[Dict]:
    """The units' summaries; their sidecars are written into ``work`` once per size."""
    per = -(-images // units)
    summaries = []
    for u in range(units):
        n = max(0, min(per, images - u * per))
        blob = os.path.join(work, f"unit-{u:06d}.pcrwork")
        summaries.append({"index": u, "records": n, "blob": blob})
    done = os.path.join(work, "done")
    if not os.path.exists(done):
        os.makedirs(work, exist_ok=True)
        for s in summaries:
            u, n = s["index"], s["records"]
            info = {"index": u, "images": [_description(u, i) for i in range(n)], "rejects": []}
            write_unit_info(dict(info, blob=s["blob"]))
        open(done, "w").close()
    return summaries


def _plan(units_file: str, seed, images_per_record: int) -> None:
    """The fresh process: draw every record task; print the measurements."""
    import resource
    import time

    from pipelines.job.kinds.pcr import records as pcr_records
    from pipelines.job.kinds.pcr.config import PcrConfig

    with open(units_file) as f:
        units = json.load(f)
    read = [0]
    unit_info = pcr_records._unit_info

    def counted(unit, cfg):
        got = unit_info(unit, cfg)
        read[0] += os.path.getsize(unit_info_url(unit["blob"]))
        return got

    pcr_records._unit_info = counted  # the bytes the plan reads, on top of its timing
    cfg = PcrConfig(
        sources=[], output=tempfile.gettempdir(), images_per_record=images_per_record, seed=seed
    )
    t = time.perf_counter()
    tasks = images = 0
    for task in pcr_records.plan_records(units, cfg):
        tasks += 1
        images += len(task["images"])
    secs = time.perf_counter() - t
    print(
        json.dumps(
            {
                "images": images,
                "record_tasks": tasks,
                "plan_s": round(secs, 2),
                "us_per_image": round(secs / max(images, 1) * 1e6, 2),
                "sidecar_bytes_read": read[0],
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            }
        )
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.pcr_scale", description=__doc__)
    ap.add_argument("--images", type=int, default=1_000_000)
    ap.add_argument("--units", type=int, default=10_000)
    ap.add_argument("--images-per-record", type=int, default=1024)
    ap.add_argument("--seed", default="1", help="an integer, or 'none' for input order")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "tar2tf-pcr-scale"))
    ap.add_argument("--plan", help=argparse.SUPPRESS)  # the fresh process's units file
    a = ap.parse_args(argv)
    seed = None if a.seed == "none" else int(a.seed)
    if a.plan:
        _plan(a.plan, seed, a.images_per_record)
        return
    work = os.path.join(a.dir, f"{a.images}-{a.units}")
    units = make_units(work, a.images, a.units)
    units_file = os.path.join(work, "units.json")
    with open(units_file, "w") as f:
        json.dump(units, f)
    sidecars = sum(os.path.getsize(unit_info_url(u["blob"])) for u in units)
    cmd = [sys.executable, "-m", "benchmarks.pcr_scale", "--plan", units_file, "--seed", a.seed]
    cmd += ["--images-per-record", str(a.images_per_record)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result.update(units=a.units, seed=seed, sidecar_bytes=sidecars)
    result["sidecar_reads_per_byte"] = round(result["sidecar_bytes_read"] / sidecars, 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
