"""A Flink standalone session cluster on this machine, for running tar2tf's Beam jobs on
separate worker processes: one JobManager and N TaskManagers (each its own JVM), plus
Beam's Python worker pool, all on loopback.  ``launch/flink-cluster.sh`` is its CLI.

    python -m launch.flink_cluster start  [--taskmanagers 2] [--rest-port 8081] ...
    python -m launch.flink_cluster status
    python -m launch.flink_cluster env     # FLINK_MASTER=... for launch/flink.sh
    python -m launch.flink_cluster add-taskmanager
    python -m launch.flink_cluster stop

The jars come from launch/setup.d/51-flink-dist.sh (PyPI's apache-flink-libraries, which
has no shell scripts), so the JVMs are started here the way Flink's scripts would start
them: the JobManager's entry point with the configuration directory, and each
TaskManager with the memory and CPU options that Flink's BashJavaUtils computes from the
same configuration (started without them a TaskManager refuses to run).

The cluster's state (ports, PIDs, logs, configuration) lives in one directory
(``--state``, default ``$TAR2TF_FLINK_CLUSTER`` or ``$TAR2TF_CACHE/flink-cluster``);
``stop`` ends exactly the processes recorded there, by PID, after checking that each PID
is still the process that was started (a PID can be reused).

Restarts: a TaskManager that dies is noticed after the heartbeat timeout (8 s here, 50 s
by Flink's default), and until then the JobManager keeps deploying onto it.  With Flink's
default restart strategy those attempts can use up every restart and fail the job; a
fixed delay of 5 s with 20 attempts outlasts the timeout, so a job survives a lost
TaskManager once a replacement (``add-taskmanager``) or a spare slot is there.

The worker pool is ``launch/worker_pool.py``: Beam's own pool cannot be shared by several
TaskManagers (their worker ids collide; see that module).  Its SDK workers run on the
pool's interpreter.  A worker that cannot import apache_beam or tar2tf dies at start and
leaves the Flink job waiting forever for it, so ``start`` first checks that this python
imports both, and refuses with one clear message when it cannot.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JM_CLASS = "org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint"
TM_CLASS = "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"
UTILS_CLASS = "org.apache.flink.runtime.util.bash.BashJavaUtils"
UTILS_PREFIX = "BASH_JAVA_UTILS_EXEC_RESULT:"
# what the pool's python must import to run tar2tf's DoFns
POOL_IMPORTS = "import apache_beam, transforms.records, pipelines.job.shard"

CONFIG = """\
# written by launch/flink_cluster.py
jobmanager:
  rpc: {{address: localhost, port: {rpc_port}}}
  bind-host: localhost
  memory: {{process: {{size: {jm_memory}}}}}
taskmanager:
  host: localhost
  bind-host: localhost
  numberOfTaskSlots: {slots}
  memory: {{process: {{size: {tm_memory}}}}}
rest: {{address: localhost, bind-address: localhost, port: {rest_port}}}
parallelism: {{default: 1}}
# a dead TaskManager is noticed in seconds, not Flink's default 50 s: until then the
# JobManager keeps deploying restarted tasks onto it
heartbeat: {{interval: 2000, timeout: 8000}}
restart-strategy:
  type: fixed-delay
  fixed-delay: {{attempts: 20, delay: 5 s}}
