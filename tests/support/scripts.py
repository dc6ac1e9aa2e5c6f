"""Python code run in a fresh interpreter: for what only a new process shows (which modules
an import pulls in, what is printed or logged from start to exit)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Optional

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
