"""The output lock against locks nobody should have to explain (pipelines/job/output_lock.py),
on both drivers: the lock is taken in ``lifecycle.prepare``, before either driver runs.

* A lock whose ``started`` is no time (1e20, NaN): a dead job's is taken over with the
  usual warning, a live job's refused with the usual exit-4 line, ``started ?``.
* A lock naming pid 0 or -1 on this host: no job runs under such a pid, so it is taken over
  (``os.kill(-1, 0)`` succeeds, which used to make it "alive").
* A lock that is a dangling symbolic link: the "not a tar2tf lock ... delete it" line,
  exit 4, not "other jobs keep taking it".
"""

from __future__ import annotations

import json
import os
import socket

import pytest
from support import shardgen
from support.cli_fixtures import DRIVERS, cli

from pipelines.job import output_lock


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("lock-edges-in")
    shardgen.make_shards(str(d), 2, 3, size=(8, 8))
    return str(d / "train-{0000..0001}.tar")


def _lock(out) -> str:
    return output_lock.lock_url_for(str(out / "t-{}.record"))


def _convert(shards, out, runner, *more):
    return cli(
        "convert",
        shards,
        "-o",
        str(out / "t-{}.record"),
        "--no-progress",
        "--type-map",
        "cls:int64",
        *DRIVERS[runner],
        *more,
    )


def _held(**over) -> dict:
    info = {
        "kind": output_lock.KIND,
        "token": "0" * 32,
        "host": socket.gethostname(),
        "pid": os.getpid(),  # this test: a live process
        "pid_start": None,
        "started": 1.7e9,
        "heartbeat": 1.7e9,
        "command": "convert",
        "output": "elsewhere",
    }
    info.update(over)
    return info


def _one_line(p, code) -> str:
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == code, p.stderr
    assert len(lines) == 1 and lines[0].startswith("tar2tf "), p.stderr
    assert "Traceback" not in p.stderr
    return lines[0]


def _a_dead_pid() -> int:
    """A pid no process has now (the highest the kernel would give, checked)."""
    with open("/proc/sys/kernel/pid_max") as f:
        pid = int(f.read()) - 1
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


@pytest.mark.parametrize("runner", sorted(DRIVERS))
@pytest.mark.parametrize(
    "held",
    [
        {"started": 1e20, "pid": "dead"},
        {"started": float("nan"), "pid": "dead"},
        {"pid": 0},
        {"pid": -1},
    ],
    ids=["started-1e20", "started-nan", "pid-0", "pid-minus-1"],
)
def test_a_dead_jobs_odd_lock_is_taken_over(shards, tmp_path, runner, held):
    out = tmp_path / "o"
    out.mkdir()
    if held.get("pid") == "dead":
        held = dict(held, pid=_a_dead_pid())
    with open(_lock(out), "w") as f:
        f.write(json.dumps(_held(**held)))  # NaN as JSON's NaN: Python reads it back
    p = _convert(shards, out, runner)
    assert p.returncode == 0, p.stderr
    assert "taking over the lock of a job that ended" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert (out / "t.record.manifest.json").exists()
    assert not os.path.lexists(_lock(out))  # released at the end


@pytest.mark.parametrize("runner", sorted(DRIVERS))
@pytest.mark.parametrize("started", [float("nan"), 1e20, "soon"], ids=["nan", "1e20", "text"])
def test_a_live_jobs_lock_with_no_start_time_is_refused_in_the_usual_line(
    shards, tmp_path, runner, started
):
    """Another host's lock with a fresh heartbeat: its job may run."""
    import time

    out = tmp_path / "o"
    out.mkdir()
    held = _held(host="another-host", pid=4242, started=started, heartbeat=time.time())
    with open(_lock(out), "w") as f:
        f.write(json.dumps(held))
    before = sorted(os.listdir(out))
    line = _one_line(_convert(shards, out, runner), 4)
    assert "another job is writing" in line and "pid 4242 on host another-host" in line, line
    assert "started ?" in line, line
    assert sorted(os.listdir(out)) == before  # refused: nothing written


