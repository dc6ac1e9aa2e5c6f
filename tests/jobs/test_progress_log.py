"""``tar2tf convert`` with stderr going to a log (not a terminal): a progress line every
``--progress-every`` seconds while a long job runs, on both drivers; none with
``--no-progress``; none for a job shorter than the interval (the default, 60 s)."""

from __future__ import annotations

import re

import pytest
from support.cli_fixtures import DEMO_SOURCES, cli

LINE = re.compile(r"tar2tf: progress: (\d+)/4 shards, (\d+) records, .*(ETA|writing).*")


def convert(tmp_path, *flags, delay="0.05"):
    # slow_ops sleeps per record: 96 records take a few seconds whatever the machine
    return cli(
        "convert",
        DEMO_SOURCES,
        "-o",
        str(tmp_path / "out" / "d-{}.record"),
        "--ops",
        "support.slow_ops:slow_ops",
        *flags,
        env={"TAR2TF_TEST_DELAY": delay},
    )


@pytest.mark.parametrize(
    "runner",
    ["local", pytest.param("beam", marks=pytest.mark.slow)],  # Beam: seconds to start
)
def test_a_long_job_logs_progress_lines(tmp_path, runner):
    p = convert(tmp_path, "--runner", runner, "--progress-every", "0.3")
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("tar2tf: progress:")]
    assert lines and all(LINE.fullmatch(ln) for ln in lines), p.stderr
    done = [int(LINE.fullmatch(ln).group(1)) for ln in lines]
    assert done == sorted(done)  # they move forward
    # before the summary, never inside it
    assert p.stderr.index("records: 96 read") > p.stderr.rindex("tar2tf: progress:")


def test_no_progress_and_short_jobs_log_none(tmp_path):
    p = convert(tmp_path, "--runner", "local", "--no-progress", "--progress-every", "0.1")
    assert p.returncode == 0 and "progress:" not in p.stderr, p.stderr
    p = convert(tmp_path, "--overwrite", delay="0")  # default interval: 60 s
    assert p.returncode == 0 and "progress:" not in p.stderr, p.stderr


def test_the_interval_is_checked_before_the_job(tmp_path):
    p = convert(tmp_path, "--progress-every", "0")
    assert p.returncode == 2 and "--progress-every" in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()
