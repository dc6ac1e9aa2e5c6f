"""Worker side of the benchmark: run one (variant, workload) on a dataset, in this process.

``run.py`` starts ``python -m benchmarks.variants '<json spec>'`` once per measurement, so
each variant gets a fresh interpreter.  Imports happen before the clock starts; the clock
covers the whole job (for tar2tf: building the Beam pipeline, running it and finalizing
shards + manifest).  After the clock stops the output is verified (``benchmarks.verify``).
The last stdout line is ``BENCH-RESULT {json}``, with the wall-clock time the clock stopped
(``clock_stop``), so that ``run.py``'s memory sampler leaves the verification out.

tar2tf variants (both drivers, with explicit flags, so that they measure these modes
whatever a given version's defaults are):

* ``tar2tf-beam``: ``pipelines.beam.convert.convert`` on Beam's FnApiRunner in
  ``multi_processing`` mode with one process per core
  (``--direct_running_mode=multi_processing --direct_num_workers=N``): the CLI's default
  Beam runner.  The DoFns convert in Beam's worker processes.
* ``tar2tf-inprocess``: ``pipelines.inprocess.driver.convert_in_process`` with one thread per core
  (the CLI's ``--runner inprocess``): no Beam; with more than one worker, shards are converted
  by tar2tf's worker processes (``pipelines.inprocess.pool``), which write local ``{}`` output
  shards themselves.
* ``tar2tf-default``: what ``tar2tf convert`` runs with no runner flag: the driver is the
  one the CLI picks for an empty runner argument list (``pipelines.beam.options.in_process``),
  with the default image codec.
* ``tar2tf-pillow``: ``tar2tf-default`` with ``TAR2TF_IMAGE_CODEC=pillow`` (the codec
  before the numpy one, today's bytes); resize workloads only, for the codec's same-run
  speed-up.
* ``tar2tf-beam-threads`` (not in the default set): FnApiRunner's ``multi_threading`` mode
  with the conversion on its threads (``processes=0``): the cheapest Beam mode to start,
  for the CI smoke test.

``spec["workers"]`` sets the worker count (processes, threads) instead of the core count,
for the 1-vs-2-workers scaling runs.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import time
from typing import Dict, List, Optional

from benchmarks import baselines, dataset, pagecache, verify

BEAM_MODES = {
    "tar2tf-beam": [
        "--runner=FnApiRunner",
        "--direct_running_mode=multi_processing",
        "--direct_num_workers={n}",
    ],
    "tar2tf-beam-threads": [
        "--runner=FnApiRunner",
        "--direct_running_mode=multi_threading",
        "--direct_num_workers={n}",
    ],
}
# tar2tf's processes= per variant (None: its automatic choice)
PROCESSES = {"tar2tf-beam-threads": 0}
IN_PROCESS = ("tar2tf-inprocess",)  # the in-process driver (no Beam)
DEFAULT_COMMAND = ("tar2tf-default", "tar2tf-pillow")  # the CLI's choice of driver
CODEC_AB = {"tar2tf-pillow": "pillow"}  # variant -> TAR2TF_IMAGE_CODEC
# the default command and `--runner beam`: every target is measured for them
DRIVERS = ("tar2tf-default", "tar2tf-beam")
TAR2TF = tuple(BEAM_MODES) + IN_PROCESS + DEFAULT_COMMAND
BASELINES = ("limit-io", "limit-io-nosync", "limit-codec", "naive", "webdataset", "tfdata")
LIMIT_CODEC = ("limit-codec",)
ALL = BASELINES + TAR2TF
DEFAULT = ("limit-io", "limit-codec", "naive", "webdataset", "tfdata") + DRIVERS + tuple(CODEC_AB)
TYPE_MAP = {"cls": "int64"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def missing_reason(variant: str, workload: str) -> Optional[str]:
    """Why a variant does not run for a workload ("n/a: ..." by design), or None."""
    if variant.startswith("limit-io") and workload != "passthrough":
        return "n/a: only for passthrough"
    if variant in LIMIT_CODEC + ("tfdata",) + tuple(CODEC_AB) and workload == "passthrough":
        return "n/a: no codec work in passthrough"
    return None


def tar2tf_stages(workload: str) -> List:
    """The project's ops for a workload (the same features the baselines write).

    ``Resize`` on the raw JPEG entry decodes with DCT-domain downscaling (its default
    ``draft_gap``); ``Encode`` re-encodes at the baselines' quality."""
    if workload == "passthrough":
        return []
    from transforms.ops import Encode, Resize

    size = baselines.SIZES[workload]
    if workload == "resize224":
        return [Encode(Resize("jpg", size), "jpeg", quality=baselines.ENCODE_QUALITY)]
    return [Resize("jpg", size)]


def _prepare(variant: str):
    """Imports outside the timed region."""
    # TensorFlow only where the variant really uses it: the tar2tf converters encode
    # Examples without it (transforms/tfrecord/example_wire.proto)
    if variant in ("naive", "webdataset", "tfdata"):
        import tensorflow  # noqa: F401
    if variant.startswith("tar2tf"):
        import apache_beam

        # Beam imports its local runner when the first pipeline runs (~0.04 s)
        import apache_beam.runners.portability.fn_api_runner  # noqa: F401

        import pipelines.beam.convert
        import pipelines.inprocess.driver  # noqa: F401


