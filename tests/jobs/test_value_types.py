"""Values other than images and integer labels through real TFRecords: arrays of strings,
bools, digit strings too long for int64, and the default dataset's uint8-stored image.
Each is written by ``Dataset.load(path=...)`` and read back with ``make_record_parser``
(TensorFlow's parsing) into what the in-memory dataset yields."""

import io
import json
import tarfile

import numpy as np
import pytest

from transforms.tfrecord import example as ex

TAGS = [["a", "bb"], ["ünï", ""], ["x", "yz"]]


def _shard(path, n=3, jpg=False):
    """A tar shard of ``n`` records: ``.json`` (tags, flag, flags, id), ``.cls`` and, with
    ``jpg``, a small noisy JPEG."""
    from PIL import Image

    rng = np.random.default_rng(5)
    with tarfile.open(path, "w") as t:
        for i in range(n):
            doc = {
                "tags": TAGS[i % len(TAGS)],
                "flag": bool(i % 2),
                "flags": [bool(i % 2), True, False],
                "id": str(12345678901234567890 + i),
            }
            members = [
                (".json", json.dumps(doc).encode()),
                (".cls", f"{i}\n".encode()),
                (".id", doc["id"].encode()),
            ]
            if jpg:
                buf = io.BytesIO()
                Image.fromarray(rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)).save(buf, "JPEG")
                members.append((".jpg", buf.getvalue()))
            for ext, data in members:
                ti = tarfile.TarInfo(f"s{i:03d}{ext}")
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))


def _round_trip(tmp_path, selections, parser_spec=None, jpg=False, **kw):
    """(in-memory elements, the same written with path= and parsed back, the Examples)."""
    import tensorflow as tf

    from pipelines import Dataset, make_record_parser

    _shard(tmp_path / "t-0.tar", jpg=jpg)
    ds = Dataset(str(tmp_path), selections=selections, remote_exec=False, **kw)
    mem = list(ds.load("t-0.tar").as_numpy_iterator())
    paths = ds.load("t-0.tar", path=str(tmp_path / "out" / "r.record"))
    assert ds.last_result.totals["records_written"] == len(mem) == 3
    raw = list(tf.data.TFRecordDataset(paths).as_numpy_iterator())
    parser = make_record_parser(parser_spec or ds.element_spec)
    parsed = list(tf.data.TFRecordDataset(paths).map(parser).as_numpy_iterator())
    return mem, parsed, [tf.train.Example.FromString(r) for r in raw], ds


def _assert_same(mem, parsed):
    import tensorflow as tf

    assert len(mem) == len(parsed)
    for a, b in zip(mem, parsed):
        for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)):
            x, y = np.asarray(x), np.asarray(y)
            assert x.dtype == y.dtype and x.shape == y.shape and x.tolist() == y.tolist(), (x, y)


# -- arrays of strings ----------------------------------------------------------------------


def test_json_string_lists_are_stored_as_bytes_lists_and_parse_back(tmp_path):
    """The object array ``[b"a", b"bb"]`` was written with ``tobytes()``: its pointers, which
    differ from run to run, and which no parser can read back."""
    from transforms.ops import SelectJSON

    mem, parsed, examples, ds = _round_trip(tmp_path, [SelectJSON("json", "tags"), "cls"])
    assert [list(v) for v, _ in mem] == [[t.encode() for t in tags] for tags in TAGS]
    _assert_same(mem, parsed)
    f = examples[1].features.feature
    assert list(f["value"].bytes_list.value) == ["ünï".encode(), b""]
    assert list(f["value/shape"].int64_list.value) == [2]
    assert list(f["value/dtype"].bytes_list.value) == [b"string"]


