"""One job per output (pipelines/job/output_lock.py, transforms/stores/exclusive.py).

* The store primitive: create-if-absent refuses a second create, on the local disk and
  on each object store the tests run (moto's S3, fake-gcs-server, aisnode); replace and
  delete refuse a changed lock.
* The lock: a live job's lock refuses a second job with one line naming it (host, pid,
  start time); a dead job's lock (same host: pid gone; another host: old heartbeat) is
  taken over; a lock taken from a running job is noticed by its heartbeat.
* End to end: two concurrent CLI jobs on one output (local and S3): the second exits 4
  naming the first, whose output verifies; after ``kill -9`` a ``--resume`` finishes the
  job; the PCR job and the in-process driver are refused as well.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from support import background, shardgen
from support.cli_fixtures import ROOT, cli

from pipelines.job import output_lock
from pipelines.job.output_lock import OutputLockedError
from transforms.stores import StoreConfig, exclusive

# -- the store primitive, on every store ---------------------------------------------------


@pytest.fixture(params=["local", "s3"])
def lock_place(request, tmp_path):
    """(a URL for a lock, its StoreConfig) on the local disk, S3 (moto), AIS and GCS."""
    if request.param == "local":
        yield str(tmp_path / "out.tar2tf-lock"), None
    elif request.param == "s3":
        server = request.getfixturevalue("moto_server")
        request.getfixturevalue("s3_env")
        bucket = server.new_bucket()
        yield f"s3://{bucket}/o/out.tar2tf-lock", StoreConfig(s3_endpoint=server.url)


def _primitive(url, config):
    v1 = exclusive.create(url, b"one", config)
    with pytest.raises(FileExistsError):
        exclusive.create(url, b"two", config)
    data, version = exclusive.read(url, config)
    assert data == b"one"
    v2 = exclusive.replace(url, b"one+", version, config)
    with pytest.raises(FileExistsError):  # the old version is gone
        exclusive.replace(url, b"stale", v1 if v1 != v2 else b"x", config)
    with pytest.raises(FileExistsError):
        exclusive.delete(url, v1 if v1 != v2 else b"x", config)
    assert exclusive.read(url, config)[0] == b"one+"
    assert exclusive.delete(url, v2, config) is True
    assert exclusive.delete(url, v2, config) is False
    exclusive.create(url, b"three", config)  # absent again: created
    assert exclusive.read(url, config)[0] == b"three"


def test_create_if_absent_local_and_s3(lock_place):
    _primitive(*lock_place)


def test_create_if_absent_ais_and_gcs(backend):
    _primitive(backend.url("o/out.tar2tf-lock"), backend.config())


def _while_another_writer_holds_the_guard(tmp_path, act):
    """Our lock file, then ``act(url, version)`` on a thread while another process holds
    the directory's flock and writes its own lock there: ``act`` must wait for the guard.
    What ``act`` returned ("changed" if it raised FileExistsError), and the lock's URL."""
    url = str(tmp_path / "out.tar2tf-lock")
    version = exclusive.create(url, b"ours", None)
    outcome = []

    def run():
        try:
            outcome.append(act(url, version))
        except FileExistsError:
            outcome.append("changed")

    with exclusive.local_guard(url):
        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(0.5)
        assert t.is_alive() and not outcome  # waiting for the guard
        with open(url + ".theirs", "wb") as f:
            f.write(b"theirs")
        os.replace(url + ".theirs", url)
    t.join(10)
    assert not t.is_alive()
    return outcome, url


def test_a_local_replace_never_falls_between_another_writers_compare_and_write(tmp_path):
    """While another process compares and writes (it holds the directory's flock), a
    replace waits, then finds the object changed instead of overwriting the new one."""
    outcome, url = _while_another_writer_holds_the_guard(
        tmp_path, lambda url, version: exclusive.replace(url, b"ours, refreshed", version, None)
    )
    assert outcome == ["changed"] and open(url, "rb").read() == b"theirs"


def test_a_local_delete_never_falls_between_another_writers_compare_and_write(tmp_path):
    """The same for a delete (a job releasing its lock): it waits for the guard, then finds
    the other job's lock and leaves it where it is."""
    outcome, url = _while_another_writer_holds_the_guard(
        tmp_path, lambda url, version: exclusive.delete(url, version, None)
    )
    assert outcome == ["changed"] and open(url, "rb").read() == b"theirs"
    assert sorted(os.listdir(tmp_path)) == ["out.tar2tf-lock"]  # nothing left beside it


# -- the lock -------------------------------------------------------------------------------


