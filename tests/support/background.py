"""``tar2tf`` started in the background, for the tests that stop a job midway (kill -9,
Ctrl-C, a second job against a locked output) and then look at what it left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Callable, Optional

from support.cli_fixtures import ROOT

TESTS = os.path.join(ROOT, "tests")


def slow_env(delay: str) -> dict:
    """The environment of a job run with ``--ops support.slow_ops:slow_ops``: ``delay``
    seconds of work per record, so a test can act while the job runs."""
    return {"PYTHONPATH": TESTS, "TAR2TF_TEST_DELAY": delay}


def slow_convert(src: str, out: str, *more: str) -> list:
    """The arguments of a ``convert`` job through the slow op (run it with ``slow_env``),
    the type map the test shards need, no progress bar; ``more`` after them."""
    return [
        "convert",
        src,
        "--output",
        out,
        "--type-map",
        "cls:int64",
        "--ops",
        "support.slow_ops:slow_ops",
        "--no-progress",
        *more,
    ]


def terminal_sigint() -> None:
    """The job starts as from a terminal: SIGINT at its default.  Commands started in the
    background by a shell without job control (``cmd &`` in a script, as a CI runner may
    start the tests) inherit SIGINT ignored, and Python then installs no Ctrl-C handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(
    *args: str,
    env: Optional[dict] = None,
    session: bool = False,
    ctrl_c: bool = False,
) -> subprocess.Popen:
    """``tar2tf *args`` in a fresh process, not waited for; stderr is a text pipe.
    ``session``: in its own process group (to signal it and its workers with killpg);
    ``ctrl_c``: SIGINT at its default, as from a terminal."""
    return subprocess.Popen(
        [sys.executable, "-m", "launch.cli", *args],
        cwd=ROOT,
        start_new_session=session,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {})),
        preexec_fn=terminal_sigint if ctrl_c else None,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until(
    proc: subprocess.Popen,
    reached: Callable[[], bool],
    what: str,
    timeout: float = 240.0,
    poll: float = 0.05,
) -> None:
    """Poll ``reached()`` while the job runs.  The job ending first fails the test with
    its stderr, and so does ``timeout`` seconds without ``what``.  (A deadline, not a fixed
    sleep: on a loaded machine the job only gets there later.)"""
    deadline = time.monotonic() + timeout
    while not reached():
        assert proc.poll() is None, f"the job ended before {what}: {proc.stderr.read()}"
        assert time.monotonic() < deadline, f"no {what} after {timeout:.0f} s"
        time.sleep(poll)


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL the job (its whole group if it has one of its own), reap it and close its
    stderr; it must die of that signal.  (Not ``communicate()``: its worker processes hold
    the pipe open until they notice their parent is gone.)"""
    if os.getpgid(proc.pid) == proc.pid:
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    proc.stderr.close()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