def test_string_arrays_of_every_numpy_kind_encode_as_their_values():
    """object, ``S`` and ``U`` arrays, any shape: the values in C order (str as UTF-8), the
    same bytes from the direct writer and from TensorFlow's message, read back by
    ``parse_example`` and by TensorFlow."""
    import tensorflow as tf
    from tensorflow.core.example import example_pb2

    from pipelines import make_record_parser

    cases = [
        np.asarray([b"a", b"bb"], dtype=object),
        np.array([b"abc"]),
        np.array([["é", "b"], ["", "dd"]]),
        np.asarray([], dtype=object),
    ]
    for arr in cases:
        record = {"__key__": "k", "value": arr, "label": 1}
        data = ex.encode_record(record)
        assert data == ex.encode_record(dict(record, value=arr.copy()))  # no addresses in it
        theirs = ex.serialize(ex.record_to_example(record))
        assert (
            data == theirs
            and example_pb2.Example.FromString(data).SerializeToString(deterministic=True) == data
        )
        want = [v.encode() if isinstance(v, str) else v for v in arr.reshape(-1).tolist()]
        f = example_pb2.Example.FromString(data).features.feature
        assert list(f["value"].bytes_list.value) == want and f["value/dtype"].bytes_list.value == [
            b"string"
        ]
        back = ex.parse_example(data)["value"]
        assert (
            back.dtype == object and back.shape == arr.shape and back.reshape(-1).tolist() == want
        )
        spec = (tf.TensorSpec(arr.shape, tf.string), tf.TensorSpec((), tf.int32))
        value, label = make_record_parser(spec)(tf.constant(data))
        assert (
            value.shape == arr.shape and value.numpy().reshape(-1).tolist() == want and label == 1
        )
    with pytest.raises(ex.EncodeError, match="object array holding int"):
        ex.encode_record({"__key__": "k", "value": np.asarray([b"a", 3], dtype=object)})


def test_a_single_bytes_value_is_stored_as_before():
    """Scalars keep their encoding: one bytes value, no shape or dtype feature (the bytes
    of a ``tf.train.Example`` built by hand)."""
    import tensorflow as tf

    for value in (b"abc", "ünï", np.bytes_(b"abc")):
        want = tf.train.Example(
            features=tf.train.Features(
                feature={
                    "__key__": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"k"])),
                    "value": tf.train.Feature(
                        bytes_list=tf.train.BytesList(
                            value=[value.encode() if isinstance(value, str) else bytes(value)]
                        )
                    ),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[3])),
                }
            )
        )
        assert ex.encode_record(
            {"__key__": "k", "value": value, "label": 3}
        ) == want.SerializeToString(deterministic=True)


# -- bools --------------------------------------------------------------------------------


def test_json_bools_are_int64_and_parse_back_as_tf_bool(tmp_path):
    """A bool was stored as its text ``b"True"``, which ``make_record_parser`` could not
    read as the ``tf.bool`` the in-memory spec says."""
    import tensorflow as tf

    from transforms.ops import SelectJSON

    mem, parsed, examples, ds = _round_trip(
        tmp_path, [SelectJSON("json", "flags"), SelectJSON("json", "flag")]
    )
    assert ds.element_spec == (
        tf.TensorSpec((None,), tf.bool),
        tf.TensorSpec((), tf.bool),
    )  # a JSON list: open
    assert [(list(v), bool(l)) for v, l in mem] == [
        ([False, True, False], False),
        ([True, True, False], True),
        ([False, True, False], False),
    ]
    _assert_same(mem, parsed)
    f = examples[1].features.feature
    assert (
        list(f["label"].int64_list.value) == [1] and "label/dtype" not in f
    )  # a scalar, as an int is
    assert list(f["value"].int64_list.value) == [1, 1, 0]
    assert list(f["value/shape"].int64_list.value) == [3] and f["value/dtype"].bytes_list.value == [
        b"bool"
    ]


def test_bool_values_encode_as_int64_and_read_back():
    from tensorflow.core.example import example_pb2

    arr = np.array([[True, False], [False, True]])
    record = {"__key__": "k", "flag": True, "off": np.bool_(False), "mask": arr}
    data = ex.encode_record(record)
    assert data == ex.serialize(ex.record_to_example(record))
    f = example_pb2.Example.FromString(data).features.feature
    assert f["flag"].int64_list.value == [1] and f["off"].int64_list.value == [0]
    back = ex.parse_example(data)
    assert back["mask"].dtype == bool and back["mask"].tolist() == arr.tolist()
    assert back["flag"] == 1 and back["off"] == 0
    # asked for as text, a bool is still its text
    assert (
        ex.parse_example(ex.encode_record({"__key__": "k", "flag": True}, {"flag": "bytes"}))[
            "flag"
        ]
        == b"True"
    )