def default_in_process() -> bool:
    """Whether ``tar2tf convert`` with no runner flag runs the in-process driver."""
    from pipelines.beam.options import in_process

    return bool(in_process([]))


def set_codec(variant: str) -> None:
    """The image codec of a variant, before anything imports tar2tf's image ops (worker
    processes inherit the environment)."""
    codec = CODEC_AB.get(variant)
    if codec:
        os.environ["TAR2TF_IMAGE_CODEC"] = codec
        if "transforms.ops.images" in sys.modules:
            sys.modules["transforms.ops.images"].CODEC = codec


def run_tar2tf(variant: str, data, workload: str, out: str, workers: int) -> Dict:
    from pipelines.beam.convert import convert
    from pipelines.job.kinds.tfrecord.config import ConvertConfig

    cfg = ConvertConfig(
        sources=data.template(),
        output=os.path.join(out, "train-{}.record"),
        type_map=TYPE_MAP,
        sample_stages=tar2tf_stages(workload),
        max_shard_size="100MB",
        overwrite=True,
        progress=False,
        work_dir=os.path.join(out, "work"),
        processes=PROCESSES.get(variant),
    )
    if variant in IN_PROCESS or (variant in DEFAULT_COMMAND and default_in_process()):
        from pipelines.inprocess.driver import convert_in_process

        res = convert_in_process(cfg, num_workers=workers)
    else:
        mode = BEAM_MODES.get(variant, BEAM_MODES["tar2tf-beam"])  # the CLI's Beam default
        res = convert(cfg, beam_args=[a.replace("{n}", str(workers)) for a in mode])
    if res.exit_code != 0:
        raise RuntimeError(f"convert exit {res.exit_code}: {res.manifest['rejects']}")
    return {"images": res.totals["records_written"], "files": res.paths, "manifest": res.manifest}


def check(variant: str, workload: str, data, r: Dict) -> Optional[str]:
    """The output verification for this variant (None = all good)."""
    files = [f for f in r["files"] if os.path.isfile(f)]
    if variant in LIMIT_CODEC:
        return (
            None
            if r["images"] == data.images
            else f"{r['images']} of {data.images} images processed"
        )
    if variant.startswith("limit-io"):
        return verify.verify_limit_io(data, files)
    if r.get("manifest") is not None:
        why = verify.verify_manifest(r["manifest"], data.images)
        if why:
            return why
    return verify.verify_examples(data, files, workload, "jpg", "cls")


def count_records(files: List[str]) -> int:
    from transforms.tfrecord.framing import iter_frames

    n = 0
    for p in files:
        with open(p, "rb") as f:
            n += sum(1 for _ in iter_frames(f, check_crc=False))
    return n


def _cpu() -> float:
    """CPU seconds (user + system) of this process and its reaped children."""
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _await_reaped_workers() -> None:
    """Wait (outside the timed region) until tar2tf's pool reaper threads have waited for
    the worker processes: only reaped children count in ``RUSAGE_CHILDREN``."""
    import threading

    for t in threading.enumerate():
        if t.name == "tar2tf-pool-reaper":
            t.join(60)


def run(spec: Dict) -> Dict:
    variant, workload = spec["variant"], spec["workload"]
    data = dataset.build(spec["size"], spec.get("root"))
    if spec.get("shards"):
        data = data.subset(int(spec["shards"]))
    out = spec["out"]
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    set_codec(variant)
    _prepare(variant)
    jpegs = baselines.load_jpegs(data) if variant in LIMIT_CODEC else None
    recycled = pagecache.recycle_for(data, out) if spec.get("recycle", True) else 0
    workers = int(spec.get("workers") or os.cpu_count() or 1)
    t0, cpu0 = time.perf_counter(), _cpu()
    if variant == "limit-codec":
        r = baselines.limit_codec(jpegs, workload, workers)
    elif variant in baselines.VARIANTS:
        r = baselines.VARIANTS[variant](data, workload, out)
    else:
        r = run_tar2tf(variant, data, workload, out, workers)
    seconds = time.perf_counter() - t0
    clock_stop = time.time()
    _await_reaped_workers()  # tar2tf reaps its worker processes after returning
    cpu = _cpu() - cpu0
    files = [f for f in r["files"] if os.path.isfile(f)]
    records = count_records(files) if files else r["images"]
    problem = check(variant, workload, data, r) if spec.get("verify", True) else None
    result = {
        "variant": variant,
        "workload": workload,
        "seconds": seconds,
        "images_in": data.images,
        "records_out": records,
        "bytes_in": data.tar_bytes,
        "bytes_out": sum(os.path.getsize(f) for f in files),
        "files": len(files),
        "clock_stop": clock_stop,
        "workers": workers,
        "cpu_seconds": cpu,
        "recycled_bytes": recycled,
        "verified": spec.get("verify", True) and problem is None,
        "problem": problem,
    }
    if not spec.get("keep"):
        shutil.rmtree(out, ignore_errors=True)
    return result


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(argv[0])
    result = run(spec)
    sys.stdout.write("BENCH-RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
