"""``--tfds`` / ``load(..., tfds=True)``: TensorFlow Datasets loads tar2tf's output.

Every check reads the output with the real ``tensorflow_datasets`` (``builder_from_directory``,
``as_dataset``) and compares every record with the source tars, byte for byte.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tarfile
import time

import pytest
from support import shardgen
from support.cli_fixtures import ROOT, cli

from pipelines.export import tfds as tx
from pipelines.export import tfds_features as tf_features

TYPE_MAP = "cls:int64,score:float,emb:int64,tags:int64"


def members(first: int, count: int):
    """Records with every kind of feature: an image, a label, raw bytes (no UTF-8), a float,
    a fixed-length list, a list whose length varies, and a member only even records have."""
    out = []
    for i in range(first, first + count):
        k = f"r{i:05d}"
        out += [
            (f"{k}.jpg", shardgen.jpeg(i, (32, 24))),
            (f"{k}.cls", str(i % 10).encode()),
            (f"{k}.txt", b"\xff\x00raw %d" % i),
            (f"{k}.score", str(i / 4).encode()),
            (f"{k}.emb", f"{i} {i + 1} {-i}".encode()),
            (f"{k}.tags", " ".join(str(j) for j in range(i % 3 + 1)).encode()),
        ]
        if i % 2 == 0:
            out.append((f"{k}.meta", b"m%d" % i))
    return out


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """``train-{0..2}.tar`` (8 records each) and ``val-{0..1}.tar`` (5 each)."""
    d = tmp_path_factory.mktemp("tfds-src")
    for s in range(3):
        shardgen.write_tar(str(d / f"train-{s}.tar"), members(s * 8, 8))
    for s in range(2):
        shardgen.write_tar(str(d / f"val-{s}.tar"), members(100 + s * 5, 5))
    return d


def source_records(paths):
    """key -> {ext: bytes} from tar files, in order."""
    out = {}
    for p in paths:
        with tarfile.open(p) as t:
            for m in t.getmembers():
                key, ext = m.name.split(".", 1)
                out.setdefault(key, {})[ext] = t.extractfile(m).read()
    return out


def ints(b: bytes):
    return [int(x) for x in b.split()]


def check_split(builder, split: str, expected, image: bool = False):
    """Every record of ``split`` equals its source record; returns the records read."""
    import numpy as np
    import tensorflow_datasets as tfds

    assert builder.info.splits[split].num_examples == len(expected)
    decoders = {"jpg": tfds.decode.SkipDecoding()} if image else None
    got = {}
    for ex in tfds.as_numpy(builder.as_dataset(split=split, decoders=decoders)):
        key = ex["__key__"].decode()
        assert key not in got, f"{key} read twice"
        got[key] = ex
    assert sorted(got) == sorted(expected)
    for key, src in expected.items():
        ex = got[key]
        assert ex["jpg"] == src["jpg"]
        assert ex["txt"] == src["txt"]
        assert ex["cls"] == int(src["cls"]) and ex["cls"].dtype == np.int64
        assert ex["score"] == float(src["score"]) and ex["score"].dtype == np.float32
        assert ex["emb"].tolist() == ints(src["emb"]) and ex["emb"].shape == (3,)
        assert ex["tags"].tolist() == ints(src["tags"])
        # a member only some records have: an empty vector where it is missing
        assert ex["meta"].tolist() == ([src["meta"]] if "meta" in src else [])
    return got


def convert(*args, **kw):
    return cli("convert", *args, **kw)


def run_cli(*args, **kw):
    r = convert(*args, **kw)
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.slow  # four jobs, one on Beam's local runner
def test_two_splits_from_two_jobs(sources, tmp_path):
    """train and validation from two jobs (the in-process driver and Beam's runner) into one
    directory: both splits, their counts and every byte and label."""
    import tensorflow_datasets as tfds

    d = tmp_path / "ds"
    r = run_cli(
        str(sources / "train-{0..2}.tar"),
        "-o",
        str(d / "train.tfrecord"),
        "--records-per-shard",
        "5",
        "--type-map",
        TYPE_MAP,
        "--tfds",
    )
    assert "tfds: " in r.stderr and "split train (24 examples)" in r.stderr
    run_cli(
        str(sources / "val-{0..1}.tar"),
        "-o",
        str(d / "validation.tfrecord"),
        "--records-per-shard",
        "4",
        "--type-map",
        TYPE_MAP,
        "--tfds",
        "--runner",
        "beam",
    )
    b = tfds.builder_from_directory(str(d))
    assert sorted(b.info.splits) == ["train", "validation"]
    assert b.info.splits["train"].num_shards == 5
    assert b.info.splits["validation"].num_shards == 3
    for split, srcs in (("train", "train-{}.tar"), ("validation", "val-{}.tar")):
        n = 3 if split == "train" else 2
        expected = source_records([sources / srcs.format(s) for s in range(n)])
        check_split(b, split, expected)
    # the features, typed from the manifest's schema
    f = b.info.features
    assert {k: (tuple(f[k].shape), f[k].np_dtype.name) for k in f} == {
        "__key__": ((), "object"),
        "cls": ((), "int64"),
        "emb": ((3,), "int64"),
        "jpg": ((), "object"),
        "meta": ((None,), "object"),
        "score": ((), "float32"),
        "tags": ((None,), "int64"),
        "txt": ((), "object"),
    }
    # TFDS's own split expressions work on tar2tf's shards
    assert len(list(b.as_dataset(split="train[:10]+validation[-3:]"))) == 13
    with open(d / "dataset_info.json") as fh:
        info = json.load(fh)
    assert [s["filepathTemplate"] for s in info["splits"]] == [tx.FILE_TEMPLATE] * 2
    # a split converted again replaces its own entry, keeping the other
    run_cli(
        str(sources / "val-0.tar"),
        "-o",
        str(d / "validation.tfrecord"),
        "--type-map",
        TYPE_MAP,
        "--tfds",
        "--overwrite",
    )
    b = tfds.builder_from_directory(str(d))
    assert {s: b.info.splits[s].num_examples for s in b.info.splits} == {
        "train": 24,
        "validation": 5,
    }
    check_split(b, "validation", source_records([sources / "val-0.tar"]))


def _waits_on_lock(pid: int) -> bool:
    """Whether process ``pid`` is blocked on a flock (a ``->`` line of /proc/locks)."""
    with open("/proc/locks") as f:
        return any("->" in ln and "FLOCK" in ln and f" {pid} " in ln for ln in f)


def _popen(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.Popen(
        [sys.executable, "-m", "launch.cli", "convert", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_second_split_waits_for_the_metadata_lock(sources, tmp_path):
    """A job adding its split while another holds the metadata lock waits for it, then adds
    its split to what the other wrote."""
    import tensorflow_datasets as tfds

    d = tmp_path / "ds"
    run_cli(
        str(sources / "train-0.tar"),
        "-o",
        str(d / "train.tfrecord"),
        "--type-map",
        TYPE_MAP,
        "--tfds",
    )
    fd = os.open(d / tx.LOCK_NAME, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a concurrent job's update holds it
    try:
        p = _popen(
            str(sources / "val-0.tar"),
            "-o",
            str(d / "val.tfrecord"),
            "--type-map",
            TYPE_MAP,
            "--tfds",
        )
        deadline = time.monotonic() + 300
        while not _waits_on_lock(p.pid):
            assert p.poll() is None, (
                f"the job ended without waiting for the lock: {p.stderr.read()}"
            )
            assert time.monotonic() < deadline, "the job never waited for the lock"
            time.sleep(0.2)
        # the job has converted its split and waits: the metadata still has the first only
        assert (d / "val.tfrecord.manifest.json").exists()
        assert tfds.builder_from_directory(str(d)).info.splits.keys() == {"train"}
    finally:
        os.close(fd)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    b = tfds.builder_from_directory(str(d))
    assert {s: b.info.splits[s].num_examples for s in b.info.splits} == {"train": 8, "val": 5}
    check_split(b, "val", source_records([sources / "val-0.tar"]))


def test_concurrent_jobs_write_one_split_each(sources, tmp_path):
    """Two jobs started together into one directory: both splits end up in the metadata."""
    import tensorflow_datasets as tfds

    d = tmp_path / "ds"
    d.mkdir()
    jobs = {
        split: _popen(
            str(sources / src), "-o", str(d / f"{split}.tfrecord"), "--type-map", TYPE_MAP, "--tfds"
        )
        for split, src in (("train", "train-1.tar"), ("test", "val-1.tar"))
    }
    for p in jobs.values():
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    b = tfds.builder_from_directory(str(d))
    assert {s: b.info.splits[s].num_examples for s in b.info.splits} == {"train": 8, "test": 5}
    check_split(b, "train", source_records([sources / "train-1.tar"]))
    check_split(b, "test", source_records([sources / "val-1.tar"]))


def test_image_feature(sources, tmp_path):
    """--tfds-image jpg: TFDS decodes the JPEG (the stored bytes stay the source's); a split
    whose features differ from those already there is refused in one line."""
    import tensorflow as tf
    import tensorflow_datasets as tfds

    d = tmp_path / "ds"
    run_cli(
        str(sources / "train-2.tar"),
        "-o",
        str(d / "train.tfrecord"),
        "--type-map",
        TYPE_MAP,
        "--tfds",
        "--tfds-image",
        "jpg",
    )
    b = tfds.builder_from_directory(str(d))
    assert isinstance(b.info.features["jpg"], tfds.features.Image)
    expected = source_records([sources / "train-2.tar"])
    check_split(b, "train", expected, image=True)  # bytes exact, without decoding
    n = 0
    for ex in tfds.as_numpy(b.as_dataset(split="train")):
        src = expected[ex["__key__"].decode()]["jpg"]
        want = tf.io.decode_image(src, channels=3).numpy()
        assert ex["jpg"].dtype.name == "uint8" and ex["jpg"].shape == (24, 32, 3)
        assert (ex["jpg"] == want).all()
        n += 1
    assert n == 8
    # the same dataset without the Image feature: refused, the metadata unchanged
    before = (d / "dataset_info.json").read_bytes()
    r = convert(
        str(sources / "val-0.tar"), "-o", str(d / "test.tfrecord"), "--type-map", TYPE_MAP, "--tfds"
    )
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("tar2tf convert: --tfds: the features of split 'test' differ")
    assert "(jpg: bytes, one value in every record here, an Image there)" in lines[-1]
    assert "--tfds-image" in lines[-1] and "Traceback" not in r.stderr
    assert (d / "dataset_info.json").read_bytes() == before


def test_python_api(sources, tmp_path):
    """Dataset(...).load(path=..., tfds=True): the API's stored layout (value, label)."""
    import tensorflow_datasets as tfds

    from pipelines import Dataset
    from transforms.ops import Select

    ds = Dataset(str(sources), selections=[Select("jpg"), Select("cls")])
    out = tmp_path / "ds" / "train.tfrecord"
    paths = ds.load(
        "train-{0..1}.tar",
        path=str(out),
        type_map={"label": "int64"},
        records_per_shard=6,
        tfds=True,
        tfds_image=["value"],
    )
    assert len(paths) == 3
    b = tfds.builder_from_directory(str(out.parent))
    assert b.info.splits["train"].num_examples == 16
    expected = source_records([sources / "train-0.tar", sources / "train-1.tar"])
    got = {}
    for ex in tfds.as_numpy(
        b.as_dataset(split="train", decoders={"value": tfds.decode.SkipDecoding()})
    ):
        got[ex["__key__"].decode()] = (ex["value"], int(ex["label"]))
    assert got == {k: (v["jpg"], int(v["cls"])) for k, v in expected.items()}
    with pytest.raises(ValueError, match="tfds_image needs tfds=True"):
        ds.load("train-0.tar", path=str(out), tfds_image=["value"])
    with pytest.raises(ValueError, match="<split>.tfrecord"):
        ds.load("train-0.tar", path=str(tmp_path / "x-{}.tfrecord"), tfds=True)
    assert not (tmp_path / "x-1.tfrecord").exists()


@pytest.mark.parametrize(
    "output, extra, said",
    [
        ("out/train-{}.tfrecord", (), "needs an output named <split>.tfrecord"),
        ("out/train.record", (), "needs an output named <split>.tfrecord"),
        ("gs://bucket/train.tfrecord", (), "local directory only, not to gs://"),
        ("out/all.tfrecord", (), "cannot be a TFDS split name"),
        ("out/.tfrecord", (), "cannot be a TFDS split name"),
        ("out/train.tfrecord", ("--tfds-image", "cls", "--type-map", "cls:int64"), "types it"),
        ("out/train.tfrecord", ("--tfds-image", "jpg:2"), "channels must be one of"),
    ],
)
def test_refused_before_the_job(sources, tmp_path, output, extra, said):
    """Outputs TFDS cannot load: exit 2, one line, nothing written (not even the directory)."""
    out = output if "://" in output else str(tmp_path / output)
    r = convert(str(sources / "train-0.tar"), "-o", out, "--tfds", *extra)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and said in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_image_option_needs_tfds(sources, tmp_path):
    r = convert(
        str(sources / "train-0.tar"), "-o", str(tmp_path / "t.tfrecord"), "--tfds-image", "jpg"
    )
    assert r.returncode == 2 and r.stderr.strip() == "tar2tf convert: --tfds-image needs --tfds"


# -- the mapping, without TensorFlow ------------------------------------------------------


def test_feature_specs_mapping():
    schema = {
        "__key__": {"dtype": "bytes", "shape": [1]},
        "cls": {"dtype": "int64", "shape": [1]},
        "emb": {"dtype": "float", "shape": [4]},
        "tags": {"dtype": "int64", "shape": [-1]},
        "meta": {"dtype": "bytes", "shape": [1], "optional": True},
        "empty": {"dtype": "int64", "shape": [0]},
        "img": {"dtype": "bytes", "shape": [1]},
        "value.a/x": {"dtype": "float", "shape": [1]},
    }
    specs = tf_features.feature_specs(schema, "img:1")
    assert specs == {
        "__key__": ("tensor", "bytes", ()),
        "cls": ("tensor", "int64", ()),
        "emb": ("tensor", "float", (4,)),
        "tags": ("tensor", "int64", (None,)),
        "meta": ("tensor", "bytes", (None,)),
        "empty": ("tensor", "int64", (None,)),
        "img": ("image", 1),
        "value.a/x": ("tensor", "float", ()),
    }
    assert tf_features.nest(specs)["value.a"] == {"x": ("tensor", "float", ())}


@pytest.mark.parametrize(
    "schema, image, said",
    [
        ({"a": {"dtype": "mixed", "shape": [1]}}, None, "several types"),
        (
            {
                "jpg": {"dtype": "bytes", "shape": [1]},
                "jpg/shape": {"dtype": "int64", "shape": [3]},
                "jpg/dtype": {"dtype": "bytes", "shape": [1]},
            },
            None,
            "is an array",
        ),
        ({"cls": {"dtype": "int64", "shape": [1]}}, "jpg", "no such feature"),
        ({"cls": {"dtype": "int64", "shape": [1]}}, "cls", "one encoded image"),
        ({"jpg": {"dtype": "bytes", "shape": [1], "optional": True}}, "jpg", "missing from some"),
    ],
)
def test_feature_specs_refusals(schema, image, said):
    with pytest.raises(tx.TfdsError, match=said):
        tf_features.feature_specs(schema, image)


def test_nesting_clash():
    with pytest.raises(tx.TfdsError, match="nesting"):
        tf_features.nest({"a": ("tensor", "bytes", ()), "a/b": ("tensor", "bytes", ())})
    with pytest.raises(tx.TfdsError, match="nesting"):
        tf_features.nest({"a//b": ("tensor", "bytes", ())})


def test_split_names():
    assert tx.check_output("d/train.tfrecord") == "train"
    assert tx.check_output("file:///d/val-2.tfrecord") == "val-2"
    for bad in ("d/-x.tfrecord", "d/a.b.tfrecord", "d/é.tfrecord", "d/train.tfrecord.gz"):
        with pytest.raises(tx.TfdsError):
            tx.check_output(bad)


def test_dataset_identity():
    """The dataset's name and version from its directory (TFDS's <name>/<version> layout)."""
    assert tx.identity("/data/ImageNet-1k") == ("imagenet_1k", "1.0.0")
    assert tx.identity("/data/imagenet/2.1.0") == ("imagenet", "2.1.0")
    assert tx.identity("/data/1k") == ("tar2tf_1k", "1.0.0")


def test_no_metadata_for_a_failed_job(tmp_path):
    """Rejects beyond --max-rejects (exit 3): the shards are written, TFDS's metadata is not,
    so that TFDS never describes a job that failed; the same in the Python API."""
    from pipelines import Dataset

    src = tmp_path / "bad-0.tar"
    shardgen.write_tar(str(src), members(0, 3) + [("r00009.cls", b"not a number")])
    d = tmp_path / "ds"
    r = convert(str(src), "-o", str(d / "train.tfrecord"), "--type-map", TYPE_MAP, "--tfds")
    assert r.returncode == 3, r.stderr
    assert (d / "train.tfrecord.manifest.json").exists()
    assert not (d / "dataset_info.json").exists() and "tfds:" not in r.stderr
    # the API's default selections write value and label: cls (the label) is what is typed
    with pytest.raises(ValueError, match="metadata not written: 1 rejects"):
        Dataset(str(tmp_path)).load(
            "bad-0.tar",
            path=str(tmp_path / "api" / "train.tfrecord"),
            type_map="cls:int64",
            tfds=True,
        )
    assert not (tmp_path / "api" / "dataset_info.json").exists()
