"""A benchmark's measured subprocess (``benchmarks.run``): its exit, its CPU time, the
CPU the rest of the machine used meanwhile, and the summed RSS of its whole process tree
(the process and every descendant: worker processes, Beam's SDK workers), sampled every
0.1 s, so that a run's peak memory counts the workers it starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _busy() -> float:
    """Busy CPU seconds of the whole machine so far (``/proc/stat``)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _cmdline(p) -> List[str]:
    import psutil

    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _tree_rss(root) -> int:
    """Summed RSS of ``root`` and all its descendants (bytes).  Forked children share pages
    with their parent; RSS counts such a page in each, so the sum is an upper bound."""
    import psutil

    total = 0
    try:
        procs = [root] + root.children(recursive=True)
    except psutil.Error:
        return 0
    now = time.time()
    root_cmd = _cmdline(root)
    for p in procs:
        try:
            # a child between fork and exec (a library starting a helper) still maps the
            # parent's pages: left out for its first second.  Workers forked on purpose
            # (limit-codec) run longer and are counted from then on
            if p is not root and now - p.create_time() < 1.0 and _cmdline(p) == root_cmd:
                continue
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def spawn(module: str, spec: Dict, log_path: str, timeout: float) -> Tuple[Optional[Dict], Dict]:
    """Run ``python -m module '<spec>'``; (its BENCH-RESULT or None, {exit, rss samples, ...})."""
    import psutil

    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    stat0 = _busy()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, json.dumps(spec)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
    start = time.time()
    done = threading.Event()
    status: Dict = {}

    def reap():
        _, st, ru = os.wait4(proc.pid, 0)
        status["code"] = os.waitstatus_to_exitcode(st)
        status["cpu"] = ru.ru_utime + ru.ru_stime
        proc.returncode = status["code"]
        done.set()

    root = psutil.Process(proc.pid)
    threading.Thread(target=reap, daemon=True).start()
    killed = False
    samples: List[Tuple[float, int]] = []  # (time, summed RSS of the process tree)
    while not done.wait(0.1):
        samples.append((time.time(), _tree_rss(root)))
        if time.time() - start > timeout and not killed:
            os.killpg(proc.pid, signal.SIGKILL)  # the group of the process this function started
            killed = True
    wall, busy = time.time() - start, _busy() - stat0
    with open(log_path) as f:
        text = f.read()
    # CPU the rest of the machine used meanwhile (cores): the shared-machine caveat, measured
    others = max(0.0, (busy - status["cpu"]) / wall) if wall > 0 else 0.0
    info = {"exit": status["code"], "other_load": others, "rss_samples": samples, "log": log_path}
    lines = [ln for ln in text.splitlines() if ln.startswith("BENCH-RESULT ")]
    if status["code"] == 0 and lines:
        return json.loads(lines[-1][len("BENCH-RESULT ") :]), info
    info["error"] = ("timed out; " if killed else "") + "\n".join(text.splitlines()[-15:])
    return None, info
