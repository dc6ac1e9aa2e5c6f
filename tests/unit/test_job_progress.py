"""Progress where stderr is not a terminal (a log file, a pipe, a notebook): a line every
N seconds with shards, records, rate and ETA, so a long job is not silent until its
summary; none for a job shorter than N; none at all when turned off; the bar on a terminal
(pipelines/job/progress.py)."""

from __future__ import annotations

import io
import re
import time

import pytest

from pipelines.job import progress
from pipelines.job.progress import Progress

LINE = re.compile(
    r"tar2tf: progress: \d+/\d+ shards, \d+ records, [\d.]+ records/s, [\d.]+ MB/s, "
    r"\d+(s|m\d\ds|h\d\dm), (ETA (unknown|\d+(s|m\d\ds|h\d\dm))|converted, writing)"
)


def wait_for(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def test_a_log_gets_a_line_every_interval():
    out = io.StringIO()
    p = Progress(4, None, every=0.05, out=out)
    try:
        assert p.mode == "lines"
        p.shard_done(24, 2_000_000)
        wait_for(lambda: out.getvalue().count("\n") >= 2)
    finally:
        p.close()
    lines = out.getvalue().splitlines()
    assert all(LINE.fullmatch(ln) for ln in lines), lines
    assert "1/4 shards, 24 records" in lines[-1]
    n = len(out.getvalue())
    time.sleep(0.2)
    assert len(out.getvalue()) == n  # closed: no more lines


def test_a_job_shorter_than_the_interval_prints_nothing_and_closes_at_once():
    out = io.StringIO()
    t0 = time.monotonic()
    p = Progress(2, None, every=30, out=out)
    p.shard_done(1, 10)
    p.shard_done(1, 10)
    p.close()
    assert out.getvalue() == "" and time.monotonic() - t0 < 5


def test_turned_off_prints_nothing():
    out = io.StringIO()
    p = Progress(2, False, every=0.01, out=out)
    p.shard_done(1, 10)
    time.sleep(0.1)
    p.close()
    assert p.mode is None and out.getvalue() == ""


def test_eta_from_this_runs_shards_not_the_resumed_ones():
    p = Progress(4, True, every=1000, out=io.StringIO())
    try:
        p.shard_done(10, 0, resumed=True)  # a resumed job's journal held it
        assert "1/4 shards, 10 records, 0.0 records/s" in p.line()
        assert p.line().endswith("ETA unknown")
        p.shard_done(5, 0)
        assert re.search(r"2/4 shards, 15 records, .*, ETA \d+s$", p.line()), p.line()
        p.complete(40, 0)
        line = p.line()  # every shard converted: what is left is writing the output
        assert "4/4 shards, 40 records, " in line and line.endswith(", converted, writing")
    finally:
        p.close()


def test_a_terminal_gets_the_bar():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    p = Progress(2, None, out=out)
    p.shard_done(3, 10)
    p.close()
    assert p.mode == "bar" and "tar2tf" in out.getvalue() and "progress:" not in out.getvalue()


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), "x"])
def test_the_interval_is_checked(bad):
    with pytest.raises(ValueError, match="progress_every"):
        progress.checked_every(bad)
