"""Ctrl-C in a terminal (SIGINT to the job's whole process group: the CLI and its shard
workers) during a local conversion: the job ends promptly with exit code 1 and a message,
leaves no process behind, every file under a final name is a complete shard, and
``--resume`` then writes an uninterrupted run's bytes.  On both drivers: Beam's local runner
(``--runner beam``: its SDK worker processes convert) and the in-process driver (the
default, ``--runner local``: its worker pool or threads do)."""

import glob
import os
import signal
import time

import pytest
from conftest import DEFAULT_MODE_ENV
from support import background, shardgen
from support.cli_fixtures import cli, output_digest

from transforms.tfrecord.framing import read_records

N_SHARDS = 8


@pytest.mark.parametrize(
    "mode, how",
    [
        (["--runner", "beam", "--direct_num_workers=2"], "ctrl-c"),
        (["--runner", "local"], "ctrl-c"),
        (["--runner", "local", "--processes", "0"], "ctrl-c"),
        # a scheduler's stop: SIGTERM to the launcher alone, which ends its job as Ctrl-C
        (["--runner", "beam", "--direct_num_workers=2"], "sigterm"),
        (["--runner", "local"], "sigterm"),
    ],
    ids=["beam", "local-workers", "local-threads", "beam-sigterm", "local-sigterm"],
)
def test_ctrl_c_stops_the_job_cleanly_and_resume_finishes_it(tmp_path, mode, how):
    shardgen.make_shards(str(tmp_path / "in"), N_SHARDS, 3, size=(32, 24))
    src = str(tmp_path / "in" / "train-{0000..0007}.tar")
    # the default as a user gets it (Beam's worker processes), not the suite's threads
    env = {**background.slow_env("0.2"), **DEFAULT_MODE_ENV}
    out, work = str(tmp_path / "o" / "t-{}.record"), str(tmp_path / "work")
    args = background.slow_convert(src, out, "--work-dir", work, "--records-per-shard", "4", *mode)
    proc = background.start(*args, env=env, session=True, ctrl_c=True)
    # a final shard journaled (in-process) or a piece converted (Beam: shards come at the end)
    background.wait_until(
        proc,
        lambda: glob.glob(f"{work}/*/journal-*.json") + glob.glob(f"{work}/*/piece-*.json"),
        "Ctrl-C (a journaled shard or a converted piece)",
    )
    if how == "sigterm":
        os.kill(proc.pid, signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    t = time.time()
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 1 and "tar2tf: interrupted" in err, err
    # one line: no traceback of the launcher, of Beam's worker processes or of its threads
    assert "ERROR" not in err and "Traceback" not in err, err
    assert time.time() - t < 20, "the job took too long to stop"
    deadline = time.monotonic() + 60  # every worker process ends with the job (on a loaded
    while background.group_alive(proc.pid) and time.monotonic() < deadline:  # machine, later)
        time.sleep(0.1)
    assert not background.group_alive(proc.pid), "a process of the job outlived it"
    assert not os.path.exists(tmp_path / "o" / "t.record.manifest.json")
    outs = os.listdir(tmp_path / "o") if os.path.isdir(tmp_path / "o") else []
    left = [f for f in outs if f.endswith(".tar2tf-lock")]
    assert not left, "the output's lock outlived the job"
    finals = sorted(glob.glob(str(tmp_path / "o" / "t-*.record")))
    assert len(finals) < N_SHARDS * 3 // 4, "Ctrl-C should land midway"
    for path in finals:  # complete shards only: every frame's CRCs check, 4 records each
        assert sum(1 for _ in read_records(path)) == 4

    p = cli(*args, "--resume", env=env)
    assert p.returncode == 0 and "resumed" in p.stderr, p.stderr
    ref = {out: str(tmp_path / "ref" / "t-{}.record"), work: str(tmp_path / "work-ref")}
    p = cli(*[ref.get(a, a) for a in args], env=env)
    assert p.returncode == 0, p.stderr
    assert output_digest(str(tmp_path / "o")) == output_digest(str(tmp_path / "ref"))


@pytest.mark.parametrize(
    "mode, busy",
    [
        (["--runner", "beam", "--direct_num_workers=2"], 0.0),
        (["--runner", "beam", "--direct_num_workers=2"], 3.0),
        (["--runner", "local", "--processes", "2"], 3.0),
    ],
    ids=["beam-starting", "beam-busy", "local-workers"],
)
def test_workers_end_with_a_killed_parent(tmp_path, mode, busy):
    """kill -9 of the CLI while its workers (Beam's SDK workers, or the in-process driver's
    pool) start, or sit in a slow (or hung) op: they must not keep converting for nobody, or
    live for ever.  (A Beam SDK worker whose launcher dies before it connects would wait
    for ever on its gRPC channel.)"""
    shardgen.make_shards(str(tmp_path / "in"), 4, 2, size=(32, 24))
    env = {**background.slow_env("120"), **DEFAULT_MODE_ENV}
    args = [
        "convert",
        str(tmp_path / "in" / "train-{0000..0003}.tar"),
        "--output",
        str(tmp_path / "o" / "t-{}.record"),
        "--ops",
        "support.slow_ops:slow_ops",
        "--no-progress",
        *mode,  # either way, the worker processes are the CLI's children
    ]
    proc = background.start(*args, env=env, session=True)
    workers: list = []
    deadline = time.time() + 120
    try:
        while time.time() < deadline and len(workers) < 2:  # the pool's processes, once they run
            time.sleep(0.2)
            workers = [
                int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == proc.pid
            ]
        assert len(workers) == 2, "the job's worker processes did not start"
        time.sleep(busy)  # into their first (two-minute) record, or still starting
    finally:  # a failed wait must not leave the job running its two-minute ops
        proc.kill()
        proc.wait(timeout=30)
        proc.stderr.close()
    for _ in range(100):
        if not any(_parent(w) is not None for w in workers):
            break
        time.sleep(0.1)
    left = [w for w in workers if _parent(w) is not None]
    for w in left:
        os.kill(w, signal.SIGKILL)
    assert not left, "a worker outlived its killed parent"


def _parent(pid: int):
    """The parent pid of a live process (None if it is gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[1])
