"""``--tfds`` against hostile input: members behind ``--tfds-image`` that TFDS cannot
decode, and damaged metadata already in the output's directory.  Each output is read back
with the real ``tensorflow_datasets``."""

from __future__ import annotations

import json
import os

import pytest
from support import shardgen, tfds_images
from support.cli_fixtures import cli

#: the members TFDS cannot decode as an H x W x 3 image, one per bad record
BAD = ("text", "jpeg-truncated", "gif", "webp", "jpeg-huge-header", "bmp-1")


def hostile_tar(path) -> dict:
    """A shard of 4 good image records and one record per :data:`BAD` case, interleaved;
    returns key -> the case of each bad record."""
    cases = tfds_images.cases()
    kinds = ["good", *BAD[:4], "good", "good", *BAD[4:], "good"]
    members, bad = [], {}
    for i, kind in enumerate(kinds):
        key = f"r{i:03d}"
        if kind == "good":
            jpg = shardgen.jpeg(i, (32, 24))
        else:
            bad[key], jpg = kind, cases[kind]
        members += [(f"{key}.jpg", jpg), (f"{key}.cls", str(i % 10).encode())]
    shardgen.write_tar(str(path), members)
    return bad


def read_split(directory, split="train"):
    """key -> decoded image of every record of ``split``, read as TFDS reads it."""
    import tensorflow_datasets as tfds

    b = tfds.builder_from_directory(str(directory))
    out = {}
    for ex in tfds.as_numpy(b.as_dataset(split=split)):
        out[ex["__key__"].decode()] = ex["jpg"]
    assert len(out) == b.info.splits[split].num_examples
    return out


