"""One output, however its path is spelt (``pipelines.job.names.resolved``), on both drivers.

* ``--overwrite`` of an output spelt another way than the run that wrote it (relative,
  ``./``, absolute, from another working directory, through a symbolic link to its
  directory), or of a copied dataset: the earlier run's stale shards are removed (they
  are the ones its manifest names beside itself, as ``tar2tf verify`` locates them), and
  the result verifies.
* ``--resume`` of an interrupted run with its output and inputs spelt another way finds
  that run's work directory and continues from it.
"""

from __future__ import annotations

import glob
import json
import os
import shutil

import pytest
from support import background, shardgen
from support.cli_fixtures import DRIVERS, ROOT, cli


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("spellings-in")
    shardgen.make_shards(str(d), 2, 6, size=(8, 8))
    return str(d / "train-{0000..0001}.tar")


def _convert(inputs, output, runner, *more, cwd=None):
    return cli(
        "convert",
        inputs,
        "-o",
        output,
        "--no-progress",
        "--type-map",
        "cls:int64",
        *DRIVERS[runner],
        *more,
        cwd=cwd,
    )


def _shards(d) -> list:
    return sorted(os.path.basename(f) for f in glob.glob(os.path.join(d, "t-*.record")))


# how the second run names the first run's output: (its -o, its working directory), from
# the test's directory ``tmp``
SPELLINGS = {
    "absolute": lambda tmp: (f"{tmp}/out/t-{{}}.record", str(tmp)),
    "dot": lambda tmp: ("./out/t-{}.record", str(tmp)),
    "other-cwd": lambda tmp: ("t-{}.record", str(tmp / "out")),
    "parent": lambda tmp: ("../out/t-{}.record", str(tmp / "elsewhere")),
    "symlink": lambda tmp: ("link/t-{}.record", str(tmp)),
}


@pytest.mark.parametrize("runner", sorted(DRIVERS))
@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_overwrite_spelt_another_way_removes_the_stale_shards(inputs, tmp_path, runner, spelling):
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "out", tmp_path / "link")
    p = _convert(inputs, "out/t-{}.record", runner, "--records-per-shard", "2", cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert len(_shards(tmp_path / "out")) == 6
    output, cwd = SPELLINGS[spelling](tmp_path)
    p = _convert(inputs, output, runner, "--records-per-shard", "6", "--overwrite", cwd=cwd)
    assert p.returncode == 0, p.stderr
    assert "left in place" not in p.stderr, p.stderr
    assert _shards(tmp_path / "out") == ["t-1.record", "t-2.record"]
    v = cli("verify", str(tmp_path / "out" / "t-{}.record"))
    assert v.returncode == 0, v.stdout + v.stderr
    assert not glob.glob(str(tmp_path / "out" / "*.replacing.json"))


@pytest.mark.parametrize("runner", sorted(DRIVERS))
def test_overwrite_of_a_copied_dataset_removes_the_copys_stale_shards(inputs, tmp_path, runner):
    p = _convert(inputs, "out/t-{}.record", runner, "--records-per-shard", "2", cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    shutil.copytree(tmp_path / "out", tmp_path / "copy")
    before = {f: open(f, "rb").read() for f in glob.glob(str(tmp_path / "out" / "*"))}
    p = _convert(
        inputs, str(tmp_path / "copy" / "t-{}.record"), runner, "--records-per-shard", "6",
        "--overwrite",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "left in place" not in p.stderr, p.stderr
    assert _shards(tmp_path / "copy") == ["t-1.record", "t-2.record"]
    v = cli("verify", str(tmp_path / "copy" / "t-{}.record"))
    assert v.returncode == 0, v.stdout + v.stderr
    # the dataset it was copied from is not touched
    assert {f: open(f, "rb").read() for f in glob.glob(str(tmp_path / "out" / "*"))} == before


@pytest.mark.parametrize("runner", sorted(DRIVERS))
def test_resume_spelt_another_way_continues_the_interrupted_run(tmp_path, runner):
    """The run is killed once some pieces are verified; ``--resume`` names its output and
    inputs another way (relative, from the test's directory, where the run had an
    absolute path with ``./`` and a symbolic link to the output's directory)."""
    shardgen.make_shards(str(tmp_path / "in"), 6, 3, size=(8, 8))
    (tmp_path / "o").mkdir()
    os.symlink(tmp_path / "o", tmp_path / "link")
    env = background.slow_env("0.3")
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env["PYTHONPATH"]])  # this tree, whatever the cwd
    # one final shard per input shard: the in-process driver journals each as it is
    # written, Beam's workers leave verified pieces
    flags = [*DRIVERS[runner], "--records-per-shard", "3"]
    first = background.slow_convert(
        f"{tmp_path}/./in/train-{{0000..0005}}.tar", f"{tmp_path}/link/t-{{}}.record", *flags
    )
    job = background.start(*first, env=env, session=True)
    work = tmp_path / "o" / ".tar2tf-work"

    def done() -> int:
        return len(glob.glob(str(work / "*" / "piece-*.json"))) + len(
            glob.glob(str(work / "*" / "journal-*.json"))
        )

    try:
        background.wait_until(job, lambda: done() >= 2, "two pieces or journaled shards")
    finally:
        if job.poll() is None:
            background.kill(job)
    assert not (tmp_path / "o" / "t.record.manifest.json").exists(), "the kill came too late"
    assert len(os.listdir(work)) == 1
    summary = str(tmp_path / "summary.json")
    again = background.slow_convert(
        "in/train-{0000..0005}.tar", "o/t-{}.record", *flags, "--resume"
    )
    p = cli(*again, "--summary-json", summary, cwd=str(tmp_path), env=env)
    assert p.returncode == 0, p.stderr
    assert json.load(open(summary))["counters"]["shards_resumed"] >= 1
    assert not os.path.exists(work)  # the one work directory, used and removed
    v = cli("verify", str(tmp_path / "o" / "t-{}.record"))
    assert v.returncode == 0, v.stdout + v.stderr
