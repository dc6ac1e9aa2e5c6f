"""The local Flink session cluster as a whole: one JobManager, N TaskManagers and the
shared Beam worker pool, all on loopback, started, extended, queried and stopped through
the state directory (``--state``, default ``$TAR2TF_FLINK_CLUSTER`` or
``$TAR2TF_CACHE/flink-cluster``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Dict, List, Optional

from launch.flink.jvm import (
    CONFIG,
    LOG4J,
    java,
    overview,
    rest,
    start_jobmanager,
    start_taskmanager,
    tm_params,
)
from launch.flink.pool import check_pool_python, start_pool
from launch.flink.procs import (
    ClusterError,
    alive,
    connects,
    load,
    port_free,
    save,
    stop_procs,
    wait,
)


def cache_dir() -> str:
    return os.environ.get("TAR2TF_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "tar2tf",
    )


def default_state() -> str:
    return os.environ.get("TAR2TF_FLINK_CLUSTER") or os.path.join(cache_dir(), "flink-cluster")


def read_env(path: str) -> Dict[str, str]:
    out: Dict[str, str] = {}
    if os.path.isfile(path):
        for line in open(path):
            k, sep, v = line.strip().partition("=")
            if sep:
                out[k] = v
    return out


def default_dist() -> Optional[str]:
    return read_env(os.path.join(cache_dir(), "flink-dist.env")).get("FLINK_DIST")


def start(
    state: str,
    dist: Optional[str],
    taskmanagers: int = 2,
    rest_port: int = 8081,
    rpc_port: int = 6123,
    pool_port: Optional[int] = 50000,
    slots: int = 1,
    tm_memory: str = "1280m",
    jm_memory: str = "1024m",
    jm_heap: str = "512m",
    pool_python: Optional[str] = None,
    pool_extra_env: Optional[Dict[str, str]] = None,
    timeout: float = 120,
) -> dict:
    """Starts the cluster (and the pool unless pool_port is None) and waits until the REST
    overview shows every TaskManager and the pool accepts connections; on any failure
    stops what it started and raises ClusterError."""
    old = load(state)
    if old and any(alive(p) for p in old["procs"].values()):
        raise ClusterError(f"a cluster recorded in {state} is running: stop it first")
    if not dist or not os.path.isfile(os.path.join(dist, "bin", "bash-java-utils.jar")):
        raise ClusterError(
            "no Flink distribution: run launch/bootstrap.sh (launch/setup.d/51-flink-dist.sh) "
            "or pass --dist DIR (with lib/ and bin/bash-java-utils.jar)"
        )
    java()
    ports = {"REST": rest_port, "JobManager RPC": rpc_port}
    if pool_port is not None:
        ports["worker pool"] = pool_port
    busy = [f"{k} {v}" for k, v in ports.items() if not port_free(v)]
    if busy:
        raise ClusterError(
            f"port(s) in use: {', '.join(busy)} (choose others: --rest-port, --rpc-port, --pool-port)"
        )
    pool_python = os.path.abspath(pool_python or sys.executable)
    if pool_port is not None:
        check_pool_python(pool_python, pool_extra_env)
    conf, logs = os.path.join(state, "conf"), os.path.join(state, "log")
    os.makedirs(conf, exist_ok=True)
    os.makedirs(logs, exist_ok=True)
    work_dir, tmp_dir = os.path.join(state, "work"), os.path.join(state, "tmp")
    for d in (work_dir, tmp_dir):
        shutil.rmtree(d, ignore_errors=True)  # a previous cluster's blobs and spills
        os.makedirs(d)
    with open(os.path.join(conf, "config.yaml"), "w") as f:
        f.write(
            CONFIG.format(
                rpc_port=rpc_port,
                rest_port=rest_port,
                slots=slots,
                tm_memory=tm_memory,
                jm_memory=jm_memory,
                work_dir=json.dumps(os.path.abspath(work_dir)),
                tmp_dir=json.dumps(os.path.abspath(tmp_dir)),
            )
        )
    with open(os.path.join(conf, "log4j.properties"), "w") as f:
        f.write(LOG4J)
    st = {
        "dist": os.path.abspath(dist),
        "conf": conf,
        "logs": logs,
        "rest_port": rest_port,
        "rpc_port": rpc_port,
        "pool_port": pool_port,
        "pool_python": pool_python,
        "jm_heap": jm_heap,
        "pool_env": dict(pool_extra_env or {}),
        "next_tm": 1,
        "procs": {},
        "taskmanagers": taskmanagers,
    }
    os.makedirs(state, exist_ok=True)
    save(state, st)
    try:
        st["tm_params"] = tm_params(st)
        jm = start_jobmanager(st, state)
        tms = [st["procs"][start_taskmanager(st, state)] for _ in range(taskmanagers)]
        pool = [start_pool(st, state)] if pool_port is not None else []
        save(state, st)
        wait(
            "Flink cluster",
            lambda: (overview(rest_port) or {}).get("taskmanagers") == taskmanagers,
            [jm, *tms],
            timeout,
        )
        if pool:
            wait("Beam worker pool", lambda: connects(pool_port), pool, timeout)
    except BaseException:
        stop(state)
        raise
    return st


def add_taskmanager(state: str, timeout: float = 120) -> str:
    st = load(state)
    if not st or not alive(st["procs"].get("jobmanager", {"pid": -1, "marker": ""})):
        raise ClusterError(f"no running cluster recorded in {state}")
    name = start_taskmanager(st, state)
    save(state, st)

    def registered() -> bool:
        try:
            return name in {
                t["id"] for t in rest(st["rest_port"], "/taskmanagers").get("taskmanagers") or []
            }
        except (OSError, ValueError):
            return False

    wait(f"TaskManager {name}", registered, [st["procs"][name]], timeout)
    return name


def stop(state: str) -> List[str]:
    """Stops every process recorded in `state`, by PID; returns the names of those that
    were running."""
    st = load(state)
    if not st:
        return []
    ran = sorted(n for n, p in st["procs"].items() if alive(p))
    pool = [st["procs"]["pool"]] if "pool" in st["procs"] else []
    stop_procs(pool)  # first: its workers talk to the TaskManagers
    stop_procs([p for n, p in st["procs"].items() if n != "pool"])
    st["procs"] = {}
    save(state, st)
    for d in ("work", "tmp"):  # job artifacts and spills; the logs stay
        shutil.rmtree(os.path.join(state, d), ignore_errors=True)
    return ran


def status(state: str) -> dict:
    st = load(state)
    if not st:
        raise ClusterError(f"no cluster recorded in {state}")
    procs = {n: {"pid": p["pid"], "alive": alive(p)} for n, p in st["procs"].items()}
    return {
        "rest": f"http://localhost:{st['rest_port']}",
        "overview": overview(st["rest_port"]),
        "processes": procs,
        "pool": f"localhost:{st['pool_port']}" if st.get("pool_port") else None,
        "logs": st["logs"],
    }


def env_lines(state: str) -> List[str]:
    st = load(state)
    if not st:
        raise ClusterError(f"no cluster recorded in {state}")
    lines = [f"FLINK_MASTER=localhost:{st['rest_port']}"]
    if st.get("pool_port"):
        lines += ["ENVIRONMENT_TYPE=EXTERNAL", f"ENVIRONMENT_CONFIG=localhost:{st['pool_port']}"]
    return lines
