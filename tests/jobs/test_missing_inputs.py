"""Missing inputs, as a newcomer meets them (a typo in a path or a template):

* none of the sources exists: a usage error (exit 2) naming the first missing one, before
  anything is written (no output directory, manifest, work directory or lock);
* some are missing: the job runs, and the summary's reject line names the first of them;
* a job that wrote no record leaves nothing that makes its rerun ask for --overwrite.

On both drivers: the in-process one (--runner local) and Beam's local runner."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from support.cli_fixtures import DEMO_SHARDS, cli
from support.pcr_fixtures import requires_jpegtran

RUNNERS = [
    pytest.param("local", id="local"),
    pytest.param("beam", id="beam", marks=pytest.mark.slow),  # Beam's start-up: seconds a run
]


@pytest.fixture
def here(tmp_path):
    """A working directory with one real shard and one that is not a tar."""
    shutil.copy(os.path.join(DEMO_SHARDS, "demo-0.tar"), tmp_path / "demo-0.tar")
    (tmp_path / "bad.tar").write_bytes(b"not a tar archive\n" * 40)
    return tmp_path


def run(here, *args):
    return cli(*args, cwd=str(here))


@pytest.mark.parametrize("runner", RUNNERS)
def test_no_input_found_is_a_usage_error_and_writes_nothing(here, runner):
    before = sorted(os.listdir(here))
    p = run(here, "convert", "missing.tar", "x-*.tar", "-o", "out/t-{}.record", "--runner", runner)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [
        "tar2tf convert: no input found: missing.tar does not exist (1 other source is missing too)"
    ]
    assert sorted(os.listdir(here)) == before  # no out/, no work directory, no lock
    # with the path fixed, the same output is free
    p = run(here, "convert", "demo-0.tar", "-o", "out/t-{}.record", "--runner", runner)
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("runner", RUNNERS)
def test_some_missing_the_summary_names_the_first(here, runner):
    p = run(
        here,
        "convert",
        "demo-0.tar",
        "gone-1.tar",
        "gone-2.tar",
        "-o",
        "out/t-{}.record",
        "--runner",
        runner,
    )
    assert p.returncode == 3, p.stderr
    assert "       2  list: missing shard (first: gone-1.tar)" in p.stderr.splitlines()
    with open(here / "out" / "t.record.manifest.json") as f:
        rejects = json.load(f)["rejects"]
    assert rejects["first_missing"] == "gone-1.tar" and rejects["count"] == 2


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_job_that_wrote_no_record_does_not_block_its_rerun(here, runner):
    p = run(here, "convert", "bad.tar", "gone.tar", "-o", "out/t-{}.record", "--runner", runner)
    assert p.returncode == 3, p.stderr
    p = run(here, "convert", "demo-0.tar", "-o", "out/t-{}.record", "--runner", runner)
    assert p.returncode == 0, p.stderr  # no --overwrite asked for
    assert os.path.exists(here / "out" / "t-1.record")


@requires_jpegtran
def test_pcr_no_input_and_an_empty_dataset(here):
    before = sorted(os.listdir(here))
    p = run(here, "pcr", "missing.tar", "-o", "pout")
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == "tar2tf pcr: no input found: missing.tar does not exist"
    assert sorted(os.listdir(here)) == before
    # a run that wrote no record leaves an index and a manifest of nothing: its rerun
    # replaces them without --overwrite
    p = run(here, "pcr", "bad.tar", "-o", "pout")
    assert p.returncode == 3 and os.path.exists(here / "pout" / "PCR_index.pb"), p.stderr
    p = run(here, "pcr", "demo-0.tar", "-o", "pout")
    assert p.returncode == 0, p.stderr
    # a dataset with records is still kept
    p = run(here, "pcr", "demo-0.tar", "-o", "pout")
    assert p.returncode == 4 and "--overwrite" in p.stderr, p.stderr
