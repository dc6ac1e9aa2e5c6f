"""Convert input shards in local worker processes (``processes=N`` / ``--processes N``).

Beam's local runner runs DoFns on threads of one process.  Pillow, zlib and hashlib release
the GIL, but everything between those calls (tar headers, Pillow's Python plugins, Example
building) holds it, and on 2 cores the threads of a decode-heavy job lose about a quarter
of their throughput to one another (docs/benchmarks.md: resize224 ~680 images/s on two
threads, ~880 in two processes, same code).  With a pool, each ``ConvertShard`` call hands
its whole shard to a worker process and waits: Beam's threads only schedule, the workers
convert.  Output is the same bytes (a piece per shard, written by the worker).

* The pool belongs to the job that :func:`started <start>` it, in that process: a DoFn
  that runs elsewhere (Flink, Dataflow, Beam's ``multi_processing`` workers) finds no
  pool for its job and converts in its own thread, as remote runners parallelize with
  their own worker processes.
* Workers are *spawned* (never forked from a process that runs gRPC threads) and import
  only :mod:`pipelines.shard_convert` (no Beam, no TensorFlow): ~0.2 s each, in parallel,
  while Beam builds the graph.  They get the job's :class:`ConvertConfig` once, pickled
  with cloudpickle as Beam ships DoFns, so user ops and lambdas work as on a Beam worker.
* A worker that dies (a crash in native code) fails the job with ``BrokenProcessPool``;
  an exception inside the conversion is raised in the DoFn as before.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Dict, Optional

log = logging.getLogger("tar2tf")

_pools: Dict[str, ProcessPoolExecutor] = {}
_lock = threading.Lock()

# worker-process state, set once by _init
_job: Dict[str, Any] = {}


def _init(blob: bytes, work: str) -> None:
    import pickle
    cfg = pickle.loads(blob)
    _job.update(cfg=cfg, stages=cfg.stages(), work=work)


def _ready() -> bool:
    return bool(_job)


def _convert(index: int, url: str) -> Dict[str, Any]:
    from pipelines.shard_convert import convert_shard
    return convert_shard(index, url, _job["work"], _job["cfg"], _job["stages"])


def start(job: str, cfg, work: str, processes: int) -> None:
    """Start ``processes`` workers for ``job`` (they warm up in the background)."""
    import cloudpickle
    blob = cloudpickle.dumps(cfg)
    pool = ProcessPoolExecutor(max_workers=int(processes), mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init, initargs=(blob, work))
    for _ in range(int(processes)):
        pool.submit(_ready)  # spawn them all now, not at the first shard
    with _lock:
        _pools[job] = pool


def get(job: str) -> Optional[ProcessPoolExecutor]:
    with _lock:
        return _pools.get(job)


def convert(pool: ProcessPoolExecutor, index: int, url: str) -> Dict[str, Any]:
    """Convert one shard in a worker; waits (without holding the GIL) for its info."""
    return pool.submit(_convert, index, url).result()


def stop(job: str) -> None:
    with _lock:
        pool = _pools.pop(job, None)
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)
