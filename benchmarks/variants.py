"""Worker side of the benchmark: run one (variant, workload) on a dataset, in this process.

``run.py`` starts ``python -m benchmarks.variants '<json spec>'`` once per measurement, so
each variant gets a fresh interpreter and its own peak RSS.  Imports happen before the
clock starts; the clock covers the whole job (for tar2tf: building the Beam pipeline,
running it and finalizing shards + manifest).  After the clock stops the output is
verified (``benchmarks.verify``).  The last stdout line is ``BENCH-RESULT {json}``.

tar2tf variants:

* ``tar2tf-beam-default``: ``pipelines.convert.convert`` as a user runs it with no runner
  flags: one of tar2tf's local worker processes per core (``pipelines.local.pool``)
  converts whole shards in input order, whatever the ops (passthrough too: Beam's own
  threads would share the GIL with converting threads), and writes them into the final
  shards; Beam's FnApiRunner collects the pieces' descriptions (``in_memory`` mode, one
  worker, since session 23; ``multi_threading`` with a thread per core before).
* ``tar2tf-beam-threads`` / ``-inmemory`` / ``-processes``: the same on FnApiRunner's
  threads (``processes=0``): ``multi_threading``, ``in_memory``, or Beam's own
  ``multi_processing`` mode.  ``in_memory`` also gets one worker per core: FnApiRunner
  then splits each bundle over that many embedded workers on threads (Beam logs a warning
  that this mode is meant for one worker; the harness verifies the output like any
  other).  The best of the Beam variants is "tar2tf" in the ratios.
* ``tar2tf-load``: ``Dataset(...).load(template, path=..., remote_exec=False)``, the
  in-process API writing TFRecords with one thread per core (no Beam), each with a worker
  process, as by default for heavy ops and (since session 27) for any job whose workers
  write into local ``{}`` shards themselves, which includes this passthrough.
* ``tar2tf-load-1t`` (passthrough only): the same with ``num_workers=1``: the shards are
  converted on the caller's thread between writes to the final shards (since session 17;
  before, on one converter thread beside it).  A passthrough is Python work under the GIL
  (tar headers, Example, framing): a second thread mostly waits for it.
* ``tar2tf-stream``: ``Dataset(...).load(template, num_workers=cores)``, the streaming
  ``tf.data.Dataset``, iterated to the end element by element in eager Python (nothing
  written); ``tar2tf-stream-b64`` takes it in batches of 64, as ``model.fit(ds.batch(64))``
  would (TensorFlow's eager iterator costs ~0.15 ms per element it hands to Python).
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
    "tar2tf-beam-default": [],  # tar2tf's local default (pipelines/beam/options.py)
    "tar2tf-beam-threads": ["--runner=FnApiRunner", "--direct_running_mode=multi_threading",
                            "--direct_num_workers={n}"],
    "tar2tf-beam-inmemory": ["--runner=FnApiRunner", "--direct_running_mode=in_memory",
                             "--direct_num_workers={n}"],
    "tar2tf-beam-processes": ["--runner=FnApiRunner", "--direct_running_mode=multi_processing",
                              "--direct_num_workers={n}"],
}
# tar2tf's processes= per variant (None: its default, a local worker process per thread)
PROCESSES = {"tar2tf-beam-threads": 0, "tar2tf-beam-inmemory": 0}
WITH_WORKERS = ("tar2tf-beam-default", "tar2tf-beam-processes", "tar2tf-load",
                "limit-codec-processes")  # their peak RSS counts their worker processes
LOAD = ("tar2tf-load", "tar2tf-load-1t")  # the in-process driver: a thread per core, one thread
STREAM = ("tar2tf-stream", "tar2tf-stream-b64")  # the tf.data.Dataset, element by element, in batches
IN_PROCESS = LOAD + STREAM  # Dataset.load, no Beam
TAR2TF = tuple(BEAM_MODES) + IN_PROCESS
BASELINES = ("limit-io", "limit-io-nosync", "limit-codec", "limit-codec-processes", "naive", "webdataset")
LIMIT_CODEC = ("limit-codec", "limit-codec-processes")
ALL = BASELINES + TAR2TF
TYPE_MAP = {"cls": "int64"}
STREAM_WORKLOADS = ("passthrough", "resize32")  # the in-memory API's typical uses
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def missing_reason(variant: str, workload: str) -> Optional[str]:
    """Why a variant does not run for a workload: by design ("n/a: ..."), or because a
    module another engineer writes is absent; None if it runs."""
    if variant.startswith("limit-io") and workload != "passthrough":
        return "n/a: only for passthrough"
    if variant in LIMIT_CODEC and workload == "passthrough":
        return "n/a: no codec work in passthrough"
    if variant == "tar2tf-load-1t" and workload != "passthrough":
        return "n/a: one thread is the in-process mode for a passthrough (decoding jobs use a worker per core)"
    if variant in STREAM and workload not in STREAM_WORKLOADS:
        return "n/a: streaming measured for " + ", ".join(STREAM_WORKLOADS)
    if variant.startswith("tar2tf") and workload != "passthrough" and \
            not os.path.exists(os.path.join(ROOT, "transforms", "ops.py")):
        return "transforms/ops/conversions.py missing"
    if variant in IN_PROCESS and \
            not os.path.exists(os.path.join(ROOT, "pipelines", "dataset.py")):
        return "pipelines/tfdata/dataset.py missing"
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
    # Examples without it (transforms/tfrecord/example_wire.proto); the streaming load is tf.data
    if variant in ("naive", "webdataset") + STREAM:
        import tensorflow  # noqa: F401
    if variant.startswith("tar2tf"):
        import apache_beam  # noqa: F401
        # Beam imports its local runner when the first pipeline runs (~0.04 s)
        import apache_beam.runners.portability.fn_api_runner  # noqa: F401
        import pipelines.beam.convert  # noqa: F401
    if variant in IN_PROCESS:
        import pipelines.tfdata.dataset  # noqa: F401
        import pipelines.local.driver  # noqa: F401


def _cores() -> int:
    return os.cpu_count() or 1


def run_tar2tf(variant: str, data, workload: str, out: str) -> Dict:
    if variant in IN_PROCESS:
        from pipelines.tfdata.dataset import Dataset
        ds = Dataset(data.directory, conversions=tar2tf_stages(workload), selections=["jpg", "cls"])
        rel = os.path.basename(data.template())
        if variant in STREAM:
            stream = ds.load(rel, num_workers=_cores())
            if variant == "tar2tf-stream-b64":
                import tensorflow as tf
                n = sum(int(tf.nest.flatten(b)[0].shape[0]) for b in stream.batch(64))
            else:
                n = sum(1 for _ in stream)
            return {"images": n, "files": [], "stats": ds.stats}
        paths = ds.load(rel, path=os.path.join(out, "train-{}.record"),
                        num_workers=1 if variant == "tar2tf-load-1t" else _cores(),
                        max_shard_size="100MB", remote_exec=False, overwrite=True)
        return {"images": None, "files": list(paths), "manifest": ds.last_result.manifest}
    from pipelines.beam.convert import ConvertConfig, convert
    args = [a.replace("{n}", str(_cores())) for a in BEAM_MODES[variant]]
    res = convert(ConvertConfig(sources=data.template(), output=os.path.join(out, "train-{}.record"),
                                type_map=TYPE_MAP, sample_stages=tar2tf_stages(workload),
                                max_shard_size="100MB", overwrite=True, progress=False,
                                work_dir=os.path.join(out, "work"),
                                processes=PROCESSES.get(variant)), beam_args=args)
    if res.exit_code != 0:
        raise RuntimeError(f"convert exit {res.exit_code}: {res.manifest['rejects']}")
    return {"images": res.totals["records_written"], "files": res.paths, "manifest": res.manifest}


def check(variant: str, workload: str, data, r: Dict) -> Optional[str]:
    """The output verification for this variant (None = all good)."""
    files = [f for f in r["files"] if os.path.isfile(f)]
    if variant in LIMIT_CODEC:
        return None if r["images"] == data.images else f"{r['images']} of {data.images} images processed"
    if variant in STREAM:
        st = r["stats"]
        if r["images"] != data.images or st.records_read != data.images or st.rejects:
            return f"streamed {r['images']} of {data.images} (read {st.records_read}, {len(st.rejects)} rejects)"
        return None
    if variant.startswith("limit-io"):
        return verify.verify_limit_io(data, files)
    if r.get("manifest") is not None:
        why = verify.verify_manifest(r["manifest"], data.images)
        if why:
            return why
    names = ("value", "label") if variant in LOAD else ("jpg", "cls")
    return verify.verify_examples(data, files, workload, *names)


def count_records(files: List[str]) -> int:
    from transforms.tfrecord.framing import iter_frames
    n = 0
    for p in files:
        with open(p, "rb") as f:
            n += sum(1 for _ in iter_frames(f, check_crc=False))
    return n


def _cpu() -> float:
    """CPU seconds (user + system) of this process and its reaped children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _await_reaped_workers() -> None:
    """Wait (outside the timed region) until tar2tf's pool reaper threads have waited for
    the worker processes: only reaped children count in ``RUSAGE_CHILDREN``."""
    import threading
    for t in threading.enumerate():
        if t.name == "tar2tf-pool-reaper":
            t.join(60)


