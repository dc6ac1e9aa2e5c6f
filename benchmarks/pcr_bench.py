"""PCR part of the benchmark: conversion throughput, then bytes read + load time per scan group.

``python -m benchmarks.pcr_bench '<json spec>'`` (started by ``run.py`` in its own process):

1. ``pipelines.beam.pcr.convert_pcr`` turns the tar shards into a PCR dataset (Beam, the same
   local runner mode as the TFRecord benchmark), timed; every image must be written.
2. For scan groups 1, 2, 5 and all (10): ``transforms.pcr.reader.iter_pcr`` reads every
   record at that level through an opener that counts the bytes the files deliver.  The
   count must equal the sum of the indexed prefixes (``RecordEntry.prefix(k)``): loading k
   groups reads exactly the prefix, nothing more.  Each level is timed twice: reading
   (bytes to JPEGs) and reading + decoding every JPEG with Pillow.

The fraction reported is bytes read / bytes of all groups (the whole PCR dataset); the
fraction of the source JPEG bytes is shown too.  The whole part is skipped, with the
reason, when the PCR modules or ``jpegtran`` are missing.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import time
from typing import Dict, List, Optional

from benchmarks import dataset, pagecache

GROUPS = (1, 2, 5, 10)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def missing_reason() -> Optional[str]:
    for rel in ("pipelines/beam/pcr.py", "transforms/pcr/reader.py", "transforms/pcr/format.py"):
        if not os.path.exists(os.path.join(ROOT, rel)):
            return f"{rel} not present"
    import shutil as sh

    if sh.which("jpegtran") is None:
        return "jpegtran not installed (launch/setup.d/20-apt.sh)"
    return None


class _Counting(io.RawIOBase):
    """An unbuffered local file that adds every byte it returns to a shared counter."""

    def __init__(self, path: str, counter: List[int]):
        self._f = open(path, "rb", buffering=0)
        self._n = counter

    def readable(self):
        return True

    def readinto(self, b):
        n = self._f.readinto(b)
        self._n[0] += n or 0
        return n

    def close(self):
        self._f.close()
        super().close()


def _load(files: List[str], index: str, k: int, decode: bool) -> Dict:
    from transforms.pcr.reader import iter_pcr

    counter = [0]
    t0 = time.perf_counter()
    n = sum(
        1
        for _ in iter_pcr(
            files, index, scan_groups=k, decode=decode, opener=lambda url: _Counting(url, counter)
        )
    )
    return {"images": n, "seconds": time.perf_counter() - t0, "bytes": counter[0]}


def run(spec: Dict) -> Dict:
    from pipelines.beam.pcr import PcrConfig, convert_pcr
    from transforms.pcr import format as fmt

    data = dataset.build(spec["size"], spec.get("root"))
    out = os.path.join(spec["out"], "pcr")
    shutil.rmtree(out, ignore_errors=True)
    args = [a.replace("{n}", str(os.cpu_count() or 1)) for a in spec["beam_args"]]
    if spec.get("recycle", True):
        os.makedirs(spec["out"], exist_ok=True)
        pagecache.recycle_for(data, spec["out"])
    t0 = time.perf_counter()
    res = convert_pcr(
        PcrConfig(
            sources=data.template(),
            output=out,
            images_per_record=spec.get("per_record", 512),
            overwrite=True,
        ),
        args,
    )
    seconds = time.perf_counter() - t0
    written = res.totals["records_written"]
    if res.exit_code != 0 or written != data.images:
        raise RuntimeError(
            f"PCR convert wrote {written} of {data.images} images (exit {res.exit_code})"
        )
    _, entries = fmt.read_index(res.index_path)
    files = list(res.paths)
    total = sum(fmt.lookup(entries, f).size for f in files)
    levels = []
    for k in GROUPS:
        expect = sum(fmt.lookup(entries, f).prefix(k) for f in files)
        read = _load(files, res.index_path, k, decode=False)
        dec = _load(files, res.index_path, k, decode=True)
        levels.append(
            {
                "groups": k,
                "bytes": read["bytes"],
                "prefix_bytes": expect,
                "exact_prefix": read["bytes"] == expect == dec["bytes"],
                "fraction": read["bytes"] / total,
                "fraction_of_source": read["bytes"] / data.jpeg_bytes,
                "images": read["images"],
                "seconds": read["seconds"],
                "decode_seconds": dec["seconds"],
                "ok": read["images"] == dec["images"] == data.images,
            }
        )
    out_res = {
        "images": data.images,
        "convert_seconds": seconds,
        "bytes_total": total,
        "source_jpeg_bytes": data.jpeg_bytes,
        "records": len(files),
        "load": levels,
        "beam_args": args,
    }
    if not spec.get("keep"):
        shutil.rmtree(out, ignore_errors=True)
    return out_res


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    import apache_beam  # noqa: F401 - imported before the clock, like the other variants

    import pipelines.beam.pcr  # noqa: F401

    result = run(json.loads(argv[0]))
    sys.stdout.write("BENCH-RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
