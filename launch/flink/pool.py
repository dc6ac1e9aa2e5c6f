"""Starting the shared Beam worker pool (:mod:`launch.flink.worker_pool`) for the local
Flink cluster.  Its SDK workers run on the pool's interpreter.  A worker that cannot import
apache_beam or tar2tf dies at start and leaves the Flink job waiting forever for it, so the
pool's python is checked first, and refused with one clear message when it cannot.
"""

from __future__ import annotations

import os
import subprocess
from typing import Dict, Optional

from launch.flink.procs import ClusterError, spawn
from pipelines.worker_python import python_c

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# what the pool's python must import to run tar2tf's DoFns
POOL_IMPORTS = "import apache_beam, transforms.record_types, pipelines.job.kinds.tfrecord.piece"


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
        # the command line the pool itself gets (start_pool): a python without -P fails here
        p = subprocess.run(
            python_c(POOL_IMPORTS, python),
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
    """Starts the pool in a process group of its own (its SDK workers are its children)."""
    python = st["pool_python"]
    # tar2tf's pool, not Beam's worker_pool_main: the TaskManagers share it (see
    # launch.flink.worker_pool).  Not `python -m`, which would put the current directory
    # first on the pool's path: started like every other worker (pipelines.worker_python)
    args = [f"--service_port={st['pool_port']}"]
    code = f"import sys; from launch.flink.worker_pool import main; sys.exit(main({args!r}))"
    cmd = python_c(code, python)
    # the command line holds the code, so the marker tells this pool from a reused PID
    marker = code
    return spawn(
        st,
        state,
        "pool",
        cmd,
        marker=marker,
        env=pool_env(python, st.get("pool_env")),
        cwd=ROOT,
        group=True,
    )
