"""``--processes N`` / ``processes=N``: bounded when parsed, and never more worker
processes than input shards on either driver (each one is an interpreter that takes its
time to start; beyond the shards it would only wait)."""

from __future__ import annotations

import pytest
from support import shardgen
from support.pool_spy import pool_starts

from launch import cli
from pipelines.job.kinds.tfrecord.config import MAX_PROCESSES, ConvertConfig
from transforms.ops import Decode, Encode


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("two-shards")
    shardgen.make_shards(str(d), 2, 3, size=(32, 24))
    return str(d) + "/train-{0000..0001}.tar"


def _cfg(sources, output, processes):
    # a heavy op: a job the driver would give worker processes anyway
    return ConvertConfig(
        sources=sources,
        output=output,
        processes=processes,
        sample_stages=(Encode(Decode("jpg"), "png"),),
        progress=False,
    )


@pytest.mark.parametrize("output", ["t-{}.record", "t.record"])
def test_in_process_starts_no_more_workers_than_shards(two_shards, tmp_path, monkeypatch, output):
    """64 processes asked for, 2 shards: 2 workers start (the placing pool of a '{}'
    output and the piece-file pool of a planned one alike), and the job converts both."""
    from pipelines.inprocess.driver import convert_in_process

    started = pool_starts(monkeypatch)
    res = convert_in_process(_cfg(two_shards, str(tmp_path / output), 64), 64)
    assert res.exit_code == 0 and res.totals["records_written"] == 6
    assert started == [2]


@pytest.mark.parametrize("processes", [64, None])
def test_beam_starts_no_more_workers_than_shards(two_shards, tmp_path, monkeypatch, processes):
    """The Beam job's local runner gets as many workers as the job has units, not 64 (nor
    one per core, by default, on a machine with more cores than shards)."""
    import os

    from pipelines.beam import job as beam_job
    from pipelines.beam.convert import convert

    asked = []

    class Stop(Exception):
        pass

    def effective_args(beam_args=None, workers=None):
        asked.append(workers)
        raise Stop  # the count is what this test is about: no pipeline needs to run

    monkeypatch.setattr(beam_job.opts, "effective_args", effective_args)
    with pytest.raises(Stop):
        convert(_cfg(two_shards, str(tmp_path / "t-{}.record"), processes), ["--runner", "beam"])
    assert asked == [min(processes or os.cpu_count(), 2)]


@pytest.mark.parametrize("n", [str(MAX_PROCESSES + 1), "100000"])
def test_processes_beyond_the_bound_are_a_usage_error(two_shards, tmp_path, capfd, n):
    out = tmp_path / "o" / "t-{}.record"
    assert cli.main(["convert", two_shards, "-o", str(out), "--processes", n]) == 2
    err = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    assert err[0] == (
        f"tar2tf convert: argument --processes: must be 0..{MAX_PROCESSES}, got {int(n)}"
    )
    assert not (tmp_path / "o").exists()
