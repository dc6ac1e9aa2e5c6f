"""``output_types`` / ``output_signature`` dtype changes give the same elements with
``remote_exec=True`` (a Beam job writes TFRecords, the dataset parses them back) as the
in-memory streamed load of the same shard: values, dtypes, shapes and element spec.
Before, the remote load handed the requested dtypes to ``make_record_parser``, which
reads raw bytes only as stored, so every change but uint8 -> float failed there."""

import io
import json
import tarfile

import numpy as np
import pytest

N = 3


def _shard(path):
    """``N`` records: a small noisy PNG, ``.cls`` and a JSON document of numbers, a bool,
    a name and an integer beyond int32 in every record but the first."""
    from PIL import Image

    rng = np.random.default_rng(11)
    with tarfile.open(path, "w") as t:
        for i in range(N):
            png = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (6, 7, 3), dtype=np.uint8)).save(png, "PNG")
            doc = {
                "xs": [i - 1, 2, 300],
                "f": 0.1 * (i + 1),
                "b": bool(i % 2),
                "name": f"n{i}",
                "big": 2**40 * i + i,
            }
            for ext, data in (
                (".png", png.getvalue()),
                (".cls", f"{i + 1}\n".encode()),
                (".json", json.dumps(doc).encode()),
            ):
                ti = tarfile.TarInfo(f"s{i:03d}{ext}")
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))


def _spread(record):
    """A float image beyond [0, 1], negatives included (for casts to integers)."""
    from transforms.ops.images import decode_image

    pixels = np.asarray(decode_image(record["png"]), dtype=np.float32)
    return pixels * 1.5 - 60.25


def _zero_d(record):
    return np.asarray(json.loads(record["json"])["f"] / 7, dtype=np.float64)  # a 0-d float64 array


def _both(tmp_path, selections, **load_kw):
    """(in-memory dataset, its elements, remote dataset, its elements) of the same shard."""
    from pipelines import Dataset

    tmp_path.mkdir(exist_ok=True)
    _shard(tmp_path / "t-0.tar")
    local = Dataset(str(tmp_path), selections=selections, remote_exec=False)
    remote = Dataset(str(tmp_path), selections=selections, remote_output=str(tmp_path / "remote"))
    a = list(local.load("t-0.tar", **load_kw).as_numpy_iterator())
    ds = remote.load("t-0.tar", remote_exec=True, **load_kw)
    assert (
        remote.last_result is not None and remote.last_result.totals["records_written"] == N
    )  # Beam ran
    assert ds.element_spec == remote.element_spec == local.element_spec
    return local, a, remote, list(ds.as_numpy_iterator())


def _assert_same(mem, remote):
    import tensorflow as tf

    assert len(mem) == len(remote) == N
    for a, b in zip(mem, remote):
        tf.nest.assert_same_structure(a, b)
        for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)):
            x, y = np.asarray(x), np.asarray(y)
            assert (x.dtype, x.shape) == (y.dtype, y.shape), (x, y)
            assert x.tolist() == y.tolist(), (x, y)


