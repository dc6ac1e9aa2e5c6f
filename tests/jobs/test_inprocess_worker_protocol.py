"""The worker process's side of the pool's protocol (``pipelines.inprocess.messages``),
spoken to directly: a message out of order is answered, never a reader thread that dies
silently and leaves both sides waiting."""

from __future__ import annotations

import pickle
import select
import subprocess
import sys

from support.cli_fixtures import ROOT

from pipelines.inprocess.messages import Runs, Setup, WriteFailed
from pipelines.job.kinds.tfrecord.config import ConvertConfig

BOOT = (
    "import sys; from pipelines.inprocess.worker import _task_loop; "
    "_task_loop(sys.stdin.buffer, sys.stdout.buffer)"
)


def test_runs_for_no_piece_held_are_answered_with_a_failure(tmp_path):
    cfg = ConvertConfig(sources=[], output=str(tmp_path / "t-{}.record"), progress=False)
    p = subprocess.Popen(
        [sys.executable, "-c", BOOT],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        pickle.dump(Setup(pickle.dumps(cfg), str(tmp_path / "work")), p.stdin)
        pickle.dump(Runs([]), p.stdin)
        p.stdin.flush()
        ready, _, _ = select.select([p.stdout], [], [], 60)
        assert ready, "the worker never answered"
        reply = pickle.load(p.stdout)
        assert isinstance(reply, WriteFailed) and "no piece" in reply.trace
        p.stdin.close()  # an idle worker whose input closes ends
        assert p.wait(timeout=60) == 0, p.stderr.read().decode()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