@pytest.fixture()
def sleeper():
    """A live process that is not this one (the 'running job' of a lock)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield p
    p.kill()
    p.wait()


def _lock_of(pid, host=None, beat=None):
    now = time.time()
    return {
        "kind": output_lock.KIND,
        "token": f"tok-{pid}",
        "host": host or socket.gethostname(),
        "pid": pid,
        "pid_start": output_lock._proc_start(pid),
        "started": now - 60,
        "heartbeat": now if beat is None else beat,
        "command": "convert",
        "output": "x",
    }


def test_live_job_refused_dead_job_taken_over(lock_place, sleeper):
    url, config = lock_place
    exclusive.create(url, json.dumps(_lock_of(sleeper.pid)).encode(), config)
    with pytest.raises(OutputLockedError) as e:
        output_lock.acquire(url, config, output="out", command="convert")
    msg = str(e.value)
    assert f"pid {sleeper.pid} on host {socket.gethostname()}, started 20" in msg
    assert "\n" not in msg
    sleeper.kill()
    sleeper.wait()
    lock = output_lock.acquire(url, config, output="out", command="convert")
    held = json.loads(exclusive.read(url, config)[0])
    assert held["pid"] == os.getpid() and held["token"] == lock.info["token"]
    lock.release()
    with pytest.raises(FileNotFoundError):
        exclusive.read(url, config)


def test_other_host_stale_only_after_heartbeat_timeout(tmp_path):
    url = str(tmp_path / "l")
    fresh = _lock_of(1, host="elsewhere.example", beat=time.time() - 10)
    exclusive.create(url, json.dumps(fresh).encode())
    with pytest.raises(OutputLockedError, match="on host elsewhere.example"):
        output_lock.acquire(url, output="out", command="convert")
    os.unlink(url)
    old = _lock_of(1, host="elsewhere.example", beat=time.time() - output_lock.STALE_AFTER_S - 5)
    exclusive.create(url, json.dumps(old).encode())
    output_lock.acquire(url, output="out", command="convert").release()
    assert not os.path.exists(url)


def test_reused_pid_is_stale(tmp_path, sleeper):
    url = str(tmp_path / "l")
    info = _lock_of(sleeper.pid)
    info["pid_start"] = "1"  # the pid runs, but a process started at another time
    exclusive.create(url, json.dumps(info).encode())
    output_lock.acquire(url, output="out", command="convert").release()


def test_not_a_lock_refused(tmp_path):
    url = str(tmp_path / "l")
    exclusive.create(url, b"")
    with pytest.raises(OutputLockedError, match="not a tar2tf lock"):
        output_lock.acquire(url, output="out", command="convert")


def test_heartbeat_refreshes_and_notices_a_taken_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(output_lock, "HEARTBEAT_S", 0.05)
    url = str(tmp_path / "l")
    lock = output_lock.acquire(url, output="out", command="convert")
    first = json.loads(open(url).read())["heartbeat"]
    deadline = time.time() + 10
    while json.loads(open(url).read())["heartbeat"] == first and time.time() < deadline:
        time.sleep(0.02)
    assert json.loads(open(url).read())["heartbeat"] > first
    other = _lock_of(4242, host="elsewhere.example")
    # another job took it (as a race on AIS could), written whole as every store write is,
    # and between two of this lock's heartbeats, as another process's write would be
    with open(url + ".other", "w") as f:
        json.dump(other, f)
    with exclusive.local_guard(url):
        os.replace(url + ".other", url)
    while lock.lost is None and time.time() < deadline:
        time.sleep(0.02)
    with pytest.raises(OutputLockedError, match="pid 4242 on host elsewhere.example"):
        lock.check()
    lock.release()  # not ours any more: left alone
    assert json.loads(open(url).read())["pid"] == 4242


# -- end to end -------------------------------------------------------------------------------

N_IN, PER_IN = 4, 3


@pytest.fixture()
def inputs(tmp_path):
    shardgen.make_shards(str(tmp_path / "in"), N_IN, PER_IN, size=(16, 12))
    return str(tmp_path / "in" / "train-{0000..0003}.tar")


def _slow_job(args, delay="0.3"):
    return background.start(*args, env=background.slow_env(delay), session=True)


def _wait_for(cond, proc, what, timeout=120):
    background.wait_until(proc, cond, what, timeout=timeout)


def _one_line(p, code):
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == code, p.stderr
    assert len(lines) == 1 and lines[0].startswith("tar2tf "), p.stderr
    return lines[0]


def _convert_args(src, out, *more):
    return background.slow_convert(src, out, "--runner", "local", *more)


def test_second_job_refused_while_first_runs_local(tmp_path, inputs):
    out = str(tmp_path / "o" / "t-{}.record")
    lock = str(tmp_path / "o" / "t.record.tar2tf-lock")
    first = _slow_job(_convert_args(inputs, out, "--records-per-shard", "2"))
    try:
        _wait_for(lambda: os.path.exists(lock), first, "lock")
        second = cli(*_convert_args(inputs, out, "--records-per-shard", "5"))
        line = _one_line(second, 4)
        assert f"pid {first.pid} on host {socket.gethostname()}" in line and "started" in line
        resumed = cli(*_convert_args(inputs, out, "--records-per-shard", "2", "--resume"))
        assert f"pid {first.pid}" in _one_line(resumed, 4)
        assert first.wait(timeout=300) == 0, first.stderr.read()
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert not os.path.exists(lock)
    work = tmp_path / "o" / ".tar2tf-work"
    assert not work.exists() or not os.listdir(work)  # the refused jobs left no work
    v = cli("verify", str(tmp_path / "o" / "t.record.manifest.json"))
    assert v.returncode == 0, v.stdout + v.stderr
    assert len(json.load(open(tmp_path / "o" / "t.record.manifest.json"))["shards"]) == 6


@pytest.mark.slow
def test_kill_9_then_resume_and_overwrite(tmp_path, inputs):
    out = str(tmp_path / "o" / "t-{}.record")
    lock = str(tmp_path / "o" / "t.record.tar2tf-lock")
    args = _convert_args(inputs, out, "--records-per-shard", "2")
    first = _slow_job(args)
    _wait_for(lambda: os.path.exists(lock), first, "lock")
    _wait_for(lambda: glob.glob(str(tmp_path / "o" / "t-*.record")), first, "a finished shard")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert os.path.exists(lock)  # left by the killed job
    p = cli(*args, "--resume", env={"PYTHONPATH": os.path.join(ROOT, "tests")})
    assert p.returncode == 0, p.stderr
    assert not os.path.exists(lock)
    v = cli("verify", str(tmp_path / "o" / "t.record.manifest.json"))
    assert v.returncode == 0, v.stdout + v.stderr
    # and --overwrite over a killed job's lock
    first = _slow_job(args + ["--overwrite"])
    _wait_for(lambda: os.path.exists(lock), first, "lock")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    p = cli(*args, "--overwrite", env={"PYTHONPATH": os.path.join(ROOT, "tests")})
    assert p.returncode == 0, p.stderr
    assert not os.path.exists(lock)


@pytest.mark.slow
def test_second_job_refused_while_first_runs_s3(tmp_path, inputs, moto_server, s3_env):
    bucket = moto_server.new_bucket()
    out = f"s3://{bucket}/o/t-{{}}.record"
    s3 = ["--s3-endpoint", moto_server.url]
    first = _slow_job(_convert_args(inputs, out, "--records-per-shard", "2", *s3))
    try:
        _wait_for(lambda: "o/t.record.tar2tf-lock" in moto_server.keys(bucket), first, "lock on S3")
        second = cli(*_convert_args(inputs, out, "--records-per-shard", "5", *s3))
        assert f"pid {first.pid} on host" in _one_line(second, 4)
        assert first.wait(timeout=300) == 0, first.stderr.read()
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    keys = moto_server.keys(bucket)
    assert "o/t.record.tar2tf-lock" not in keys
    manifest = json.loads(moto_server.get(bucket, "o/t.record.manifest.json"))
    assert len(manifest["shards"]) == 6
    v = cli("verify", f"s3://{bucket}/o/t.record.manifest.json", *s3)
    assert v.returncode == 0, v.stdout + v.stderr


def test_beam_driver_and_pcr_refused_by_a_live_lock(tmp_path, inputs, sleeper):
    """The Beam TFRecord driver and the PCR job take the same lock."""
    out = tmp_path / "o"
    out.mkdir()
    held = json.dumps(_lock_of(sleeper.pid)).encode()
    exclusive.create(str(out / "t.record.tar2tf-lock"), held)
    p = cli("convert", inputs, "--output", str(out / "t-{}.record"), "--no-progress")
    assert f"pid {sleeper.pid}" in _one_line(p, 4)
    pcr_out = tmp_path / "pcr"
    exclusive.create(str(pcr_out / ".tar2tf-lock"), held)
    p = cli("pcr", inputs, "--output", str(pcr_out), "--no-progress")
    assert f"pid {sleeper.pid}" in _one_line(p, 4)
    assert sorted(os.listdir(pcr_out)) == [".tar2tf-lock"]  # nothing else written
    assert sorted(os.listdir(out)) == ["t.record.tar2tf-lock"]


def test_a_beam_job_that_cannot_start_releases_its_lock(tmp_path):
    """An op that cannot be pickled stops a Beam job while its graph is built, after the
    output's lock was taken: the lock goes with the failure, not with the process."""
    from pipelines.beam.convert import convert
    from pipelines.job.kinds.tfrecord.config import ConvertConfig
    from transforms.ops import Func

    shardgen.make_shards(str(tmp_path), 1, 3, size=(8, 8))
    counter = (i for i in range(10))  # a generator cannot be pickled: nor can the op

    def tag(record):
        return dict(record, n=next(counter) * 0)

    out = str(tmp_path / "o" / "t-{}.record")
    cfg = ConvertConfig(
        sources=str(tmp_path / "train-0000.tar"),
        output=out,
        sample_stages=(Func(tag),),
        progress=False,
    )
    with pytest.raises(Exception, match="pickl"):
        convert(cfg)
    assert not os.path.exists(output_lock.lock_url_for(out))