# -- digit strings beyond int64 --------------------------------------------------------------


@pytest.mark.parametrize(
    "text, want",
    [
        (b"12345678901234567890", b"12345678901234567890"),
        (b" 9223372036854775808\n", b" 9223372036854775808\n"),
        (b"-9223372036854775809", b"-9223372036854775809"),
        (b"9223372036854775807", 2**63 - 1),
        (b"-9223372036854775808", -(2**63)),
        (b"3\n", 3),
    ],
)
def test_only_digit_strings_that_fit_int64_become_integers(text, want):
    """A 20-digit id raised OverflowError, rejecting the record."""
    from transforms.ops import leaves
    from transforms.ops.selections import Select

    out = leaves.SelectionStage([Select("id"), Select("cls")])(
        {"__key__": "k", "id": text, "cls": b"1"}
    )
    assert out["value"] == want and type(out["value"]) is type(want)
    assert leaves.leaf(text) == want and leaves.entry_value(text) == want


def test_long_ids_round_trip_as_strings(tmp_path):
    import tensorflow as tf

    mem, parsed, examples, ds = _round_trip(tmp_path, ["id", "cls"])
    assert ds.element_spec[0] == tf.TensorSpec((), tf.string)
    assert [v for v, _ in mem] == [str(12345678901234567890 + i).encode() for i in range(3)]
    _assert_same(mem, parsed)
    assert examples[0].features.feature["value"].bytes_list.value == [b"12345678901234567890"]


def test_an_int64_type_map_refuses_digits_beyond_int64():
    """An encode reject (EncodeError), not protobuf's ValueError from building the message."""
    with pytest.raises(ex.EncodeError, match="'id' is not int64"):
        ex.encode_record({"__key__": "k", "id": b"12345678901234567890"}, {"id": "int64"})
    assert ex.parse_example(
        ex.encode_record({"__key__": "k", "id": b"-9223372036854775808"}, {"id": "int64"})
    )["id"] == -(2**63)


# -- stored dtype against the element spec ----------------------------------------------------


def test_default_dataset_reads_back_with_make_record_parser_of_its_spec(tmp_path):
    """The default element is float32 in memory, stored as uint8: ``make_record_parser(
    dataset.element_spec)`` decoded the uint8 bytes as float32 and failed to reshape."""
    import tensorflow as tf

    from pipelines import default_record_parser

    mem, parsed, examples, ds = _round_trip(tmp_path, None, jpg=True)
    assert ds.element_spec == (
        tf.TensorSpec((224, 224, 3), tf.float32),
        tf.TensorSpec((), tf.int32),
    )
    assert examples[0].features.feature["value/dtype"].bytes_list.value == [b"uint8"]
    _assert_same(mem, parsed)
    paths = ds.last_result.paths
    _assert_same(
        mem, list(tf.data.TFRecordDataset(paths).map(default_record_parser).as_numpy_iterator())
    )


@pytest.mark.parametrize("spec_dtype", ["int8", "int32", "uint16"])
def test_a_stored_dtype_other_than_the_spec_is_an_error_naming_both(tmp_path, spec_dtype):
    """uint8 pixels are never read as another dtype's bytes (a garbled tensor, or a reshape
    error that names neither dtype)."""
    import tensorflow as tf

    from transforms.ops import Decode, Resize

    spec = (tf.TensorSpec((6, 8, 3), tf.as_dtype(spec_dtype)), tf.TensorSpec((), tf.int32))
    why = rf"feature value is stored as.*uint8.*spec says {spec_dtype}"
    with pytest.raises(tf.errors.InvalidArgumentError, match=why):
        _round_trip(tmp_path, [Resize(Decode("jpg"), (8, 6)), "cls"], parser_spec=spec, jpg=True)


