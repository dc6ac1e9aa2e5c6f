"""Process supervision for the local Flink cluster: its state file, starting a process in
a session of its own, telling whether a recorded PID is still the process that was
started, waiting for readiness, and stopping by PID.

The cluster's state (ports, PIDs, logs, configuration) lives in one directory; ``stop``
ends exactly the processes recorded there, by PID, after checking that each PID is still
the process that was started (a PID can be reused).  Nothing here knows about Flink or Beam.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from typing import List, Optional, Sequence


class ClusterError(Exception):
    """Why the cluster cannot be started, queried or stopped (one line for the user)."""


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
    # a zombie (a child of this process, ended but not yet reaped) has an empty command
    # line; so has a process in the middle of its exec, for a moment after Popen returns
    # (the new program's arguments are not mapped yet): wait that moment out
    deadline = time.time() + 2
    while True:
        cmdline = _cmdline(pid)
        if cmdline or _state(pid) in ("Z", "") or time.time() > deadline:
            return proc["marker"] in cmdline
        time.sleep(0.01)


def _state(pid: int) -> str:
    """The process's state letter (``R``, ``S``, ``Z`` for a zombie...); "" if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # the name, in parentheses, may hold spaces and ")": the state follows the last ")"
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


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


def connects(port: int) -> bool:
    try:
        with socket.create_connection(("localhost", port), timeout=1):
            return True
    except OSError:
        return False


def spawn(
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


def wait(what: str, ready, procs: Sequence[dict], timeout: float) -> None:
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