"""

LOG4J = """\
# written by launch/flink_cluster.py: each JVM logs to the file named by -Dlog.file
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = File
appender.file.name = File
appender.file.type = File
appender.file.append = true
appender.file.fileName = ${sys:log.file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %c - %m%n
logger.netty.name = org.apache.flink.shaded.akka.org.jboss.netty.channel.DefaultChannelPipeline
logger.netty.level = OFF
"""


class ClusterError(Exception):
    """Why the cluster cannot be started, queried or stopped (one line for the user)."""


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


# -- state ------------------------------------------------------------------------------


def state_path(state: str) -> str:
    return os.path.join(state, "state.json")


def load(state: str) -> Optional[dict]:
    try:
        with open(state_path(state)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def save(state: str, st: dict) -> None:
    tmp = state_path(state) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(st, f, indent=1, sort_keys=True)
    os.replace(tmp, state_path(state))


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def alive(proc: dict) -> bool:
    """Whether the recorded process still runs and is the one started (its command line
    holds the marker recorded with it), not a later process that got the same PID."""
    pid = proc["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if not os.path.isdir("/proc/self"):  # not Linux: trust the PID
        return True
    # a zombie (a child of this process, ended but not yet reaped) has an empty command line
    return proc["marker"] in _cmdline(pid)


def _signal(proc: dict, sig: int) -> None:
    """The pool gets `sig` on its whole process group (its SDK workers are its children,
    started in the pool's session); a JVM on its PID."""
    try:
        if proc.get("group"):
            os.killpg(proc["pid"], sig)
        else:
            os.kill(proc["pid"], sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_procs(procs: Sequence[dict], timeout: float = 20) -> None:
    """SIGTERM to each (JVMs run their shutdown hooks), SIGKILL to whatever still runs
    after `timeout`; the pool's group gets SIGKILL in any case, for workers that outlived
    the pool."""
    running = [p for p in procs if alive(p)]
    for p in running:
        _signal(p, signal.SIGTERM)
    deadline = time.time() + timeout
    while running and time.time() < deadline:
        for p in running:
            _reap(p["pid"])
        running = [p for p in running if alive(p)]
        time.sleep(0.2)
    for p in running:
        _signal(p, signal.SIGKILL)
    for p in procs:
        if p.get("group"):
            _signal(p, signal.SIGKILL)
        _reap(p["pid"])


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child: its parent reaps it
        pass


# -- REST -------------------------------------------------------------------------------


def rest(port: int, path: str, timeout: float = 5, method: str = "GET"):
    req = urllib.request.Request(f"http://localhost:{port}{path}", method=method)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = r.read()
    return json.loads(body) if body else None


def overview(port: int) -> Optional[dict]:
    try:
        return rest(port, "/overview", timeout=3)
    except (OSError, ValueError):
        return None


# -- starting ---------------------------------------------------------------------------


def port_free(port: int) -> bool:
    with socket.socket() as s:
        # as the servers bind: a port held only by closed connections (TIME_WAIT) is free
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("localhost", port))
        except OSError:
            return False
    return True


def _tail(path: str, n: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def _java() -> str:
    java = shutil.which("java")
    if not java:
        raise ClusterError(
            "java is not on PATH (Java 11+: apt-get install openjdk-17-jre-headless)"
        )
    return java


def _spawn(
    st: dict,
    state: str,
    name: str,
    cmd: List[str],
    marker: str,
    env=None,
    cwd=None,
    group: bool = False,
) -> dict:
    log = os.path.join(st["logs"], f"{name}.out")
    with open(log, "ab") as out:
        # a session of its own: the launching shell's Ctrl-C or exit does not reach it
        p = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    proc = {"pid": p.pid, "marker": marker, "out": log, "group": group}
    st["procs"][name] = proc
    save(state, st)
    return proc


def tm_params(st: dict) -> List[List[str]]:
    """[JVM flags, dynamic properties] that Flink's scripts would give a TaskManager."""
    dist = st["dist"]
    cp = (
        os.path.join(dist, "bin", "bash-java-utils.jar")
        + os.pathsep
        + os.path.join(dist, "lib", "*")
    )
    p = subprocess.run(
        [_java(), "-cp", cp, UTILS_CLASS, "GET_TM_RESOURCE_PARAMS", "--configDir", st["conf"]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [
        ln[len(UTILS_PREFIX) :].strip()
        for ln in p.stdout.splitlines()
        if ln.startswith(UTILS_PREFIX)
    ]
    if p.returncode != 0 or len(lines) < 2:
        raise ClusterError(
            f"BashJavaUtils could not compute the TaskManager's options: "
            f"{(p.stdout + p.stderr).strip()[-2000:]}"
        )
    return [shlex.split(lines[0]), shlex.split(lines[1])]


def start_jobmanager(st: dict, state: str) -> dict:
    log = os.path.join(st["logs"], "jobmanager.log")
    cmd = [
        _java(),
        f"-Xmx{st['jm_heap']}",
        f"-Dlog.file={log}",
        f"-Dlog4j.configurationFile=file:{os.path.join(st['conf'], 'log4j.properties')}",
        "-cp",
        os.path.join(st["dist"], "lib", "*"),
        JM_CLASS,
        "--configDir",
        st["conf"],
    ]
    return _spawn(st, state, "jobmanager", cmd, marker=JM_CLASS)


def start_taskmanager(st: dict, state: str, name: Optional[str] = None) -> str:
    """Starts one more TaskManager (tm1, tm2, ...; a replacement gets the next number);
    returns its name, which is also its Flink resource id."""
    if name is None:
        name = f"tm{st['next_tm']}"
        st["next_tm"] += 1
    jvm, dynamic = st.get("tm_params") or tm_params(st)
    st["tm_params"] = [jvm, dynamic]
    log = os.path.join(st["logs"], f"{name}.log")
    cmd = [
        _java(),
        *jvm,
        f"-Dlog.file={log}",
        f"-Dlog4j.configurationFile=file:{os.path.join(st['conf'], 'log4j.properties')}",
        "-cp",
        os.path.join(st["dist"], "lib", "*"),
        TM_CLASS,
        "--configDir",
        st["conf"],
        *dynamic,
        "-D",
        "taskmanager.rpc.port=0",
        "-D",
        "taskmanager.data.port=0",
        "-D",
        f"taskmanager.resource-id={name}",
    ]
    _spawn(st, state, name, cmd, marker=f"taskmanager.resource-id={name}")
    return name


def pool_env(python: str, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The pool's environment, which its SDK workers inherit: `python` is the one given
    (its directory first on PATH, since the pool starts workers as plain `python`), this
    checkout's modules come first on the path (an installed tar2tf may be another
    checkout), then `extra` (e.g. STORAGE_EMULATOR_HOST, or a PYTHONPATH for the modules
    of ``--ops module:function``)."""
    env = dict(os.environ)
    extra = dict(extra or {})
    env["PATH"] = os.path.dirname(os.path.abspath(python)) + os.pathsep + env.get("PATH", "")
    paths = (
        [ROOT]
        + extra.pop("PYTHONPATH", "").split(os.pathsep)
        + env.get("PYTHONPATH", "").split(os.pathsep)
    )
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def check_pool_python(python: str, extra: Optional[Dict[str, str]] = None) -> None:
    """Raises ClusterError unless `python`, which runs the pool and its SDK workers, can
    import apache_beam and tar2tf: a worker that cannot dies at import, and the Flink job
    would wait for it without end."""
    env = pool_env(python, extra)
    try:
        p = subprocess.run(
            [python, "-c", POOL_IMPORTS],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except OSError as e:
        raise ClusterError(f"cannot run the worker pool's python {python}: {e}") from e
    if p.returncode != 0:
        why = (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
        raise ClusterError(
            f"the worker pool's SDK workers would run {python}, which cannot run tar2tf's "
            f"DoFns ({why}); start the pool from the tar2tf venv "
            "(--pool-python $(cat ~/.cache/tar2tf/venv-current))"
        )


def start_pool(st: dict, state: str) -> dict:
    python = st["pool_python"]
    # tar2tf's pool, not Beam's worker_pool_main: the TaskManagers share it (launch/worker_pool.py)
    cmd = [python, "-m", "launch.worker_pool", f"--service_port={st['pool_port']}"]
    marker = f"launch.worker_pool --service_port={st['pool_port']}"
    return _spawn(
        st,
        state,
        "pool",
        cmd,
        marker=marker,
        env=pool_env(python, st.get("pool_env")),
        cwd=ROOT,
        group=True,
    )


def _wait(what: str, ready, procs: Sequence[dict], timeout: float) -> None:
    deadline = time.time() + timeout
    while True:
        if ready():
            return
        dead = [p for p in procs if not alive(p)]
        if dead:
            raise ClusterError(
                f"{what}: a process exited while starting; its output "
                f"({dead[0]['out']}):\n{_tail(dead[0]['out'])}"
            )
        if time.time() > deadline:
            raise ClusterError(
                f"{what}: not ready after {timeout:.0f} s (logs: {os.path.dirname(procs[0]['out'])})"
            )
        time.sleep(0.3)


def _connects(port: int) -> bool:
    try:
        with socket.create_connection(("localhost", port), timeout=1):
            return True
    except OSError:
        return False


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
    _java()
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
    with open(os.path.join(conf, "config.yaml"), "w") as f:
        f.write(
            CONFIG.format(
                rpc_port=rpc_port,
                rest_port=rest_port,
                slots=slots,
                tm_memory=tm_memory,
                jm_memory=jm_memory,
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
        _wait(
            "Flink cluster",
            lambda: (overview(rest_port) or {}).get("taskmanagers") == taskmanagers,
            [jm, *tms],
            timeout,
        )
        if pool:
            _wait("Beam worker pool", lambda: _connects(pool_port), pool, timeout)
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

    _wait(f"TaskManager {name}", registered, [st["procs"][name]], timeout)
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="flink-cluster.sh", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--state", default=default_state(), help="the cluster's directory (default: %(default)s)"
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start", help="start the JobManager, the TaskManagers and the worker pool")
    s.add_argument("--taskmanagers", type=int, default=2)
    s.add_argument("--slots", type=int, default=1, help="task slots per TaskManager")
    s.add_argument("--rest-port", type=int, default=8081)
    s.add_argument("--rpc-port", type=int, default=6123)
    s.add_argument("--pool-port", type=int, default=50000)
    s.add_argument(
        "--no-pool", action="store_true", help="no Beam worker pool (DOCKER/PROCESS environments)"
    )
    s.add_argument("--tm-memory", default="1280m", help="each TaskManager's process size")
    s.add_argument(
        "--pool-python",
        help="the python of the worker pool and its SDK workers "
        "(default: this one, the tar2tf venv's)",
    )
    s.add_argument(
        "--pool-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="more environment for the pool and its SDK workers (repeatable)",
    )
    s.add_argument(
        "--dist",
        default=default_dist(),
        help="the Flink distribution (lib/, bin/bash-java-utils.jar)",
    )
    s.add_argument("--timeout", type=float, default=120)
    others = [
        sub.add_parser("stop", help="stop every process of the cluster, by PID"),
        sub.add_parser("status", help="the REST overview and the processes"),
        sub.add_parser(
            "env", help="FLINK_MASTER=... ENVIRONMENT_TYPE=... lines for launch/flink.sh"
        ),
        sub.add_parser(
            "add-taskmanager", help="start one more TaskManager (e.g. to replace a lost one)"
        ),
    ]
    for p in [s, *others]:  # --state also after the command
        p.add_argument("--state", dest="sub_state", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    state = os.path.abspath(a.sub_state or a.state)
    try:
        if a.cmd == "start":
            st = start(
                state,
                a.dist,
                a.taskmanagers,
                a.rest_port,
                a.rpc_port,
                None if a.no_pool else a.pool_port,
                a.slots,
                a.tm_memory,
                pool_python=a.pool_python,
                pool_extra_env=dict(kv.split("=", 1) for kv in a.pool_env),
                timeout=a.timeout,
            )
            print(
                f"Flink cluster: web UI http://localhost:{a.rest_port}, {a.taskmanagers} TaskManager(s)"
                + (f", Beam worker pool localhost:{a.pool_port}" if not a.no_pool else "")
                + f"; logs {st['logs']}",
                file=sys.stderr,
            )
            print("\n".join(env_lines(state)))
        elif a.cmd == "stop":
            ran = stop(state)
            print(f"stopped: {', '.join(ran) if ran else 'nothing was running'}", file=sys.stderr)
        elif a.cmd == "status":
            s = status(state)
            print(json.dumps(s, indent=1))
            return 0 if s["overview"] is not None else 1
        elif a.cmd == "env":
            print("\n".join(env_lines(state)))
        elif a.cmd == "add-taskmanager":
            print(add_taskmanager(state))
    except ClusterError as e:
        print(f"flink-cluster: {e}", file=sys.stderr)
        return 2
    except (OSError, urllib.error.URLError, subprocess.SubprocessError) as e:
        print(f"flink-cluster: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
