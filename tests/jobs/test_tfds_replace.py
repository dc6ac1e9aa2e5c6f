"""TFDS metadata never names shards or counts that are not on disk
(``pipelines.export.tfds_retract.retracted``), on both drivers.

A job that replaces a split's shards (``--overwrite``, ``--resume``, with ``--tfds`` or
without) takes the split out of ``dataset_info.json`` before it replaces the first shard;
only a ``--tfds`` job that succeeds describes it again.  So a job that ends with rejects
(exit 3), fails or is killed leaves metadata that describes the other splits only, which
TFDS reads whole.
"""

from __future__ import annotations

import glob
import json
import os

import pytest
from support import background, shardgen
from support.cli_fixtures import DRIVERS, cli


def _records(first: int, count: int, bad: int = -1):
    out = []
    for i in range(first, first + count):
        cls = b"not a number" if i == bad else str(i % 10).encode()
        out += [(f"r{i:05d}.txt", b"text %d" % i), (f"r{i:05d}.cls", cls)]
    return out


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """train-{0,1}.tar (5 records each), val.tar (4), and bad.tar: 8 records, one of which
    is a reject under cls:int64."""
    d = tmp_path_factory.mktemp("tfds-replace-src")
    shardgen.write_tar(str(d / "train-0.tar"), _records(0, 5))
    shardgen.write_tar(str(d / "train-1.tar"), _records(5, 5))
    shardgen.write_tar(str(d / "val.tar"), _records(100, 4))
    shardgen.write_tar(str(d / "bad.tar"), _records(200, 8, bad=203))
    return d


def _convert(src, out, runner, *more, **kw):
    return cli(
        "convert",
        str(src),
        "-o",
        str(out),
        "--type-map",
        "cls:int64",
        "--no-progress",
        *DRIVERS[runner],
        *more,
        **kw,
    )


def _dataset(sources, d, runner):
    """ds/train (5 + 5) and ds/validation (4), both described."""
    for src, split in (("train-{0..1}.tar", "train"), ("val.tar", "validation")):
        p = _convert(
            sources / src, d / f"{split}.tfrecord", runner, "--records-per-shard", "5", "--tfds"
        )
        assert p.returncode == 0, p.stderr
    assert _described(d) == {"train": [5, 5], "validation": [4]}


def _described(d) -> dict:
    """split -> its shards' record counts, as dataset_info.json says."""
    with open(d / "dataset_info.json") as f:
        info = json.load(f)
    return {s["name"]: [int(n) for n in s["shardLengths"]] for s in info["splits"]}


def _on_disk(d) -> dict:
    """split -> the record counts of the shards its manifest names (those on disk)."""
    out = {}
    for m in sorted(glob.glob(str(d / "*.tfrecord.manifest.json"))):
        with open(m) as f:
            shards = json.load(f)["shards"]
        assert all(os.path.exists(s["path"]) for s in shards)
        out[os.path.basename(m).split(".")[0]] = [s["records"] for s in shards]
    return out


def _tfds_reads(d, splits) -> dict:
    import tensorflow_datasets as tfds

    b = tfds.builder_from_directory(str(d))
    assert sorted(b.info.splits) == sorted(splits)
    return {s: sum(1 for _ in b.as_dataset(split=s)) for s in splits}


@pytest.mark.parametrize("runner", sorted(DRIVERS))
def test_an_overwrite_that_ends_with_rejects_takes_its_split_out(sources, tmp_path, runner):
    """The issue's case: 5 + 5 described, then an --overwrite from an input with one bad
    record (exit 3) leaves shards of 5 + 2: the metadata must not say 5 + 5."""
    d = tmp_path / "ds"
    _dataset(sources, d, runner)
    p = _convert(
        sources / "bad.tar", d / "train.tfrecord", runner, "--records-per-shard", "5",
        "--tfds", "--overwrite",
    )  # fmt: skip
    assert p.returncode == 3, p.stderr
    assert _on_disk(d)["train"] == [5, 2]
    assert _described(d) == {"validation": [4]}  # train is not described: its shards changed
    assert _tfds_reads(d, ["validation"]) == {"validation": 4}
    # a job that succeeds describes the split again, with the shards on disk
    p = _convert(
        sources / "train-1.tar", d / "train.tfrecord", runner, "--records-per-shard", "2",
        "--tfds", "--overwrite",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert _described(d) == {"train": [2, 2, 1], "validation": [4]} == _on_disk(d)
    assert _tfds_reads(d, ["train", "validation"]) == {"train": 5, "validation": 4}


@pytest.mark.parametrize("runner", sorted(DRIVERS))
def test_an_overwrite_without_tfds_takes_its_split_out(sources, tmp_path, runner):
    d = tmp_path / "ds"
    _dataset(sources, d, runner)
    p = _convert(sources / "train-0.tar", d / "train.tfrecord", runner, "--overwrite")
    assert p.returncode == 0, p.stderr
    assert _described(d) == {"validation": [4]}
    # the last split replaced: no metadata is left to name its shards
    p = _convert(sources / "val.tar", d / "validation.tfrecord", runner, "--overwrite")
    assert p.returncode == 0, p.stderr
    assert not (d / "dataset_info.json").exists()


@pytest.mark.parametrize("runner", sorted(DRIVERS))
def test_a_killed_overwrite_leaves_no_metadata_naming_its_split(sources, tmp_path, runner):
    d = tmp_path / "ds"
    _dataset(sources, d, runner)
    job = background.start(
        *background.slow_convert(
            str(sources / "bad.tar"),
            str(d / "train.tfrecord"),
            *DRIVERS[runner],
            "--records-per-shard",
            "5",
            "--tfds",
            "--overwrite",
        ),  # fmt: skip
        env=background.slow_env("0.3"),
        session=True,
    )
    try:
        # the earlier manifest is gone: the replacement has begun
        background.wait_until(
            job, lambda: not (d / "train.tfrecord.manifest.json").exists(), "the replacement"
        )
    finally:
        if job.poll() is None:
            background.kill(job)
    assert _described(d) == {"validation": [4]}
    assert _tfds_reads(d, ["validation"]) == {"validation": 4}
