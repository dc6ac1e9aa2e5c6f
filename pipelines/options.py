"""Beam pipeline options with an offline, fast local default.

With no ``--runner``, tar2tf runs on Beam's FnApiRunner in ``multi_threading`` mode with
one worker thread per core.  Beam's ``DirectRunner`` would first try to download the Prism
binary (no network here, and a stall risk on networks that drop packets); FnApiRunner is
the engine DirectRunner falls back to anyway.  In that default mode the TFRecord job
also hands whole shards to one local worker process per thread (``pipelines.shard_pool``;
``processes=0`` / ``--processes 0`` keeps the conversion on the threads), because Python
threads contend for the GIL between Pillow's calls and with Beam's own threads: the
processes convert faster, with image ops and for a passthrough (docs/benchmarks.md).
When that pool converts every shard and this process's shard stream writes them, the
DoFns only collect, and the job's bundle runs in ``in_memory`` mode on one worker instead
(:func:`collecting_args`) unless the user chose a running mode.
"""

from __future__ import annotations

import logging
import os
from typing import List, Optional, Sequence

log = logging.getLogger("tar2tf")

LOCAL_DEFAULTS = ["--runner=FnApiRunner", "--direct_running_mode=multi_threading"]


def _has(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def effective_args(beam_args: Optional[Sequence[str]] = None, workers: Optional[int] = None) -> List[str]:
    """``beam_args`` with tar2tf's local defaults; ``workers`` (default: the core count) is
    the local runner's worker count unless ``--direct_num_workers`` is given."""
    args = list(beam_args or [])
    if not _has(args, "--runner"):
        args = LOCAL_DEFAULTS + args
    runner = runner_name(args)
    if runner in ("FnApiRunner", "DirectRunner") and not _has(args, "--direct_num_workers"):
        # in_memory runs one worker whatever the count (Beam warns about any other count)
        n = 1 if _value(args, "--direct_running_mode") == "in_memory" else int(workers or 0) or os.cpu_count() or 1
        args.append(f"--direct_num_workers={n}")
    return args


def auto_processes(workers: int, shards: int, ops: bool = True) -> int:
    """The automatic worker-process count: one per worker thread, when there is more than
    one of each (a single thread or shard gains nothing from a process) and ``ops``: the
    job has ops that do real work per record (``ConvertConfig.has_heavy_ops``), or its
    workers write their frames into local final shards themselves (the in-process
    driver with a local ``{}`` output: faster than threads for the passthrough benchmark,
    docs/benchmarks.md).  Otherwise (a
    passthrough or selections whose frames pass through this process) the work is
    reading, CRC and writing, and threads convert as fast without a worker's ~0.1-0.2 s
    start.  Beam's local runner always takes ``ops=True`` (see :func:`pool_size`)."""
    return min(int(workers), shards) if ops and int(workers) > 1 and shards > 1 else 0


def pool_size(processes: Optional[int], args: Sequence[str], shards: int = 0) -> int:
    """How many shard-converting worker processes to start in this process (0: none).

    Only where DoFns run in this process (the local runner's ``in_memory`` /
    ``multi_threading`` modes); elsewhere the runner's own workers parallelize.
    ``processes=None`` is automatic: the local default mode (``multi_threading``) with
    more than one worker and more than one input shard gets one process per worker,
    whatever the ops.  Unlike the in-process driver (:func:`auto_processes`), a Beam job
    converting on its threads shares the GIL with Beam's own (about forty in this mode),
    and even a passthrough converts faster in workers (the passthrough benchmark,
    docs/benchmarks.md)."""
    mode = _value(args, "--direct_running_mode") or "multi_threading"
    if processes is None:
        workers = int(_value(args, "--direct_num_workers") or 1)
        return auto_processes(workers, shards) if is_local(args) and mode == "multi_threading" else 0
    n = int(processes)
    if n < 0:
        raise ValueError(f"processes must be >= 0, got {processes}")
    if n and not (is_local(args) and mode != "multi_processing"):
        log.warning("processes=%d ignored: shard worker processes are for the local runner's "
                    "in_memory / multi_threading modes (this runner parallelizes with its own workers)", n)
        return 0
    return n


def collecting_args(args: Sequence[str], user_args: Optional[Sequence[str]] = None) -> List[str]:
    """The runner arguments for a local job whose DoFns only collect: this process's worker
    pool converts every shard and its shard stream writes them, so each ``ConvertShard``
    call just waits for its piece's description.  Beam's ``multi_threading`` mode would
    still start its gRPC servers, data channels and thread pool for them; ``in_memory``
    with one worker runs the bundle on the calling thread (0.08 s less CPU in this process
    per job, on the same cores as the workers: passthrough 0.454 -> 0.410 s median on the
    5,120-image benchmark, 12 alternating pairs).  ``args``: the effective arguments; a
    running mode the user chose in ``user_args`` is kept, as are other runners."""
    if runner_name(args) != "FnApiRunner" or _has(user_args or [], "--direct_running_mode"):
        return list(args)
    kept = _without(_without(args, "--direct_running_mode"), "--direct_num_workers")
    return kept + ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _without(args: Sequence[str], flag: str) -> List[str]:
    """``args`` without ``flag`` (given as ``flag=value`` or ``flag value``)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        elif not a.startswith(flag + "="):
            out.append(a)
    return out


def runner_name(args: Sequence[str]) -> str:
    name = "DirectRunner"
    for i, a in enumerate(args):
        if a.startswith("--runner="):
            name = a.split("=", 1)[1]
        elif a == "--runner" and i + 1 < len(args):
            name = args[i + 1]
    return name


def dofns_run_here(args: Sequence[str]) -> bool:
    """Whether the job's DoFns run in this process: FnApiRunner's ``multi_threading`` and
    ``in_memory`` modes (``multi_processing`` and every other runner use other processes)."""
    mode = _value(args, "--direct_running_mode") or "multi_threading"
    return runner_name(args) == "FnApiRunner" and mode in ("multi_threading", "in_memory")


def is_local(args: Sequence[str]) -> bool:
    return runner_name(args) in ("FnApiRunner", "DirectRunner", "BundleBasedDirectRunner",
                                 "SwitchingDirectRunner")


def _value(args: Sequence[str], flag: str) -> Optional[str]:
    val = None
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            val = a.split("=", 1)[1]
        elif a == flag and i + 1 < len(args):
            val = args[i + 1]
    return val


def shows_progress(args: Sequence[str]) -> bool:
    """True when DoFns run inside this process, so the live bar can see them: the local
    runner in ``in_memory``/``multi_threading`` mode, or any portable runner (Flink) with
    ``--environment_type=LOOPBACK``.  ``multi_processing`` workers are other processes."""
    if is_local(args):
        return _value(args, "--direct_running_mode") != "multi_processing"
    return (_value(args, "--environment_type") or "").upper() == "LOOPBACK"


def make_pipeline_options(beam_args: Optional[Sequence[str]] = None):
    from apache_beam.options.pipeline_options import PipelineOptions
    return PipelineOptions(effective_args(beam_args))
