"""``--tfds`` adding a split whose features are a compatible subset of the dataset's: a
member that is rare in ``train`` (a ``.bmp`` in a few records: a variable-length vector
feature) and absent from ``test`` made ``test`` refused.  Such a split is now added,
declared (and read by TFDS) with the dataset's features; a real conflict (another dtype, a
scalar that would become optional, an Image that would be bytes) is still refused, saying
what differs and what to do."""

from __future__ import annotations

import pytest
from support import shardgen
from support.cli_fixtures import cli

from pipelines.export.tfds_compat import misfits


def _records(first, count, bmp=(), tags_len=None, cls_every=True):
    out = []
    for i in range(first, first + count):
        k = f"r{i:04d}"
        out.append((f"{k}.jpg", shardgen.jpeg(i, (16, 12))))
        if cls_every or i % 2:
            out.append((f"{k}.cls", str(i % 7).encode()))
        n = tags_len if tags_len is not None else i % 3 + 1
        out.append((f"{k}.tags", " ".join(str(i + j) for j in range(n)).encode()))
        if i in bmp:
            out.append((f"{k}.bmp", b"BM-%d" % i))
    return out


def _convert(src, out, *extra, type_map="cls:int64,tags:int64"):
    return cli("convert", str(src), "-o", str(out), "--type-map", type_map, "--tfds", *extra)


@pytest.fixture
def dataset(tmp_path):
    """A directory with split ``train``: 12 records, a .bmp in 3 of them, tags of 1-3 values."""
    src = tmp_path / "train.tar"
    shardgen.write_tar(str(src), _records(0, 12, bmp=(2, 5, 9)))
    d = tmp_path / "ds"
    r = _convert(src, d / "train.tfrecord")
    assert r.returncode == 0, r.stderr[-3000:]
    return d


def test_split_without_an_optional_member_is_added(dataset, tmp_path):
    import tensorflow_datasets as tfds

    src = tmp_path / "test.tar"
    # no .bmp at all, and exactly one tag in every record (a scalar in its own schema)
    shardgen.write_tar(str(src), _records(100, 5, tags_len=1))
    features = (dataset / "features.json").read_bytes()
    r = _convert(src, dataset / "test.tfrecord")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "split test (5 examples); splits: test, train" in r.stderr
    # declared with the dataset's features, which stay as they were
    assert (dataset / "features.json").read_bytes() == features
    b = tfds.builder_from_directory(str(dataset))
    assert b.info.splits["test"].num_examples == 5
    got = {ex["__key__"].decode(): ex for ex in tfds.as_numpy(b.as_dataset(split="test"))}
    assert sorted(got) == [f"r{i:04d}" for i in range(100, 105)]
    for i in range(100, 105):
        ex = got[f"r{i:04d}"]
        assert ex["bmp"].tolist() == []  # the rare member: an empty vector
        assert ex["tags"].tolist() == [i] and ex["cls"] == i % 7
    train = {ex["__key__"].decode(): ex for ex in tfds.as_numpy(b.as_dataset(split="train"))}
    assert [k for k, ex in sorted(train.items()) if ex["bmp"].tolist()] == [
        "r0002",
        "r0005",
        "r0009",
    ]


@pytest.mark.parametrize(
    "records, type_map, said",
    [
        # cls in only some records: the dataset's scalar would become optional
        (
            dict(cls_every=False),
            "cls:int64,tags:int64",
            "cls: int64, a vector of any length (or missing) here, int64, one value in "
            "every record there",
        ),
        # another dtype
        (
            {},
            "cls:float,tags:int64",
            "cls: float32, one value in every record here, int64, one value in every record there",
        ),
        # a vector the dataset has is bytes here
        (
            {},
            "cls:int64",
            "tags: bytes, one value in every record here, int64, a vector of any length "
            "(or missing) there",
        ),
    ],
)
def test_a_real_conflict_is_refused_with_what_to_do(dataset, tmp_path, records, type_map, said):
    src = tmp_path / "test.tar"
    shardgen.write_tar(str(src), _records(100, 6, tags_len=1, **records))
    before = (dataset / "dataset_info.json").read_bytes()
    r = _convert(src, dataset / "test.tfrecord", type_map=type_map)
    assert r.returncode == 1, r.stderr[-3000:]
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("tar2tf convert: --tfds: the features of split 'test' differ"), line
    assert said in line, line
    assert "convert this split with the --type-map, --tfds-image and --ops selections" in line
    assert (dataset / "dataset_info.json").read_bytes() == before


def test_misfits():
    def tensor(dtype, *dims):
        shape = {"dimensions": [str(d) for d in dims]} if dims else {}
        return {"tensor": {"dtype": dtype, "shape": shape}}

    def features(**leaves):
        return {"featuresDict": {"features": leaves}}

    image = {"pythonClassName": "tensorflow_datasets.core.features.image_feature.Image"}
    ds = features(a=tensor("int64"), v=tensor("int64", -1), n=features(b=tensor("string", -1)))
    # a subset: vectors missing, or holding a scalar or a fixed number of values
    assert misfits(ds, features(a=tensor("int64"))) == []
    assert misfits(ds, features(a=tensor("int64"), v=tensor("int64", 3))) == []
    assert misfits(ds, features(a=tensor("int64"), n=features(b=tensor("string")))) == []
    # conflicts
    assert misfits(ds, features(v=tensor("int64"))) == [
        "a: missing from every record here, int64, one value in every record there"
    ]
    assert misfits(ds, features(a=image, x=tensor("float32"))) == [
        "a: an Image here, int64, one value in every record there",
        "x: not a feature of the dataset",
    ]