def test_output_types_changes_of_every_kind_match_in_memory(tmp_path):
    import tensorflow as tf

    from transforms.ops import Convert, Decode, Func, SelectDict, SelectJSON

    leaves = {  # name: (selection, the dtype asked for)
        "img_f32": (Decode("png"), tf.float32),  # uint8 pixels -> [0, 1]
        "img_f64": (Decode("png"), tf.float64),
        "img_i32": (Decode("png"), tf.int32),  # uint8 -> another integer: a cast
        "img_str": (Decode("png"), tf.string),  # each pixel's digits
        "unit_u8": (Convert(Decode("png"), "float32"), tf.uint8),  # a float image -> uint8
        "spread_u8": (Func(_spread), tf.uint8),  # out of range: wraps, as numpy's astype
        "spread_i16": (Func(_spread), tf.int16),
        "xs_f32": (SelectJSON("json", "xs"), tf.float32),  # a JSON int list
        "xs_u8": (SelectJSON("json", "xs"), tf.uint8),  # 300 wraps, as numpy's astype
        "xs_str": (SelectJSON("json", "xs"), tf.string),
        "f_f64": (SelectJSON("json", "f"), tf.float64),
        "f_i32": (SelectJSON("json", "f"), tf.int32),
        "f_str": (SelectJSON("json", "f"), tf.string),
        "d_str": (Func(_zero_d), tf.string),
        "d_f16": (Func(_zero_d), tf.float16),
        "b_f32": (SelectJSON("json", "b"), tf.float32),
        "b_str": (SelectJSON("json", "b"), tf.string),
        "big_i64": (
            SelectJSON("json", "big"),
            tf.int64,
        ),  # int32 in the first record, 2**40 + 1 next
        "big_f32": (SelectJSON("json", "big"), tf.float32),
        "big_str": (SelectJSON("json", "big"), tf.string),
        "name": (SelectJSON("json", "name"), tf.string),  # unchanged
    }
    sels = [SelectDict({k: s for k, (s, _) in leaves.items()}), "cls"]
    types = ({k: t for k, (_, t) in leaves.items()}, tf.float32)  # the int label as float32
    local, a, remote, b = _both(tmp_path, sels, output_types=types)
    value_spec, label_spec = remote.element_spec
    assert {k: s.dtype for k, s in value_spec.items()} == types[0] and label_spec == tf.TensorSpec(
        (), tf.float32
    )
    _assert_same(a, b)
    v = b[1][0]  # the values are the casts asked for, not merely equal on both sides
    assert v["img_f32"].max() <= 1.0 and v["img_i32"].max() > 1 and b[1][1] == np.float32(2)
    assert v["big_i64"] == 2**40 + 1 and v["big_str"] == b"1099511627777" and v["b_str"] == b"True"
    assert v["xs_u8"].tolist() == [0, 2, 44] and v["xs_str"].tolist() == [b"0", b"2", b"300"]
    assert v["spread_i16"].min() < 0 and v["f_str"] == b"0.2"  # the float32 value's own text


def test_fixed_shape_pair_output_types_and_output_signature_match_in_memory(tmp_path):
    """A resized image (all shapes known: in memory the elements cross in stacked
    batches), and the same dtype changes given as ``output_signature``."""
    import tensorflow as tf

    from transforms.ops import Decode, Resize

    sels = [Resize(Decode("png"), (5, 4)), "cls"]
    _, a, remote, b = _both(tmp_path, sels, output_types=(tf.float32, tf.string))
    assert remote.element_spec == (
        tf.TensorSpec((4, 5, 3), tf.float32),
        tf.TensorSpec((), tf.string),
    )
    _assert_same(a, b)
    assert [label for _, label in b] == [b"1", b"2", b"3"]
    signature = (tf.TensorSpec((None, None, 3), tf.float16), tf.TensorSpec((), tf.int64))
    _, a, remote, b = _both(tmp_path / "sig", sels, output_signature=signature)
    assert remote.element_spec == signature
    _assert_same(a, b)


def test_without_dtype_changes_the_records_are_parsed_as_stored_with_no_cast(tmp_path):
    import tensorflow as tf

    from pipelines.tfdata import recast
    from transforms.ops import Decode, SelectDict, SelectJSON

    sels = [
        SelectDict(
            {
                "img": Decode("png"),
                "xs": SelectJSON("json", "xs"),
                "b": SelectJSON("json", "b"),
                "big": SelectJSON("json", "big"),
            }
        ),
        "cls",
    ]
    _, a, remote, b = _both(
        tmp_path, sels, output_shapes=({"img": (6, 7, 3), "xs": (3,), "b": (), "big": ()}, ())
    )
    _assert_same(a, b)
    spec = remote.element_spec
    assert spec[0]["img"] == tf.TensorSpec((6, 7, 3), tf.uint8) and spec[0]["big"].dtype == tf.int32
    assert recast.caster(spec, spec, True) is None  # nothing differs: the parser's map alone


def test_a_string_asked_for_as_a_number_fails_loudly_both_ways(tmp_path):
    """In memory every record is rejected (iterating says so); the remote load knows from
    the stored dtype when the dataset is made."""
    import tensorflow as tf

    from pipelines import Dataset
    from transforms.ops import SelectJSON

    _shard(tmp_path / "t-0.tar")
    sels = [SelectJSON("json", "name"), "cls"]
    types = (tf.float32, tf.int32)
    local = Dataset(str(tmp_path), selections=sels, remote_exec=False)
    with pytest.raises(Exception, match="rejected"):
        list(local.load("t-0.tar", output_types=types).as_numpy_iterator())
    remote = Dataset(str(tmp_path), selections=sels, remote_output=str(tmp_path / "remote"))
    with pytest.raises(ValueError, match=r"value is stored as string.*float32"):
        remote.load("t-0.tar", output_types=types, remote_exec=True)