def _hwm() -> int:
    """This process's peak resident memory so far (``VmHWM``), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def run(spec: Dict) -> Dict:
    variant, workload = spec["variant"], spec["workload"]
    data = dataset.build(spec["size"], spec.get("root"))
    if spec.get("shards"):
        data = data.subset(int(spec["shards"]))
    out = spec["out"]
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    _prepare(variant)
    jpegs = baselines.load_jpegs(data) if variant in LIMIT_CODEC else None
    recycled = pagecache.recycle_for(data, out) if spec.get("recycle", True) else 0
    t0, cpu0 = time.perf_counter(), _cpu()
    if variant == "limit-codec":
        r = baselines.limit_codec(jpegs, workload)
    elif variant == "limit-codec-processes":
        r = baselines.limit_codec_processes(jpegs, workload)
    elif variant in baselines.VARIANTS:
        r = baselines.VARIANTS[variant](data, workload, out)
    else:
        r = run_tar2tf(variant, data, workload, out)
    seconds = time.perf_counter() - t0
    _await_reaped_workers()  # tar2tf reaps its worker processes after returning
    cpu = _cpu() - cpu0
    hwm = _hwm()
    files = [f for f in r["files"] if os.path.isfile(f)]
    records = count_records(files) if files else r["images"]
    problem = check(variant, workload, data, r) if spec.get("verify", True) else None
    result = {"variant": variant, "workload": workload, "seconds": seconds, "images_in": data.images,
              "records_out": records, "bytes_in": data.tar_bytes,
              "bytes_out": sum(os.path.getsize(f) for f in files), "files": len(files),
              "hwm_timed": hwm, "cpu_seconds": cpu, "recycled_bytes": recycled, "verified": spec.get("verify", True) and problem is None, "problem": problem}
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
