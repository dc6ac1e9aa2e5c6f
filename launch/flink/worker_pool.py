"""A Beam worker pool (the EXTERNAL environment's service) that several TaskManagers on one
machine can share.

Each TaskManager asks the pool for SDK workers with ``StartWorker(worker_id, control
endpoint, ...)`` and later ``StopWorker(worker_id)``.  Worker ids are only unique within
one TaskManager's JVM: every TaskManager numbers its environments ``1-1``, ``2-1``...  Beam's
``worker_pool_main`` keeps one process per id, so two TaskManagers sharing it overwrite each
other's entries, and the first ``StopWorker("2-1")`` kills whichever ``2-1`` was started
last -- often the other TaskManager's worker, in the middle of its bundle ("CANCELLED:
client cancelled" in that TaskManager, and a failed task).  On a multi-host cluster each
TaskManager has a pool of its own (a sidecar on ``localhost``) and ids never meet.

This pool starts workers the same way, but never kills one on ``StopWorker``: a worker
ends by itself when its TaskManager closes the control stream (which happens before
``StopWorker`` is sent), and the pool only reaps it.  Workers still running when the pool
ends are ended with it (the cluster's ``stop`` ends the pool's process group).

Workers run on this pool's own interpreter (``sys.executable``), not on whatever
``python`` is first on PATH, so they can always import what the pool imports; their
output goes to the pool's log, not into a pipe that nobody reads.

    python -P -m launch.flink.worker_pool --service_port=50000
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import threading
import time
from concurrent import futures
from typing import List, Optional, Sequence, Tuple

from pipelines.worker_python import python_c

log = logging.getLogger("tar2tf.worker_pool")

HARNESS = (
    "from apache_beam.runners.worker.sdk_worker import SdkHarness; "
    "SdkHarness({url!r}, worker_id={wid!r}, state_cache_size=0, data_buffer_time_limit_ms=-1).run()"
)


def _servicer_base():
    from apache_beam.portability.api import beam_fn_api_pb2_grpc

    return beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolServicer


class SharedWorkerPool(_servicer_base()):
    def __init__(self, python: str = sys.executable):
        self.python = python
        self.lock = threading.Lock()
        self.workers: List[Tuple[str, subprocess.Popen]] = []

    def _reap(self) -> None:
        with self.lock:
            self.workers = [(w, p) for w, p in self.workers if p.poll() is None]

    def StartWorker(self, request, context):
        from apache_beam.portability.api import beam_fn_api_pb2

        self._reap()
        # the current directory (the pool's) off the worker's path: see pipelines.worker_python
        cmd = python_c(
            HARNESS.format(url=request.control_endpoint.url, wid=request.worker_id), self.python
        )
        try:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        except OSError as e:
            return beam_fn_api_pb2.StartWorkerResponse(error=f"cannot start an SDK worker: {e}")
        log.warning(
            "started SDK worker %s (pid %d) for %s",
            request.worker_id,
            p.pid,
            request.control_endpoint.url,
        )
        with self.lock:
            self.workers.append((request.worker_id, p))
        return beam_fn_api_pb2.StartWorkerResponse()

    def StopWorker(self, request, context):
        from apache_beam.portability.api import beam_fn_api_pb2

        # the id may also name another TaskManager's live worker: let the one whose control
        # stream was closed end by itself, and only reap
        self._reap()
        return beam_fn_api_pb2.StopWorkerResponse()

    def stop_all(self) -> None:
        with self.lock:
            for _, p in self.workers:
                if p.poll() is None:
                    p.kill()


def serve(port: int, host: str = "localhost") -> Tuple[object, int, SharedWorkerPool]:
    import grpc
    from apache_beam.portability.api import beam_fn_api_pb2_grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    pool = SharedWorkerPool()
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(pool, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if not bound:
        raise OSError(f"cannot listen on {host}:{port}")
    server.start()
    return server, bound, pool


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--service_port", type=int, required=True)
    ap.add_argument(
        "--host", default="localhost", help="interface to listen on (default: loopback only)"
    )
    a = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    server, port, pool = serve(a.service_port, a.host)
    log.warning("worker pool listening on %s:%d (python %s)", a.host, port, pool.python)
    try:
        while True:
            time.sleep(5)
            pool._reap()  # pylint: disable=protected-access
    except KeyboardInterrupt:
        pass
    finally:
        pool.stop_all()
        server.stop(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