def test_float32_stored_arrays_are_not_read_as_uint8(tmp_path):
    import tensorflow as tf

    from transforms.ops import Convert, Decode, Resize

    spec = (tf.TensorSpec((6, 8, 3), tf.uint8), tf.TensorSpec((), tf.int32))
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"stored as.*float32.*spec says uint8"
    ):
        _round_trip(
            tmp_path,
            [Convert(Resize(Decode("jpg"), (8, 6)), "float32"), "cls"],
            parser_spec=spec,
            jpg=True,
        )


@pytest.mark.parametrize("float_dtype", ["float32", "float16", "float64"])
def test_output_types_asking_floats_of_uint8_pixels_scale_alike_in_memory_and_from_records(
    tmp_path, float_dtype
):
    """``output_types`` float of a uint8 image: the in-memory element was a plain cast
    (0..255) while ``make_record_parser`` of the same spec scaled the stored uint8 pixels
    to [0, 1] (as the remote in-memory load, which parses its records, did too).  Both now
    give ``tf.image.convert_image_dtype``'s values, bit for bit."""
    import tensorflow as tf

    from pipelines import Dataset, make_record_parser
    from transforms.ops import Decode, Resize

    _shard(tmp_path / "t-0.tar", jpg=True)
    conv = [Decode("jpg"), Resize("jpg", (8, 6))]
    types = (tf.as_dtype(float_dtype), tf.int32)
    ds = Dataset(str(tmp_path), conversions=conv, remote_exec=False)
    mem = list(ds.load("t-0.tar", output_types=types).as_numpy_iterator())
    assert ds.element_spec == (tf.TensorSpec((6, 8, 3), types[0]), tf.TensorSpec((), tf.int32))
    pixels = [
        v
        for v, _ in Dataset(str(tmp_path), conversions=conv, remote_exec=False)
        .load("t-0.tar")
        .as_numpy_iterator()
    ]
    want = [
        (tf.image.convert_image_dtype(p, types[0]).numpy(), np.int32(i))
        for i, p in enumerate(pixels)
    ]
    assert pixels[0].dtype == np.uint8 and pixels[0].max() > 1
    _assert_same(want, mem)
    paths = ds.load("t-0.tar", path=str(tmp_path / "out" / "r.record"))
    _assert_same(
        want,
        list(
            tf.data.TFRecordDataset(paths)
            .map(make_record_parser(ds.element_spec))
            .as_numpy_iterator()
        ),
    )
    if float_dtype == "float32":  # the remote in-memory load parses the records its Beam job wrote
        remote = Dataset(str(tmp_path), conversions=conv, remote_output=str(tmp_path / "remote"))
        _assert_same(
            want,
            list(remote.load("t-0.tar", output_types=types, remote_exec=True).as_numpy_iterator()),
        )


# -- 0-d arrays -------------------------------------------------------------------------------

ZERO_D = [
    np.asarray(2.5, np.float32),
    np.asarray(0.1, np.float64),
    np.asarray(-7, np.int32),
    np.asarray(200, np.uint8),
    np.asarray(2**40, np.int64),
    np.asarray(True),
    np.asarray(b"ab", dtype=object),
    np.asarray("é"),
]


@pytest.mark.parametrize("arr", ZERO_D, ids=lambda a: a.dtype.name)
def test_0d_arrays_keep_shape_through_examples(arr):
    """A 0-d array was stored with ``/shape`` [1] (``np.ascontiguousarray`` made it 1-d),
    read back with shape (1,), and ``make_record_parser`` of its rank-0 spec failed on
    the raw bytes ("Data types don't match")."""
    import tensorflow as tf
    from tensorflow.core.example import example_pb2

    from pipelines import make_record_parser

    record = {"__key__": "k", "value": arr, "label": 3}
    data = ex.encode_record(record)
    assert data == ex.serialize(ex.record_to_example(record))
    f = example_pb2.Example.FromString(data).features.feature
    assert (
        f["value/shape"].WhichOneof("kind") == "int64_list"
        and list(f["value/shape"].int64_list.value) == []
    )
    want = arr.astype(object) if arr.dtype.kind == "U" else arr
    want = np.asarray(want.item().encode(), dtype=object) if arr.dtype.kind == "U" else want
    back = ex.parse_example(data)["value"]
    assert back.shape == () and back.dtype == want.dtype and back.item() == want.item()
    spec = tf.TensorSpec((), tf.string if arr.dtype.kind in "OU" else tf.as_dtype(arr.dtype))
    value, label = make_record_parser((spec, tf.TensorSpec((), tf.int32)))(tf.constant(data))
    assert (
        value.shape == ()
        and value.dtype == spec.dtype
        and value.numpy() == want.item()
        and label == 3
    )


