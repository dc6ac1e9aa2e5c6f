"""A local job whose worker pool converts every shard for this process's shard stream runs
Beam's bundle in ``in_memory`` mode on one worker (the DoFns only collect): no gRPC data
plane, the same bytes (pipelines.options.collecting_args)."""

import hashlib
import os

import pytest
from apache_beam.runners.portability.fn_api_runner import worker_handlers

from pipelines.beam import options as opts
from pipelines.beam.convert import ConvertConfig, convert


@pytest.fixture(scope="module")
def shards(pool_shards):
    return pool_shards


def _mode(args):
    return opts._value(args, "--direct_running_mode"), opts._value(args, "--direct_num_workers")


def test_collecting_args_replace_the_default_mode_only():
    default = opts.effective_args(None, workers=2)
    assert _mode(default) == ("multi_threading", "2")
    assert _mode(opts.collecting_args(default, None)) == ("in_memory", "1")
    # the worker count the user asked for sizes the pool (computed before); the collecting
    # runner needs one
    asked = ["--direct_num_workers", "4", "--save_main_session"]
    got = opts.collecting_args(opts.effective_args(asked), asked)
    assert _mode(got) == ("in_memory", "1") and "4" not in got and "--save_main_session" in got
    assert opts.runner_name(got) == "FnApiRunner"
    chosen = ["--direct_running_mode=multi_threading"]
    assert opts.collecting_args(opts.effective_args(chosen, 2), chosen) == opts.effective_args(chosen, 2)
    flink = ["--runner=FlinkRunner", "--flink_master=[local]"]
    assert opts.collecting_args(flink, flink) == flink
    # a user's in_memory gets one worker (Beam warns about any other count, and runs one)
    assert _mode(opts.effective_args(["--direct_running_mode=in_memory"], 2)) == ("in_memory", "1")


def _run(shards, out, monkeypatch, beam_args=None, **kw):
    """convert() with the runner arguments its pipeline got and the gRPC servers Beam
    started; the output files' digests."""
    seen = {"args": [], "grpc": 0}
    real_options, real_server = opts.make_pipeline_options, worker_handlers.GrpcServer.__init__

    def options(args=None):
        seen["args"].append(list(args or []))
        return real_options(args)

    def server(self, *a, **k):
        seen["grpc"] += 1
        return real_server(self, *a, **k)
    monkeypatch.setattr(opts, "make_pipeline_options", options)
    monkeypatch.setattr(worker_handlers.GrpcServer, "__init__", server)
    res = convert(ConvertConfig(sources=shards, output=out, type_map={"cls": "int64"}, max_shard_size="20KB",
                                progress=False, **kw), beam_args)
    monkeypatch.undo()
    assert res.exit_code == 0 and res.totals["records_written"] == 24
    assert res.counters["records_written"] == 24  # Beam's counters still come from the DoFns
    files = {os.path.basename(p): hashlib.sha256(open(p, "rb").read()).hexdigest() for p in res.paths}
    assert len(seen["args"]) == 1
    return _mode(seen["args"][0]), seen["grpc"], files


def test_a_pooled_streamed_job_collects_in_memory_with_the_same_bytes(shards, tmp_path, monkeypatch):
    pooled = _run(shards, str(tmp_path / "pool/t-{}.record"), monkeypatch, ["--direct_num_workers=2"], processes=2)
    threads = _run(shards, str(tmp_path / "threads/t-{}.record"), monkeypatch, ["--direct_num_workers=2"],
                   processes=0)
    chosen = _run(shards, str(tmp_path / "chosen/t-{}.record"), monkeypatch,
                  ["--direct_running_mode=multi_threading", "--direct_num_workers=2"], processes=2)
    assert pooled[:2] == (("in_memory", "1"), 0)
    # Beam's threads convert: they keep the mode (and its gRPC data plane); so does a mode
    # the user chose
    assert threads[0] == chosen[0] == ("multi_threading", "2") and threads[1] >= 1 and chosen[1] >= 1
    assert len(pooled[2]) >= 2 and pooled[2] == threads[2] == chosen[2]


def test_a_job_with_a_write_stage_keeps_beams_threads(shards, tmp_path, monkeypatch):
    """A shuffled job has no shard stream: its graph goes on to write the shards on Beam's
    workers, which the collecting mode would run one at a time."""
    mode, _, files = _run(shards, str(tmp_path / "s/t-{}.record"), monkeypatch, ["--direct_num_workers=2"],
                          processes=2, shuffle=True, seed=3)
    assert mode == ("multi_threading", "2") and files
