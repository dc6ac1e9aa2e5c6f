"""Example encoding (type map, arrays, schema) and template resolution."""

import os

import numpy as np
import pytest

from transforms.record_types import Reject
from transforms.sizes import parse_size
from transforms.stores import LocalStore
from transforms.tar.sources import expand_braces, resolve
from transforms.tfrecord.example import EncodeError, encode_record, parse_example, record_to_example
from transforms.tfrecord.schema import merge_schema, parse_type_map, schema_of


def test_type_map_parsing_and_values():
    tm = parse_type_map("cls:int64, score:float,jpg:bytes")
    assert tm == {"cls": "int64", "score": "float", "jpg": "bytes"}
    rec = {"__key__": "k", "__shard__": "s", "cls": b" 42\n", "score": b"0.5", "jpg": b"\xff\xd8"}
    back = parse_example(encode_record(rec, tm))
    assert back == {"__key__": "k", "cls": 42, "score": 0.5, "jpg": b"\xff\xd8"}
    assert (
        parse_example(encode_record({"__key__": "k", "cls": b"-7"}, {"cls": "int64"}))["cls"] == -7
    )
    with pytest.raises(EncodeError, match="does not fit"):
        encode_record({"__key__": "k", "cls": b"seven"}, tm)
    with pytest.raises(EncodeError, match="does not fit"):
        encode_record({"__key__": "k", "cls": b"1.5"}, tm)
    with pytest.raises(ValueError):
        parse_type_map("cls:complex")
    for bad, why in (
        (":int64", "must be a feature name"),
        ("__key__:int64", "must be a feature name"),
        ("cls:int64,cls:float", "names 'cls' twice"),
    ):
        with pytest.raises(ValueError, match=why):
            parse_type_map(bad)


def test_arrays_round_trip_and_tf_parses_them():
    import tensorflow as tf

    arr = (np.arange(2 * 3 * 3) * 7).astype(np.float32).reshape(2, 3, 3)
    data = encode_record({"__key__": "a", "img": arr, "cls": 3})
    back = parse_example(data)
    assert back["img"].dtype == np.float32 and np.array_equal(back["img"], arr) and back["cls"] == 3
    feats = tf.io.parse_single_example(
        data,
        {
            "img": tf.io.FixedLenFeature([], tf.string),
            "img/shape": tf.io.FixedLenFeature([3], tf.int64),
        },
    )
    t = tf.reshape(tf.io.decode_raw(feats["img"], tf.float32), feats["img/shape"])
    assert np.array_equal(t.numpy(), arr)


def test_serialization_is_deterministic():
    rec = {"__key__": "k", **{f"f{i}": str(i).encode() for i in range(50)}}
    outs = {encode_record(dict(reversed(list(rec.items())))) for _ in range(5)} | {
        encode_record(rec)
    }
    assert len(outs) == 1


def test_schema_merge():
    a = schema_of(record_to_example({"__key__": "k", "x": b"1"}).SerializeToString())
    b = schema_of(record_to_example({"__key__": "k", "x": b"1", "y": 2}).SerializeToString())
    m = merge_schema(a, b)
    assert m["x"] == {"dtype": "bytes", "shape": [1]} and m["y"]["optional"]


def test_sizes():
    assert (
        parse_size("100MB") == 100_000_000 and parse_size("1GiB") == 2**30 and parse_size(12) == 12
    )
    assert parse_size("1.5KB") == 1500 and parse_size("0.5KiB") == 512
    for bad in (
        "lots",
        "-5",
        0,
        "0.1",
        "1.5",
        "inf",
        "nan",
    ):  # no fraction of a byte (0.1 was 0 before)
        with pytest.raises(ValueError):
            parse_size(bad)


def test_brace_expansion_order():
    assert expand_braces("t-{0..2}.tar") == ["t-0.tar", "t-1.tar", "t-2.tar"]
    assert expand_braces("t-{000..010..5}.tar") == ["t-000.tar", "t-005.tar", "t-010.tar"]
    assert expand_braces("{b,a}-{1..2}") == ["b-1", "b-2", "a-1", "a-2"]


def test_resolve_local(tmp_path):
    for n in ("t-1.tar", "t-2.tar", "t-3.tar", "u-1.tgz", "sub/t-9.tar"):
        (tmp_path / n).parent.mkdir(exist_ok=True)
        (tmp_path / n).write_bytes(b"x")
    urls, rej = resolve(["t-{3,1}.tar", "t-{4..4}.tar", "u-*.tgz"], base=str(tmp_path))
    assert urls == [str(tmp_path / "t-3.tar"), str(tmp_path / "t-1.tar"), str(tmp_path / "u-1.tgz")]
    assert [(r.stage, r.key, r.counts_record) for r in rej] == [("list", None, False)]
    assert "t-4.tar" in rej[0].reason
    urls, rej = resolve(str(tmp_path / "nothing-*.tar"))
    assert urls == [] and len(rej) == 1
    # * stays within a path segment (as in a shell, gsutil, Beam); ** crosses them
    (tmp_path / "sub" / "deeper").mkdir()
    (tmp_path / "sub" / "deeper" / "t-8.tar").write_bytes(b"x")
    assert resolve("*.tar", base=str(tmp_path))[0] == [
        str(tmp_path / f"t-{i}.tar") for i in (1, 2, 3)
    ]
    assert resolve("sub/*.tar", base=str(tmp_path))[0] == [str(tmp_path / "sub" / "t-9.tar")]
    assert resolve("sub/**.tar", base=str(tmp_path))[0] == [
        str(tmp_path / "sub" / "deeper" / "t-8.tar"),
        str(tmp_path / "sub" / "t-9.tar"),
    ]


def test_local_store_atomic_write(tmp_path):
    store = LocalStore()
    target = str(tmp_path / "d" / "f.bin")
    with pytest.raises(RuntimeError):
        with store.open_write(target) as f:
            f.write(b"partial")
            raise RuntimeError("killed")
    assert not os.path.exists(target) and os.listdir(tmp_path / "d") == []
    with store.open_write(target) as f:
        f.write(b"whole")
    assert open(target, "rb").read() == b"whole"
    assert list(store.list(str(tmp_path / "d" / "f"))) == [target]


def test_reject_validation():
    with pytest.raises(ValueError):
        Reject("s", None, "nowhere", "x")
    assert Reject("s", "k", "op", "Decode('jpg') failed: bad").kind == "Decode('jpg') failed"


def test_ais_endpoint_without_scheme_is_http(monkeypatch):
    from transforms.stores.base import StoreConfig

    monkeypatch.delenv("AIS_ENDPOINT", raising=False)
    assert (
        StoreConfig(ais_endpoint="127.0.0.1:51080/").resolved_ais_endpoint()
        == "http://127.0.0.1:51080"
    )
    assert (
        StoreConfig(ais_endpoint="https://ais.example:443").resolved_ais_endpoint()
        == "https://ais.example:443"
    )
    monkeypatch.setenv("AIS_ENDPOINT", "localhost:8080")
    assert StoreConfig().resolved_ais_endpoint() == "http://localhost:8080"
