"""A real Flink session cluster for tests: a JobManager, two TaskManagers and Beam's
worker pool (separate processes, launch/flink/) on free loopback ports, and
tar2tf jobs submitted to it through launch/flink.sh."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Dict, List, Optional

import pytest

from support.ais_fixtures import free_ports
from support.cli_fixtures import ROOT

sys.path.insert(0, ROOT)
from launch.flink import cluster as flink_cluster
from launch.flink import jvm as flink_jvm
from launch.flink import procs as flink_procs

CACHE = os.environ.get("TAR2TF_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tar2tf")
FLINK_SH = os.path.join(ROOT, "launch", "flink.sh")
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# seconds per record of tests/support/slow_ops.py in the SDK workers: long enough to kill a process
# mid-conversion, short enough for the whole module to stay within minutes
SLOW_DELAY = "0.1"


def setup_or_fail() -> Dict[str, str]:
    """FLINK_JOB_SERVER_JAR, FLINK_VERSION, FLINK_DIST from the set-up steps.  No Java:
    skip (fail under CI=true).  Java but no job server or distribution: fail, naming the
    step and its remembered reason."""
    ci = os.environ.get("CI", "").lower() == "true"
    if not shutil.which("java"):
        msg = "FLINK CLUSTER TESTS: java is not on PATH (apt-get install openjdk-17-jre-headless)"
        if ci:
            pytest.fail(msg)
        pytest.skip(msg)
    env = flink_cluster.read_env(os.path.join(CACHE, "flink.env"))
    env.update(flink_cluster.read_env(os.path.join(CACHE, "flink-dist.env")))
    problems = []
    if not os.path.isfile(env.get("FLINK_JOB_SERVER_JAR", "")):
        why = _remembered("flink.unavailable")
        problems.append(f"no Beam Flink job server (launch/setup.d/50-flink.sh){why}")
    if not env.get("FLINK_DIST") or not os.path.isdir(env["FLINK_DIST"]):
        why = _remembered("flink-dist.unavailable")
        problems.append(f"no Flink distribution (launch/setup.d/51-flink-dist.sh){why}")
    if problems:
        pytest.fail("FLINK CLUSTER TESTS: Java is here but " + "; ".join(problems))
    return env


def _remembered(marker: str) -> str:
    path = os.path.join(CACHE, marker)
    return ": " + open(path).readline().strip() if os.path.exists(path) else ""


class Cluster:
    """A running cluster: its state directory, ports and processes, and helpers to submit
    tar2tf jobs to it and read Flink's REST API."""

    def __init__(self, state: str, setup: Dict[str, str], rest_port: int, pool_port: int):
        self.state, self.setup, self.rest_port, self.pool_port = state, setup, rest_port, pool_port

    @property
    def procs(self) -> Dict[str, dict]:
        return flink_procs.load(self.state)["procs"]

    def rest(self, path: str):
        return flink_jvm.rest(self.rest_port, path, timeout=10)

    def env(self, **extra) -> Dict[str, str]:
        e = dict(
            os.environ,
            TAR2TF_PYTHON=sys.executable,
            TAR2TF_CACHE=CACHE,
            TF_CPP_MIN_LOG_LEVEL="3",
            FLINK_JOB_SERVER_JAR=self.setup["FLINK_JOB_SERVER_JAR"],
            FLINK_VERSION=self.setup["FLINK_VERSION"],
            FLINK_MASTER=f"localhost:{self.rest_port}",
            ENVIRONMENT_TYPE="EXTERNAL",
            ENVIRONMENT_CONFIG=f"localhost:{self.pool_port}",
            TAR2TF_FLINK_CLUSTER=self.state,
            # --ops support.slow_ops:slow_ops is imported where the job is built, too
            PYTHONPATH=os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p),
        )
        e.update(extra)
        return e

    def command(self, *args: str) -> List[str]:
        return ["bash", FLINK_SH, *args, "--no-progress", "--parallelism=2"]

    def run(self, *args: str, timeout: float = 900, **extra) -> subprocess.CompletedProcess:
        """tar2tf on the cluster; on a timeout the whole run ends (the CLI and the job
        server it started), not only the script."""
        p = subprocess.Popen(
            self.command(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(**extra),
            cwd=ROOT,
            start_new_session=True,
        )
        try:
            out, err = p.communicate(timeout=timeout)
        finally:
            end_group(p)
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    def popen(self, *args: str, log: str, **extra) -> subprocess.Popen:
        with open(log, "w") as out:
            return subprocess.Popen(
                self.command(*args),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(**extra),
                cwd=ROOT,
                start_new_session=True,
            )

    def job_id(self, stderr: str) -> str:
        """The Flink job id that tar2tf printed on submitting (launch/flink_watch.py)."""
        m = re.search(
            r"tar2tf: Flink job ([0-9a-f]{32}) \(BeamApp[^)]*\); web UI http://localhost:(\d+)/",
            stderr,
        )
        assert m, stderr[-3000:]
        assert int(m.group(2)) == self.rest_port
        return m.group(1)

    def wait_job(self, jid: str, timeout: float = 60) -> dict:
        """The job's details once it has ended (tar2tf returns when Beam sees the end;
        the JobManager may take a moment to archive it)."""
        deadline = time.time() + timeout
        while True:
            job = self.rest(f"/jobs/{jid}")
            if job["state"] in ("FINISHED", "FAILED", "CANCELED") or time.time() > deadline:
                return job
            time.sleep(0.5)

    def vertex_taskmanagers(self, jid: str) -> Dict[str, dict]:
        """For each vertex of the job: its name, parallelism and the TaskManagers that ran
        its subtasks (resource ids, from the subtasks' details)."""
        out = {}
        for v in self.rest(f"/jobs/{jid}")["vertices"]:
            tms = self.rest(f"/jobs/{jid}/vertices/{v['id']}/taskmanagers")["taskmanagers"]
            out[v["id"]] = {
                "name": v["name"],
                "parallelism": v["parallelism"],
                "taskmanagers": {
                    t["taskmanager-id"]
                    for t in tms
                    if t.get("status") == "FINISHED" or t.get("status-counts", {}).get("FINISHED")
                },
            }
        return out

    def sdk_workers(self) -> List[int]:
        """PIDs of the SDK worker processes the pool has started (its children)."""
        import psutil

        out = []
        for c in psutil.Process(self.procs["pool"]["pid"]).children(recursive=True):
            try:
                if "SdkHarness" in " ".join(c.cmdline()):
                    out.append(c.pid)
            except psutil.Error:  # ended (a zombie until the pool reaps it)
                pass
        return out

    def job_servers(self) -> List[int]:
        """PIDs of Beam job servers that submit to this cluster (started by tar2tf runs)."""
        import psutil

        out = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            line = " ".join(p.info["cmdline"] or [])
            if "java" in line and f"localhost:{self.rest_port}" in line and "flink-master" in line:
                out.append(p.info["pid"])
        return out


def end_group(p: subprocess.Popen) -> None:
    """Ends what is left of a run started in its own session (by its process group id,
    which is its PID): the CLI's job server outlives a CLI that was killed."""
    if p.poll() is not None:  # it ended by itself: what it leaves is for the tests to see
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait()


def start_cluster(state: str, setup: Dict[str, str]) -> Cluster:
    rest_port, rpc_port, pool_port = free_ports(3)
    # the workers import tests/support/slow_ops.py for --ops support.slow_ops:slow_ops
    flink_cluster.start(
        state,
        setup["FLINK_DIST"],
        taskmanagers=2,
        rest_port=rest_port,
        rpc_port=rpc_port,
        pool_port=pool_port,
        tm_memory="1024m",
        pool_extra_env={"PYTHONPATH": TESTS, "TAR2TF_TEST_DELAY": SLOW_DELAY},
        timeout=180,
    )
    return Cluster(state, setup, rest_port, pool_port)


@pytest.fixture(scope="module")
def flink_cluster_setup():
    return setup_or_fail()


@pytest.fixture(scope="module")
def session_cluster(flink_cluster_setup, tmp_path_factory):
    state = str(tmp_path_factory.mktemp("flink-cluster"))
    c = start_cluster(state, flink_cluster_setup)
    try:
        yield c
    finally:
        flink_cluster.stop(state)


def files_under(root: str) -> Dict[str, str]:
    """Relative path -> sha256 of every file under root (work directories included)."""
    from support.cli_fixtures import sha256_file

    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = sha256_file(p)
    return out


def wait_for(
    cond, timeout: float, what: str, proc: Optional[subprocess.Popen] = None, log: str = ""
) -> None:
    deadline = time.time() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the job ended before {what}: {open(log).read()[-3000:] if log else ''}")
        if time.time() > deadline:
            pytest.fail(f"no {what} after {timeout} s")
        time.sleep(0.2)


def pieces_done(out_dir: str) -> int:
    """Input shards converted so far (their piece sidecars, written last)."""
    n = 0
    for _d, _, names in os.walk(os.path.join(out_dir, ".tar2tf-work")):
        n += sum(1 for x in names if re.fullmatch(r"piece-\d+\.json", x))
    return n


def reachable(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()
        return True
    except OSError:
        return False


def manifest(out_dir: str, name: str) -> dict:
    return json.load(open(os.path.join(out_dir, name)))