def test_0d_arrays_of_older_files_and_custom_encoders_still_parse():
    """Files written before stored a 0-d array's shape as [1]: ``parse_example`` still
    gives the (1,) array they say, and a rank-0 spec reads their one value; a custom
    encoder's raw value without ``/shape`` reads under a rank-0 spec too, and scalars
    stored as one feature value read as before."""
    import tensorflow as tf

    from pipelines import make_record_parser

    def example(**feats):
        def feat(v):
            if isinstance(v, bytes):
                return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))
            if isinstance(v, float):
                return tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
            return tf.train.Feature(
                int64_list=tf.train.Int64List(value=list(v) if isinstance(v, list) else [v])
            )

        return tf.train.Example(
            features=tf.train.Features(
                feature={k.replace("_", "/"): feat(v) for k, v in feats.items()}
            )
        ).SerializeToString()

    raw = np.asarray([1.25], "<f8").tobytes()
    old = example(value=raw, value_shape=[1], value_dtype=b"float64", label=2)
    assert ex.parse_example(old)["value"].shape == (1,)
    spec = (tf.TensorSpec((), tf.float64), tf.TensorSpec((), tf.int32))
    parse = make_record_parser(spec)
    for data in (
        old,
        example(value=raw, value_dtype=b"float64", label=2),
        example(value=1.25, label=2),
    ):
        value, label = parse(tf.constant(data))
        assert value.shape == () and value.numpy() == 1.25 and label == 2
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"stored as[\s\S]*int32[\s\S]*spec says float64"
    ):
        parse(
            tf.constant(
                example(value=np.asarray([1], "<i4").tobytes(), value_dtype=b"int32", label=2)
            )
        )


def _zero_d(record):
    return np.asarray(
        int(json.loads(record["json"])["id"][-3:]) / 7, dtype=np.float64
    )  # a 0-d array


def test_0d_array_values_round_trip_in_memory_and_through_records(tmp_path):
    import tensorflow as tf

    from transforms.ops import Func

    mem, parsed, examples, ds = _round_trip(tmp_path, [Func(_zero_d), "cls"])
    assert ds.element_spec == (tf.TensorSpec((), tf.float64), tf.TensorSpec((), tf.int32))
    assert [float(v) for v, _ in mem] == [
        int(str(12345678901234567890 + i)[-3:]) / 7 for i in range(3)
    ]
    _assert_same(mem, parsed)
    assert list(examples[0].features.feature["value/shape"].int64_list.value) == []


def test_remote_in_memory_load_gives_the_local_elements_bools_and_0d_arrays_included(tmp_path):
    """The remote load infers its element spec from the records its Beam job wrote: a
    single bool (an int64 0/1 feature, like an integer) came back as int32, and a 0-d
    array (stored with shape [1]) as (None,)."""
    import tensorflow as tf

    from pipelines import Dataset
    from transforms.ops import Func, SelectDict, SelectJSON

    _shard(tmp_path / "t-0.tar")
    sels = [
        SelectDict(
            {
                "flag": SelectJSON("json", "flag"),
                "flags": SelectJSON("json", "flags"),
                "x": Func(_zero_d),
            }
        ),
        SelectJSON("json", "flag"),
    ]
    local = Dataset(str(tmp_path), selections=sels, remote_exec=False)
    remote = Dataset(str(tmp_path), selections=sels, remote_output=str(tmp_path / "remote"))
    a = list(local.load("t-0.tar").as_numpy_iterator())
    b = list(remote.load("t-0.tar", remote_exec=True).as_numpy_iterator())
    assert remote.last_result is not None  # a Beam job wrote what it read
    assert local.element_spec == (
        {
            "flag": tf.TensorSpec((), tf.bool),
            "flags": tf.TensorSpec((None,), tf.bool),
            "x": tf.TensorSpec((), tf.float64),
        },
        tf.TensorSpec((), tf.bool),
    )
    assert remote.element_spec == local.element_spec
    _assert_same(a, b)
    assert [bool(label) for _, label in b] == [False, True, False]


