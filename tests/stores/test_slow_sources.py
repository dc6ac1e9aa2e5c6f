"""Sources that trickle: a server that sends one byte a second never trips
``--read-timeout``.

* ``--min-read-rate`` ends such a read: the shard is a counted ``fetch`` reject, the other
  shards convert; time the caller spends between reads (converting) does not count.
* Ctrl-C of ``--runner local`` on threads during such a read ends the job within seconds,
  with ``tar2tf: interrupted`` (the threads' reads are interrupted; before, the job waited
  for the slow shard to end).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import time

import pytest
from support import background, shardgen
from support.cli_fixtures import cli
from support.range_server import Loopback, QuietHandler

from transforms.stores.retry import ResumableReader, RetryPolicy, SlowReadError

TRICKLE_S = 1.0  # one byte a second, as the slow source of the report


class _Trickle:
    """``/slow/<name>``: the file, one byte per :data:`TRICKLE_S`; ``/fast/<name>``: at
    once.  ``gets``: the paths asked for, in order."""

    def __init__(self, root: str):
        self.root, self.gets = root, []
        owner = self

        class Handler(QuietHandler):
            def do_GET(self):
                owner.gets.append(self.path)
                kind = self.path.lstrip("/").partition("/")[0]
                data = self.send_file_head(owner.root)
                try:
                    if kind == "fast":
                        self.wfile.write(data)
                        return
                    for i in range(len(data)):
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
                        time.sleep(TRICKLE_S)
                except OSError:
                    pass  # the client gave up

        self.server = Loopback(Handler)

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def trickle(tmp_path):
    shardgen.make_shards(str(tmp_path / "www"), 2, 3, size=(32, 24))
    srv = _Trickle(str(tmp_path / "www"))
    yield srv
    srv.stop()


@pytest.mark.slow
def test_min_read_rate_makes_a_trickling_shard_a_fetch_reject(trickle, tmp_path):
    out = tmp_path / "o"
    t = time.monotonic()
    r = cli(
        "convert",
        f"{trickle.url}/slow/train-0000.tar",
        f"{trickle.url}/fast/train-0001.tar",
        "-o",
        str(out / "t-{}.record"),
        "--read-timeout",
        "3",
        "--min-read-rate",
        "1KB",
        "--max-rejects",
        "1",
        "--runner",
        "local",
        "--no-progress",
        timeout=120,
    )
    took = time.monotonic() - t
    assert r.returncode == 0, r.stderr
    rejects = [json.loads(x) for x in open(out / "t.record.rejects.jsonl")]
    assert len(rejects) == 1, rejects
    rej = rejects[0]
    assert rej["stage"] == "fetch" and rej["shard"].endswith("/slow/train-0000.tar"), rej
    assert "read too slow" in rej["reason"] and "--min-read-rate" in rej["reason"], rej
    manifest = json.load(open(out / "t.record.manifest.json"))
    assert manifest["totals"]["records_written"] == 3, manifest["totals"]
    # the slow shard (a few KB: hours at a byte a second) was given up after a window
    assert took < 60, took


class _Stream:
    """A body of ``n`` bytes whose every read takes ``delay`` seconds."""

    def __init__(self, data: bytes, delay: float):
        self.f, self.delay = io.BytesIO(data), delay

    def read(self, n: int) -> bytes:
        time.sleep(self.delay)
        return self.f.read(min(n, 64))

    def close(self) -> None:
        pass


def _reader(data: bytes, delay: float, rate: int, window: float) -> ResumableReader:
    policy = RetryPolicy(attempts=1, min_rate=rate, window_s=window)
    return ResumableReader(
        lambda off: (_Stream(data[off:], delay), len(data), len(data)), policy, "x"
    )


def test_min_read_rate_counts_the_time_in_reads_only():
    data = bytes(range(256)) * 8  # 2 KB
    # a slow consumer: the source answers at once, the caller waits between reads
    r = _reader(data, 0.0, rate=10_000, window=0.05)
    got = bytearray()
    buf = bytearray(64)
    while True:
        n = r.readinto(buf)
        if not n:
            break
        got += buf[:n]
        time.sleep(0.01)
    assert bytes(got) == data
    # a slow source: 64 bytes per 20 ms is 3.2 KB/s, under the minimum of 10 KB/s
    r = _reader(data, 0.02, rate=10_000, window=0.05)
    with pytest.raises(SlowReadError, match="read too slow"):
        while r.readinto(buf):
            pass


@pytest.mark.parametrize(
    "mode",
    [["--runner", "local"], ["--runner", "local", "--processes", "0"]],
    ids=["local-threads", "local-caller-thread"],
)
def test_ctrl_c_ends_a_threaded_job_during_a_slow_read(trickle, tmp_path, mode):
    """A passthrough job into a plain output name converts on threads of the CLI's process
    (one per core; ``--processes 0``: on its own thread)."""
    args = [
        "convert",
        f"{trickle.url}/slow/train-0000.tar",
        f"{trickle.url}/slow/train-0001.tar",
        "-o",
        str(tmp_path / "o" / "t.record"),
        "--work-dir",
        str(tmp_path / "work"),
        "--read-timeout",
        "30",
        "--no-progress",
        *mode,
    ]
    proc = background.start(*args, session=True, ctrl_c=True)
    try:
        background.wait_until(proc, lambda: trickle.gets, "a read of its shards", timeout=120)
        time.sleep(2.0)  # into the slow read (bytes arriving one a second)
        os.killpg(proc.pid, signal.SIGINT)
        t = time.time()
        try:
            err = proc.communicate(timeout=60)[1]
        except subprocess.TimeoutExpired:
            pytest.fail("Ctrl-C did not stop the job within 60 s")
        took = time.time() - t
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 1 and "tar2tf: interrupted" in err, err
    assert "Traceback" not in err, err
    # about a second on an idle machine; the margin is for a loaded one (2 cores shared by
    # several test runs), and stays well under the 30 s read timeout a stuck read would wait
    assert took < 15, f"the job took {took:.1f} s to stop"
    # the interrupted shards left no piece: --resume must read them again, not keep an
    # interruption as a reject
    pieces = [n for _, _, files in os.walk(tmp_path / "work") for n in files if "piece" in n]
    assert not pieces, pieces