def rejects_of(output) -> dict:
    with open(str(output) + ".rejects.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return {r["key"]: r for r in rows}


@pytest.mark.parametrize("runner", ["local", pytest.param("beam", marks=pytest.mark.slow)])
def test_members_tfds_cannot_decode_are_rejects(tmp_path, runner):
    """Each record whose jpg TFDS cannot decode (text, a truncated JPEG, a GIF or WebP named
    .jpg, a header far beyond the pixel bound, a 1-bit BMP) is an op reject naming why,
    on both drivers; every other record is written and the split reads whole."""
    bad = hostile_tar(tmp_path / "in-0.tar")
    out = tmp_path / "ds" / "train.tfrecord"
    r = cli(
        "convert",
        str(tmp_path / "in-0.tar"),
        "-o",
        str(out),
        "--type-map",
        "cls:int64",
        "--tfds",
        "--tfds-image",
        "jpg",
        "--max-rejects",
        str(len(BAD)),
        "--runner",
        runner,
    )
    assert r.returncode == 0, r.stderr
    rejects = rejects_of(out)
    assert set(rejects) == set(bad)
    for row in rejects.values():
        assert row["stage"] == "op", row
        assert row["reason"].startswith("TfdsImage('jpg') failed: ImageError: "), row
    assert "unsupported image format GIF" in rejects[_key(bad, "gif")]["reason"]
    assert "not an image" in rejects[_key(bad, "text")]["reason"]
    assert "corrupt JPEG image" in rejects[_key(bad, "jpeg-truncated")]["reason"]
    got = read_split(out.parent)
    assert len(got) == 4 and not set(got) & set(bad)
    assert all(img.shape == (24, 32, 3) for img in got.values())


def _key(bad, case):
    return next(k for k, c in bad.items() if c == case)


def test_without_room_for_the_rejects_no_metadata(tmp_path):
    """With the default --max-rejects 0 the job exits 3 and writes no metadata, as for any
    other reject: TFDS never describes a split it would fail on."""
    hostile_tar(tmp_path / "in-0.tar")
    out = tmp_path / "ds" / "train.tfrecord"
    r = cli("convert", str(tmp_path / "in-0.tar"), "-o", str(out), "--tfds", "--tfds-image", "jpg")
    assert r.returncode == 3, r.stderr
    assert f"{len(BAD)} rejects > --max-rejects 0" in r.stderr.strip().splitlines()[-1]
    assert not (out.parent / "dataset_info.json").exists()


def test_python_api_rejects_them_too(tmp_path):
    """``load(path=..., tfds=True, tfds_image=["value"])`` checks the stored image the same
    way (after the selections: the feature TFDS decodes is ``value``)."""
    from pipelines import Dataset
    from transforms.ops import Select

    bad = hostile_tar(tmp_path / "in-0.tar")
    out = tmp_path / "api" / "train.tfrecord"
    Dataset(str(tmp_path), selections=[Select("jpg"), Select("cls")]).load(
        "in-0.tar",
        path=str(out),
        type_map={"label": "int64"},
        max_rejects=len(BAD),
        tfds=True,
        tfds_image=["value"],
    )
    rejects = rejects_of(out)
    assert set(rejects) == set(bad)
    assert all(row["reason"].startswith("TfdsImage('value') failed") for row in rejects.values())
    import tensorflow_datasets as tfds

    b = tfds.builder_from_directory(str(out.parent))
    keys = [ex["__key__"] for ex in tfds.as_numpy(b.as_dataset(split="train"))]
    assert len(keys) == 4


# -- damaged metadata beside the output ----------------------------------------------------


@pytest.fixture(scope="module")
def one_split(tmp_path_factory):
    """A dataset directory holding split ``train`` (and its metadata), and a source shard
    for another split."""
    d = tmp_path_factory.mktemp("tfds-damaged")
    shardgen.write_tar(str(d / "in-0.tar"), shardgen.sample_members(0, 4, (32, 24)))
    r = cli("convert", str(d / "in-0.tar"), "-o", str(d / "ds" / "train.tfrecord"), "--tfds")
    assert r.returncode == 0, r.stderr
    return d


def _damage(ds, name, how):
    path = ds / name
    path.unlink()
    if how == "/dev/zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_text(how)


@pytest.mark.parametrize(
    "name, how, why",
    [
        ("features.json", "[1, 2", None),
        ("features.json", "/dev/zero", "not a regular file"),
        ("features.json", "[1, 2]", "a JSON list, not an object"),
        ("dataset_info.json", "not json", None),
        ("dataset_info.json", "{}", "it names no splits"),
        ("dataset_info.json", '{"splits": [{"name": "train", "shardLengths": "x"}]}', "Failed"),
        ("dataset_info.json", "/dev/zero", "not a regular file"),
    ],
)
def test_damaged_metadata_is_one_line_naming_the_file(one_split, tmp_path, name, how, why):
    """Metadata there that cannot be read as TFDS metadata: exit 1, one line naming the
    file and why (None: the JSON parser's own words); the damaged file is left as it was and
    split ``train`` is never dropped from it (``{}`` was read as a dataset of no splits, and
    written over)."""
    import shutil

    if why is None:
        with pytest.raises(ValueError) as parsed:
            json.loads(how)
        why = f"(not JSON: {parsed.value})"

    ds = tmp_path / "ds"
    shutil.copytree(one_split / "ds", ds, symlinks=True)
    _damage(ds, name, how)
    before = {
        n: os.readlink(ds / n) if (ds / n).is_symlink() else (ds / n).read_bytes()
        for n in (
            "dataset_info.json",
            "features.json",
        )
    }
    r = cli("convert", str(one_split / "in-0.tar"), "-o", str(ds / "validation.tfrecord"), "--tfds")
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"tar2tf convert: --tfds: {ds / name} is not TFDS metadata ("), last
    assert why in last and "this split was not added" in last, last
    after = {
        n: os.readlink(ds / n) if (ds / n).is_symlink() else (ds / n).read_bytes()
        for n in (
            "dataset_info.json",
            "features.json",
        )
    }
    assert after == before
    assert (ds / "validation.tfrecord.manifest.json").exists()  # the shards themselves stay


def test_damaged_metadata_in_the_python_api(one_split, tmp_path):
    import shutil

    from pipelines import Dataset
    from transforms.ops import Select

    ds = tmp_path / "ds"
    shutil.copytree(one_split / "ds", ds, symlinks=True)
    _damage(ds, "dataset_info.json", "{}")
    with pytest.raises(ValueError, match=r"dataset_info.json is not TFDS metadata \(it names no"):
        Dataset(str(one_split), selections=[Select("jpg"), Select("cls")]).load(
            "in-0.tar", path=str(ds / "validation.tfrecord"), tfds=True
        )
    assert (ds / "dataset_info.json").read_text() == "{}"
