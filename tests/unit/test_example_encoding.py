"""Example encoding: type map, arrays, determinism, schema, sizes, rejects."""

import numpy as np
import pytest

from transforms.record_types import Reject
from transforms.sizes import parse_size
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


def test_reject_validation():
    with pytest.raises(ValueError):
        Reject("s", None, "nowhere", "x")
    assert Reject("s", "k", "op", "Decode('jpg') failed: bad").kind == "Decode('jpg') failed"
