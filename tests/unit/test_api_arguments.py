"""The Python API checks its arguments when its objects are built (``ConvertConfig``,
``Dataset``, ``load``, the ops), as the CLI's parser does: a value of the wrong type is a
``TypeError``, one out of range a ``ValueError``, each naming the argument -- not a job
that fails late with an unrelated error, or rejects every record."""

from __future__ import annotations

import os

import pytest

from pipelines import Dataset
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from transforms.ops import Convert, Decode, Encode, Resize, Rotate, SelectJSON
from transforms.stores import StoreConfig


@pytest.mark.parametrize(
    "option, value, error, says",
    [
        ("records_per_shard", 2.5, TypeError, "records_per_shard must be an integer, not 2.5"),
        ("records_per_shard", "3", TypeError, "records_per_shard must be an integer, not '3'"),
        ("records_per_shard", True, TypeError, "records_per_shard must be an integer"),
        ("records_per_shard", 0, ValueError, "records_per_shard must be >= 1, got 0"),
        ("max_rejects", -1, ValueError, "max_rejects must be >= 0, got -1"),
        ("max_rejects", None, TypeError, "max_rejects must be an integer, not None"),
        ("processes", 100000, ValueError, "processes must be 0..256, got 100000"),
        ("max_image_pixels", 0, ValueError, "max_image_pixels must be >= 1, got 0"),
        ("max_member_size", 0, ValueError, "max_member_size: size must be positive, got 0"),
        ("max_member_size", None, TypeError, "max_member_size must be a byte size, not None"),
        ("max_shard_size", "lots", ValueError, "max_shard_size: invalid size 'lots'"),
        ("max_record_size", 2.5, ValueError, "max_record_size: invalid size '2.5': not a whole"),
        ("max_record_size", [1], TypeError, "max_record_size must be a byte size"),
        ("spool_limit", "-1MB", ValueError, "spool_limit: "),
        ("seed", "7", TypeError, "seed must be an integer"),
        ("type_map", "cls", ValueError, "type map entry 'cls' is not name:type"),
        ("sources", 5, TypeError, "sources must be a shard template (str) or a list of them"),
        ("sources", [b"x.tar"], TypeError, "sources must be a shard template"),
        ("output", None, TypeError, "output must be a file name or template (str), not None"),
        ("sample_stages", [5], TypeError, "sample_stages[0]: a stage must be callable"),
        ("sample_stages", "jpg", TypeError, "sample_stages must be a list of callables"),
        ("example_stages", [None], TypeError, "example_stages[0]: a stage must be callable"),
        ("record_to_example", 5, TypeError, "record_to_example must be callable, not 5"),
        ("store", {"retry_attempts": 2}, TypeError, "store must be a StoreConfig"),
    ],
)
def test_convert_config_refuses_when_built(option, value, error, says):
    kw = dict(sources="in-{0..1}.tar", output="out/t-{}.record")
    kw[option] = value
    with pytest.raises(error) as got:
        ConvertConfig(**kw)
    assert says in str(got.value)


def test_convert_config_takes_what_the_cli_takes(tmp_path):
    """The values the CLI accepts, and path objects, build a config as before."""
    cfg = ConvertConfig(
        sources=[str(tmp_path / "a.tar")],
        output=tmp_path / "t-{}.record",
        records_per_shard=3,
        max_shard_size=1e6,
        max_member_size=1 << 20,
        max_rejects=0,
        processes=0,
        seed=-1,
        type_map={"cls": "int64"},
        store=StoreConfig(),
    )
    assert cfg.output == str(tmp_path / "t-{}.record")
    assert cfg.describe()["max_shard_size"] == 1_000_000
    assert ConvertConfig(sources=tmp_path / "a.tar", output="o").sources == str(tmp_path / "a.tar")


@pytest.mark.parametrize(
    "kw, error, says",
    [
        (dict(bucket_or_source=None), TypeError, "bucket_or_source must be a bucket name"),
        (dict(bucket_or_source=5), TypeError, "bucket_or_source must be a bucket name"),
        (dict(conversions=[5]), TypeError, "conversions[0] must be an op"),
        (dict(conversions=Decode("jpg")), TypeError, "conversions must be a list of ops"),
        (dict(beam_args="--runner=FlinkRunner"), TypeError, "beam_args must be a list of str"),
        (dict(max_member_size=0), ValueError, "max_member_size: size must be positive"),
        (dict(seed=1.5), TypeError, "seed must be an integer"),
        (dict(remote_exec="yes"), TypeError, "remote_exec must be None, True or False"),
        (dict(store="ais://x"), TypeError, "store must be a StoreConfig"),
        (dict(proxy_url=8080), TypeError, "proxy_url must be an AIStore URL"),
    ],
)
def test_dataset_refuses_when_built(tmp_path, kw, error, says):
    kw = dict(dict(bucket_or_source=str(tmp_path)), **kw)
    with pytest.raises(error) as got:
        Dataset(**kw)
    assert says in str(got.value)


def test_load_refuses_before_it_writes(tmp_path):
    """A bad template or option of ``load`` fails before any file is written."""
    ds = Dataset(str(tmp_path))
    for template in (5, None, [], [5]):
        with pytest.raises(TypeError, match="template must be a shard template"):
            ds.load(template, path=str(tmp_path / "o" / "t-{}.record"))
        with pytest.raises(TypeError, match="template must be a shard template"):
            ds.elements(template)
    with pytest.raises(TypeError, match="records_per_shard must be an integer, not 2.5"):
        ds.load("x-{0..1}.tar", path=str(tmp_path / "o" / "t-{}.record"), records_per_shard=2.5)
    with pytest.raises(ValueError, match="max_rejects must be >= 0, got -1"):
        ds.load("x-{0..1}.tar", path=str(tmp_path / "o" / "t-{}.record"), max_rejects=-1)
    assert not os.path.exists(tmp_path / "o")


@pytest.mark.parametrize(
    "make",
    [
        lambda: Decode(5),
        lambda: Convert(None, "float32"),
        lambda: Resize(b"jpg", (8, 8)),
        lambda: Rotate(3.5),
        lambda: Encode(["jpg"]),
        lambda: SelectJSON(0, "a"),
    ],
)
def test_ops_refuse_an_input_that_is_no_entry_nor_op(make):
    with pytest.raises(TypeError, match=r"takes an extension name \(such as 'jpg'\) or an op"):
        make()
    Resize(Decode("jpg"), (8, 8))  # an op as the input, as before
