"""``Dataset.load(path=...)`` with a path spelt as bytes (or a generator yielding bytes):
a file name decoded as the file system does, never an iterable of names (the bytes of
``b"out/x-{}.record"`` iterated are the integers 111, 117, ...)."""

from __future__ import annotations

import os

import pytest

from pipelines import Dataset
from transforms.ops import Decode, Resize
from transforms.tfrecord.framing import read_records

TEMPLATE = "train-{0000..0001}.tar"


@pytest.fixture()
def dataset(api_shards, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a name made of one byte's value would appear
    return Dataset(api_shards, None, [Decode("jpg"), Resize("jpg", (16, 16))])


def test_bytes_path_is_a_file_name(dataset, tmp_path):
    out = os.fsencode(str(tmp_path / "b" / "x-{}.record"))
    paths = dataset.load(TEMPLATE, path=out, remote_exec=False)
    assert paths == [str(tmp_path / "b" / "x-1.record")]
    assert sum(1 for _ in read_records(paths[0])) == 12
    assert sorted(os.listdir(tmp_path)) == ["b"]  # no '111' (nor any other) in the cwd


def test_non_utf8_bytes_keep_their_bytes(dataset, tmp_path):
    """A name that is not UTF-8 is the file whose name has those bytes (``os.fsdecode``)."""
    raw = os.fsencode(str(tmp_path)) + b"/caf\xe9-{}.record"
    paths = dataset.load(TEMPLATE, path=raw, remote_exec=False)
    assert [os.fsencode(p) for p in paths] == [raw.replace(b"{}", b"1")]
    assert os.path.exists(raw.replace(b"{}", b"1"))


def test_a_generator_of_bytes_names(dataset, tmp_path):
    names = [os.fsencode(str(tmp_path / f"g{i}.record")) for i in range(2)]
    paths = dataset.load(TEMPLATE, path=iter(names), remote_exec=False)
    assert paths == [str(tmp_path / "g0.record")]
    assert sum(1 for _ in read_records(paths[0])) == 12
    assert not any(n.startswith("b'") for n in os.listdir(tmp_path))


def test_tfds_with_a_bytes_path(api_shards, tmp_path):
    """``tfds=True`` takes the same bytes path (its split name read from the decoded name)."""
    from transforms.ops import Select

    out = os.fsencode(str(tmp_path / "ds" / "train.tfrecord"))
    ds = Dataset(api_shards, selections=[Select("jpg"), Select("cls")])
    paths = ds.load("train-0000.tar", path=out, tfds=True, remote_exec=False)
    assert paths == [str(tmp_path / "ds" / "train-00000-of-00001.tfrecord")]
    assert (tmp_path / "ds" / "dataset_info.json").exists()