@pytest.mark.parametrize("runner", sorted(DRIVERS))
def test_a_dangling_symlink_lock_is_named_as_no_tar2tf_lock(shards, tmp_path, runner):
    out = tmp_path / "o"
    out.mkdir()
    os.symlink(str(tmp_path / "nowhere"), _lock(out))
    line = _one_line(_convert(shards, out, runner), 4)
    assert "which is not a tar2tf lock" in line and f"delete {_lock(out)}" in line, line
    assert "keep taking it" not in line
    assert os.path.islink(_lock(out))  # not the job's to delete
    assert sorted(os.listdir(out)) == ["t.record.tar2tf-lock"]


@pytest.mark.parametrize("runner", sorted(DRIVERS))
def test_a_job_whose_lock_was_taken_stops_before_its_commit_point(shards, tmp_path, runner):
    """Job A runs; its lock is deleted and taken by job B (here: a lock naming this live
    test process, with another token, and a temporary file of B's in the output
    directory).  A must not write its manifest over B's output, exit 4 with the lock
    line, and leave B's lock, B's temporary file and the work directory alone."""
    import glob

    from support import background

    out = tmp_path / "o"
    job = background.start(
        *background.slow_convert(shards, str(out / "t-{}.record"), *DRIVERS[runner]),
        env=background.slow_env("0.5"),
    )
    try:
        background.wait_until(
            job, lambda: glob.glob(str(out / ".tar2tf-work" / "*" / "job.json")), "job.json"
        )
        taken = json.dumps(_held(token="b" * 32, output=str(out / "t-{}.record")))
        os.unlink(_lock(out))
        with open(_lock(out), "w") as f:
            f.write(taken)
        theirs = out / ".t-1.record.tmp-0123456789ab"
        theirs.write_bytes(b"job B's shard, being written")
        assert job.wait(timeout=300) == 4, job.stderr.read()
        err = job.stderr.read()
    finally:
        if job.poll() is None:
            background.kill(job)
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("WARNING")]
    assert len(lines) == 1 and "another job took the lock on this output" in lines[0], err
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in lines[0], err
    assert "Traceback" not in err
    assert not (out / "t.record.manifest.json").exists()  # A's commit point never came
    assert open(_lock(out)).read() == taken  # B's lock stays B's
    assert theirs.read_bytes() == b"job B's shard, being written"
    assert glob.glob(str(out / ".tar2tf-work" / "*" / "job.json"))  # the work may be B's


@pytest.mark.parametrize("processes", ["0", "2"], ids=["threads", "workers"])
def test_a_streaming_job_whose_lock_was_taken_puts_no_further_shard_in_place(tmp_path, processes):
    """The in-process driver puts a ``{}`` output's shards in place as it writes them: it
    reads its lock again before each rename, so a job whose lock was taken stops at the
    next shard (its temporary file removed), not after writing them all."""
    import glob

    from support import background

    shardgen.make_shards(str(tmp_path / "in"), 6, 3, size=(8, 8))
    out = tmp_path / "o"
    job = background.start(
        *background.slow_convert(
            str(tmp_path / "in" / "train-{0000..0005}.tar"),
            str(out / "t-{}.record"),
            *DRIVERS["local"],
            "--processes",
            processes,
            "--records-per-shard",
            "3",
        ),
        env=background.slow_env("0.4"),
        session=True,
    )
    try:
        background.wait_until(job, lambda: (out / "t-1.record").exists(), "the first shard")
        taken = json.dumps(_held(token="b" * 32, output=str(out / "t-{}.record")))
        os.unlink(_lock(out))
        with open(_lock(out), "w") as f:
            f.write(taken)
        assert job.wait(timeout=300) == 4, job.stderr.read()
        err = job.stderr.read()
    finally:
        if job.poll() is None:
            background.kill(job)
    assert "another job took the lock on this output" in err, err
    assert "Traceback" not in err
    placed = glob.glob(str(out / "t-*.record"))
    assert 1 <= len(placed) < 6, placed  # stopped at the shard after the lock was taken
    assert not glob.glob(str(out / ".t-*.tmp-*"))  # its own temporaries: removed
    assert not (out / "t.record.manifest.json").exists()
    assert open(_lock(out)).read() == taken
