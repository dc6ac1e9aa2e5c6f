"""``--tfds`` against hostile input: members behind ``--tfds-image`` that TFDS cannot
decode, and damaged metadata already in the output's directory.  Each output is read back
with the real ``tensorflow_datasets``."""

from __future__ import annotations

import json

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