MIXED = [
    [1, 2, 3],
    [float("nan"), 4, "x"],
    [float("inf"), 5, 2.5],
]  # labels per shard, in input order


def _mixed_shards(d):
    from support import shardgen

    d.mkdir()
    for s, labels in enumerate(MIXED):
        members = []
        for i, label in enumerate(labels):
            members += [
                (f"{s}{i}.jpg", shardgen.jpeg(i, (16, 12))),
                (f"{s}{i}.json", json.dumps({"label": label}).encode()),
            ]
        shardgen.write_tar(str(d / f"m-{s}.tar"), members)
    return str(d / "m-{0..2}.tar")


def _labels(out_dir):
    import glob

    from transforms.tfrecord.framing import read_records

    return [
        (r["__key__"], int(r["label"]))
        for p in sorted(glob.glob(f"{out_dir}/*.record"))
        for r in map(ex.parse_example, read_records(p))
    ]


@pytest.mark.slow
def test_mixed_value_types_get_the_first_records_type(tmp_path):
    """A label that is an int in the first record, nan/inf/text/2.5 in later ones: the
    feature is int64 (the type of the first record in input order that has it), the values
    that do not fit are encode rejects, whatever worker converts which shard first; the
    in-memory stream keeps the same records."""
    from support.cli_fixtures import cli, output_digest

    src = _mixed_shards(tmp_path / "in")
    ops = '{selections: [jpg, "SelectJSON(json, [label])"]}'
    outs = {}
    for mode, extra in (
        ("threads", ["--processes", "0", "--direct_num_workers=3"]),
        ("workers", ["--processes", "2"]),
    ):
        out = str(tmp_path / mode / "t-{}.record")
        p = cli(
            "convert", src, "-o", out, "--ops", ops, "--max-rejects", "4", "--no-progress", *extra
        )
        assert p.returncode == 0, p.stderr
        assert "as if the type map gave label:int64" in p.stderr
        outs[mode] = output_digest(str(tmp_path / mode))
        m = json.load(open(str(tmp_path / mode / "t.record.manifest.json")))
        assert m["schema"]["label"] == {"dtype": "int64", "shape": [1]}
        rejects = [json.loads(x) for x in open(str(tmp_path / mode / "t.record.rejects.jsonl"))]
        assert [(r["key"], r["stage"]) for r in rejects] == [
            ("10", "encode"),
            ("12", "encode"),
            ("20", "encode"),
            ("22", "encode"),
        ]
        assert "'label' is not int64 (nan is no whole finite number)" in rejects[0]["reason"]
        assert _labels(str(tmp_path / mode)) == [
            ("00", 1),
            ("01", 2),
            ("02", 3),
            ("11", 4),
            ("21", 5),
        ]
    assert outs["threads"] == outs["workers"]

    # more rejects than allowed: exit 3 (the job does not pass with a 'mixed' schema)
    p = cli(
        "convert",
        src,
        "-o",
        str(tmp_path / "strict" / "t-{}.record"),
        "--ops",
        ops,
        "--no-progress",
    )
    assert p.returncode == 3, p.stderr

    # the in-memory stream: the same records, no cast of nan to -2**31
    import warnings

    from pipelines import Dataset
    from transforms.ops import SelectJSON

    ds = Dataset(str(tmp_path / "in"), selections=["jpg", SelectJSON("json", ["label"])])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = [int(label) for _, label in ds.load("m-{0..2}.tar").as_numpy_iterator()]
    assert got == [1, 2, 3, 4, 5]
