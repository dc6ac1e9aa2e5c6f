"""Flink's JVMs, started the way Flink's scripts would start them: the configuration
directory, the JobManager's entry point, and each TaskManager with the memory and CPU
options that Flink's BashJavaUtils computes from the same configuration (started without
them a TaskManager refuses to run).  The jars come from launch/setup.d/51-flink-dist.sh
(PyPI's apache-flink-libraries, which has no shell scripts).  Also the REST calls that tell
whether the cluster is up.

Restarts: a TaskManager that dies is noticed after the heartbeat timeout (8 s here, 50 s
by Flink's default), and until then the JobManager keeps deploying onto it.  With Flink's
default restart strategy those attempts can use up every restart and fail the job; a
fixed delay of 5 s with 20 attempts outlasts the timeout, so a job survives a lost
TaskManager once a replacement (``add-taskmanager``) or a spare slot is there.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import urllib.request
from typing import List, Optional

from launch.flink.procs import ClusterError, spawn

JM_CLASS = "org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint"
TM_CLASS = "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"
UTILS_CLASS = "org.apache.flink.runtime.util.bash.BashJavaUtils"
UTILS_PREFIX = "BASH_JAVA_UTILS_EXEC_RESULT:"


CONFIG = """\
# written by launch/flink/cluster.py (launch/flink-cluster.sh start)
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
# inside the cluster's state directory, wiped at each start: Flink's default is
# /tmp/tm_<resource-id>, kept across clusters, where every job's artifacts pile up and
# each new TaskManager scans all of them before it registers (minutes, once gigabytes)
process: {{working-dir: {work_dir}}}
io: {{tmp: {{dirs: {tmp_dir}}}}}
parallelism: {{default: 1}}
# a dead TaskManager is noticed in seconds, not Flink's default 50 s: until then the
# JobManager keeps deploying restarted tasks onto it
heartbeat: {{interval: 2000, timeout: 8000}}
restart-strategy:
  type: fixed-delay
  fixed-delay: {{attempts: 20, delay: 5 s}}
"""

LOG4J = """\
# written by launch/flink/cluster.py: each JVM logs to the file named by -Dlog.file
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


def java() -> str:
    java = shutil.which("java")
    if not java:
        raise ClusterError(
            "java is not on PATH (Java 11+: apt-get install openjdk-17-jre-headless)"
        )
    return java


def tm_params(st: dict) -> List[List[str]]:
    """[JVM flags, dynamic properties] that Flink's scripts would give a TaskManager."""
    dist = st["dist"]
    cp = (
        os.path.join(dist, "bin", "bash-java-utils.jar")
        + os.pathsep
        + os.path.join(dist, "lib", "*")
    )
    p = subprocess.run(
        [java(), "-cp", cp, UTILS_CLASS, "GET_TM_RESOURCE_PARAMS", "--configDir", st["conf"]],
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
        java(),
        f"-Xmx{st['jm_heap']}",
        f"-Dlog.file={log}",
        f"-Dlog4j.configurationFile=file:{os.path.join(st['conf'], 'log4j.properties')}",
        "-cp",
        os.path.join(st["dist"], "lib", "*"),
        JM_CLASS,
        "--configDir",
        st["conf"],
    ]
    return spawn(st, state, "jobmanager", cmd, marker=JM_CLASS)


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
        java(),
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
    spawn(st, state, name, cmd, marker=f"taskmanager.resource-id={name}")
    return name
