"""The two drivers do their own work: with no runner flag, ``tar2tf convert`` runs Beam's
local runner, whose SDK worker processes convert (no tar2tf worker pool is started);
``--runner local`` runs the in-process driver, whose own worker processes convert.  Both
write the same bytes (the golden digests pin them for more jobs)."""

import os
import sys

import shardgen
from conftest import DEFAULT_MODE_ENV
from ops_fixtures import ROOT, cli, output_digest


def _who_converted(pid_dir):
    """The command lines of the processes that ran the op, by pid."""
    out = {}
    for name in os.listdir(pid_dir):
        with open(os.path.join(pid_dir, name), "rb") as f:
            out[int(name)] = f.read().replace(b"\0", b" ").decode()
    return out


def test_beam_default_converts_in_beams_workers_and_local_in_tar2tfs(tmp_path):
    shardgen.make_shards(str(tmp_path / "in"), 4, 5, size=(24, 16))
    src = str(tmp_path / "in" / "train-{0000..0003}.tar")
    runs = {}
    for name, flags in (("beam", []), ("local", ["--runner", "local", "--processes", "2"])):
        pid_dir = tmp_path / f"pids-{name}"
        pid_dir.mkdir()
        env = {
            **DEFAULT_MODE_ENV,  # the default as a user gets it: Beam's worker processes
            "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]),
            "TAR2TF_TEST_PID_DIR": str(pid_dir),
        }
        p = cli(
            "convert",
            src,
            "--output",
            str(tmp_path / name / "t-{}.record"),
            "--records-per-shard",
            "6",
            "--ops",
            "slow_ops:pid_ops",
            "--no-progress",
            *flags,
            env=env,
        )
        assert p.returncode == 0, p.stderr[-2000:]
        runs[name] = _who_converted(pid_dir)
    assert output_digest(str(tmp_path / "beam")) == output_digest(str(tmp_path / "local"))
    # Beam's SDK workers ran the op: no tar2tf worker process, and not the launching CLI
    assert runs["beam"] and all(
        "pipelines.beam.sdk_worker" in cmd for cmd in runs["beam"].values()
    ), runs["beam"]
    assert not any("pipelines.local.worker" in cmd for cmd in runs["beam"].values())
    # the in-process driver's own worker processes ran it
    assert runs["local"] and all(
        "pipelines.local.worker" in cmd for cmd in runs["local"].values()
    ), runs["local"]
    assert sys.executable
