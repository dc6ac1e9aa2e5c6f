"""Python code run in a fresh interpreter: for what only a new process shows (which modules
an import pulls in, what is printed or logged from start to exit)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Iterable, Optional

from support.cli_fixtures import ROOT


def run_python(
    code: str, *args: str, env: Optional[dict] = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """``python -c code *args`` with this venv's interpreter, from the checkout's root;
    ``env``, if given, is the whole environment (default: the test process's)."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=os.environ.copy() if env is None else env,
        timeout=timeout,
    )


def run_script_file(directory, code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``code`` written to ``job.py`` in ``directory`` and run from there as a user runs a
    script (its own file is ``__main__``; tar2tf importable through ``PYTHONPATH``)."""
    script = os.path.join(str(directory), "job.py")
    with open(script, "w") as f:
        f.write(code)
    return subprocess.run(
        [sys.executable, script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=ROOT),
        cwd=str(directory),
    )


def launch_script(
    name: str,
    *args: str,
    env: Optional[dict] = None,
    drop: Iterable[str] = (),
    timeout: float = 1200,
) -> subprocess.CompletedProcess:
    """``bash launch/<name> *args`` from the checkout's root, run with this venv's python
    (``TAR2TF_PYTHON``); ``env`` is added to the test process's environment, without the
    variables named in ``drop``."""
    e = {k: v for k, v in os.environ.items() if k not in set(drop)}
    e.update(TAR2TF_PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    return subprocess.run(
        ["bash", os.path.join(ROOT, "launch", name), *args],
        capture_output=True,
        text=True,
        env=e,
        cwd=ROOT,
        timeout=timeout,
    )
