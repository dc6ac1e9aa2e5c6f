"""What ``tar2tf`` tells about a job it submits to a Flink cluster: the web UI address and
the Flink job id, as soon as the JobManager lists the job, and -- for a cluster started by
``launch/flink-cluster.sh`` -- one clear error instead of a job that waits forever when the
Beam worker pool cannot start Python workers.

Beam's portable runner hands the pipeline to its job server, which submits it to Flink under
a ``BeamApp-...`` name; Beam itself never learns Flink's job id.  So a thread polls the
cluster's REST API (``/jobs/overview``) during the job and reports the first ``BeamApp``
job that was not there before the submission.

The worker pool starts each SDK worker as ``python``; a worker that dies at import
(``ModuleNotFoundError``: a pool started outside the tar2tf venv) is only written to the
pool's log, and the Flink tasks wait for it without end.  When the cluster's state
(``launch/flink/``: ``$TAR2TF_FLINK_CLUSTER`` or the default directory) names
the REST port and the pool port this job uses, the thread also reads the pool's log: on
such an error it cancels the Flink job and names the cause.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
from typing import Iterator, Optional, Sequence

log = logging.getLogger("tar2tf")

POLL = 0.5
# lines of the pool's log (a worker's stderr) that mean no worker can ever start
FATAL = re.compile(r"ModuleNotFoundError|No module named|ImportError")


def remote_master(beam_args: Sequence[str]) -> Optional[str]:
    """host:port of the Flink REST endpoint for a FlinkRunner job on a cluster, else None
    (the embedded `[local]`/`[auto]` mini-cluster, other runners)."""
    from pipelines.beam.options import runner_name

    if runner_name(list(beam_args)).rsplit(".", 1)[-1] != "FlinkRunner":
        return None
    from apache_beam.options.pipeline_options import FlinkRunnerOptions, PipelineOptions

    o = PipelineOptions(list(beam_args))
    master = o.view_as(FlinkRunnerOptions).flink_master
    if not master or master in ("[local]", "[auto]"):
        return None
    return master.split("://", 1)[-1].rstrip("/")


def _environment_config(beam_args: Sequence[str]) -> Optional[str]:
    from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions

    p = PipelineOptions(list(beam_args)).view_as(PortableOptions)
    return p.environment_config if (p.environment_type or "").upper() == "EXTERNAL" else None


def _pool_log(master: str, env_config: Optional[str]) -> Optional[str]:
    """The log of the pool of a launch/flink-cluster.sh cluster serving this job, if any."""
    from launch.flink import cluster, procs

    if not env_config:
        return None
    st = procs.load(cluster.default_state())
    if not st or not st.get("pool_port") or "pool" not in st.get("procs", {}):
        return None
    port = master.rsplit(":", 1)[-1]
    if port != str(st["rest_port"]) or env_config.rsplit(":", 1)[-1] != str(st["pool_port"]):
        return None
    return st["procs"]["pool"]["out"]


class Watcher(threading.Thread):
    def __init__(self, master: str, pool_log: Optional[str]):
        super().__init__(name="tar2tf-flink-watch", daemon=True)
        self.base = f"http://{master}"
        self.pool_log = pool_log
        self.pool_offset = os.path.getsize(pool_log) if pool_log and os.path.exists(pool_log) else 0
        self.done = threading.Event()
        self.job_id: Optional[str] = None
        self.problem: Optional[str] = None
        self.before = set(self._jobs() or {})

    def _jobs(self) -> Optional[dict]:
        import json
        import urllib.request

        try:
            with urllib.request.urlopen(self.base + "/jobs/overview", timeout=3) as r:
                return {j["jid"]: j for j in json.load(r).get("jobs", [])}
        except (OSError, ValueError):
            return None

    def _cancel(self, jid: str) -> None:
        import urllib.request

        try:
            urllib.request.urlopen(
                urllib.request.Request(f"{self.base}/jobs/{jid}?mode=cancel", method="PATCH"),
                timeout=5,
            ).close()
        except OSError as e:
            log.warning("could not cancel Flink job %s: %s", jid, e)

    def _pool_error(self) -> Optional[str]:
        if not self.pool_log or not os.path.exists(self.pool_log):
            return None
        with open(self.pool_log, "rb") as f:
            f.seek(self.pool_offset)
            data = f.read()
        # whole lines only: a line still being written is read on the next poll
        cut = data.rfind(b"\n") + 1
        self.pool_offset += cut
        for line in data[:cut].decode("utf-8", "replace").splitlines():
            if FATAL.search(line):
                return line.strip()
        return None

    def run(self) -> None:
        while not self.done.wait(POLL):
            if self.job_id is None:
                jobs = self._jobs() or {}
                new = sorted(
                    (
                        j
                        for jid, j in jobs.items()
                        if jid not in self.before and j.get("name", "").startswith("BeamApp")
                    ),
                    key=lambda j: j.get("start-time", 0),
                )
                if new:
                    self.job_id = new[0]["jid"]
                    print(
                        f"tar2tf: Flink job {self.job_id} ({new[0].get('name')}); web UI {self.base}/"
                        f"#/job/running/{self.job_id}/overview",
                        file=sys.stderr,
                        flush=True,
                    )
            err = self._pool_error()
            if err:
                self.problem = (
                    f"tar2tf: the Beam worker pool cannot start Python workers ({err}; pool log: "
                    f"{self.pool_log}): start it from the tar2tf venv (launch/flink-cluster.sh "
                    "start does); the Flink job is cancelled"
                )
                print(self.problem, file=sys.stderr, flush=True)
                if self.job_id is None:  # submitted but not yet listed: wait for it to cancel it
                    for _ in range(20):
                        jobs = self._jobs() or {}
                        new = [
                            jid
                            for jid, j in jobs.items()
                            if jid not in self.before and j.get("name", "").startswith("BeamApp")
                        ]
                        if new:
                            self.job_id = new[0]
                            break
                        if self.done.wait(POLL):
                            return
                if self.job_id:
                    self._cancel(self.job_id)
                return

    def stop(self) -> None:
        self.done.set()
        self.join(5)


@contextlib.contextmanager
def watching(beam_args: Sequence[str]) -> Iterator[Optional[Watcher]]:
    """Watches a job submitted to a Flink cluster while the block runs (no-op for other
    runners).  When the pool could not start workers, the block's outcome is replaced by
    that one error (exit code 1)."""
    try:
        master = remote_master(beam_args)
    except Exception:
        master = None
    if master is None:
        yield None
        return
    w = Watcher(master, _pool_log(master, _environment_config(beam_args)))
    w.start()
    try:
        yield w
    except Exception:
        if w.problem is None:
            raise
    finally:
        w.stop()
    if w.problem is not None:
        print(w.problem, file=sys.stderr)
        raise SystemExit(1)
