"""tar2tf's own copy of the tf.train.Example wire format (``transforms/tfrecord/example_wire.proto``):
the bytes are TensorFlow's, and the default conversion path never imports TensorFlow."""

import os

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support.protogen import assert_gencode_fresh
from support.scripts import run_python

from transforms.tfrecord import example as ex
from transforms.tfrecord import schema as exs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

names = st.text(st.characters(min_codepoint=48, max_codepoint=122), min_size=1, max_size=8)
values = st.one_of(
    st.binary(max_size=64),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, width=32),
    st.booleans(),
    st.lists(st.integers(-(2**31), 2**31), min_size=1, max_size=5).map(np.asarray),
    # arrays stored as their values: strings (bytes list), bools (int64 0/1)
    st.lists(st.one_of(st.binary(max_size=4), st.text(max_size=3)), min_size=1, max_size=4).map(
        lambda v: np.asarray(v, dtype=object)
    ),
    st.lists(st.booleans(), min_size=1, max_size=5).map(np.asarray),
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(names.filter(lambda n: not n.startswith("__")), values, max_size=6), names)
def test_default_encoding_is_byte_identical_to_tensorflow(payload, key):
    record = dict(payload, __key__=key, __shard__="s.tar")
    ours = ex.encode_record(record)
    theirs = ex.serialize(ex.record_to_example(record))  # built with tf.train.Example
    assert ours == theirs
    from tensorflow.core.example import example_pb2

    assert example_pb2.Example.FromString(ours).SerializeToString(deterministic=True) == ours
    back = ex.parse_example(ours)
    assert back["__key__"] == key and set(back) == set(record) - {"__shard__"}


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(names.filter(lambda n: not n.startswith("__")), values, max_size=6), names)
def test_schema_from_the_message_equals_the_parsed_schema(payload, key):
    """The converter takes each record's schema from the message before serializing it;
    it must be what parsing the written bytes gives (what `tar2tf verify` checks against)."""
    from transforms.ops.stages import Stages

    record = dict(payload, __key__=key, __shard__="s.tar")
    data, schema = ex.encode_with_schema(record)
    assert schema == exs.schema_of(data) and data == ex.encode_record(record)
    out, via_stages = Stages(example_stages=[lambda e: e]).process_with_schema(dict(record))
    assert out == data and via_stages == schema  # a tf.train.Example message
    out, custom = Stages(to_example=lambda r: ex.encode_record(r)).process_with_schema(dict(record))
    assert out == data and custom == schema  # a custom encoder's bytes


def test_gencode_matches_proto(tmp_path):
    assert_gencode_fresh("transforms/tfrecord/example_wire.proto", tmp_path)


@pytest.mark.slow
def test_conversion_does_not_import_tensorflow(tmp_path):
    """Beam workers of the default path stay light: no TensorFlow import (seconds, ~0.5 GB)."""
    code = (
        "import sys; from pipelines.job.kinds.tfrecord.config import ConvertConfig; "
        "from pipelines.beam.convert import convert; "
        f"r = convert(ConvertConfig(sources='launch/demo/shards/demo-{{0..1}}.tar', output={str(tmp_path)!r} + "
        "'/d-{}.record', type_map={'cls': 'int64'}, progress=False)); "
        "assert r.totals['records_written'] == 48, r.totals; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'))"
    )
    p = run_python(code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def _worker_run(out, stages, shown, pre=""):
    """Convert the first demo shard in a fresh process, as a shard worker does (after
    ``pre``); ``(what the expression ``shown`` printed, the piece's bytes)``."""
    out.mkdir()
    code = (
        f"import sys; {pre}from pipelines.job.kinds.tfrecord.config import ConvertConfig; "
        "from pipelines.job.kinds.tfrecord.piece import convert_to_piece; "
        "from transforms.ops import Encode, Resize; "
        f"cfg = ConvertConfig(sources='launch/demo/shards/demo-0.tar', output={str(out)!r} + '/d-{{}}.record', "
        f"type_map={{'cls': 'int64'}}, sample_stages={stages}, progress=False); "
        f"info = convert_to_piece(0, 'launch/demo/shards/demo-0.tar', {str(out)!r}, cfg, cfg.stages()).summary; "
        "assert info.records == 24 and not info.records_rejected, info; "
        f"print({shown})"
    )
    p = run_python(code)
    assert p.returncode == 0, p.stderr
    (piece,) = out.glob("piece-000000~*.tfrecord")  # named by its attempt
    return p.stdout.strip(), piece.read_bytes()


def test_a_shard_worker_converts_without_protobuf(tmp_path):
    """What a shard worker process imports and runs for usual records needs no protobuf (the
    direct writer): its start-up is ~15 ms shorter."""
    shown, _ = _worker_run(
        tmp_path / "a",
        "[Resize('jpg', (8, 8))]",
        "sorted(m for m in sys.modules if m.startswith('google.protobuf'))",
    )
    assert shown == "[]"


typed = st.sampled_from(["int64", "float", "bytes"])
typed_values = st.one_of(
    st.binary(max_size=16),
    st.integers(-(2**64), 2**64),
    st.integers(100, 40000).map(bytes),  # lengths of 2- and 3-byte varints
    st.floats(allow_nan=False),
    st.just(b"3"),
    st.just("1.5 2"),
    st.just([]),
    st.lists(st.binary(max_size=4), max_size=3),
    st.lists(st.integers(-(2**31), 2**31), max_size=3).map(np.asarray),
)


def _direct(record, type_map):
    """The direct writer's ``(serialized Example, schema)``, or None where it steps aside."""
    got = ex._wire_parts(record, type_map)
    return None if got is None else (b"".join(got[0]), got[1])


def _message_path(record, type_map):
    """The protobuf-message encoding that the direct writer stands in for."""
    from transforms.tfrecord import example_wire_pb2

    return ex.serialize(ex._build(example_wire_pb2.Example(), record, type_map))


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(names.filter(lambda n: not n.startswith("__")), typed_values, max_size=6),
    st.dictionaries(names, typed, max_size=4),
    names,
)
def test_direct_writer_equals_the_message_path_or_steps_aside(payload, type_map, key):
    """The default encoding writes common records directly (no protobuf message); its bytes
    and schema are the message path's, including map order for keys that prefix each
    other, typed features and errors; anything unusual (empty lists, a number outside its
    wire type, two entries for one name) returns None and takes the message path."""
    record = dict(payload, __key__=key, __shard__="s.tar")
    try:
        want = _message_path(record, type_map)
    except Exception as e:
        try:
            assert _direct(record, type_map) is None
        except type(e):
            pass
        with pytest.raises(type(e)):
            ex.encode_record(record, type_map)
        return
    direct = _direct(record, type_map)
    if direct is not None:
        assert direct[0] == want
        assert direct[1] == exs.schema_of(want)
    assert ex.encode_record(record, type_map) == want


def test_direct_writer_covers_the_usual_records():
    """The records a converter usually writes go the direct way, in TensorFlow's bytes."""
    from tensorflow.core.example import example_pb2

    usual = [
        ({"__key__": "n01/img7", "jpg": b"\xff\xd8jpeg", "cls": b"7"}, {"cls": "int64"}),
        ({"__key__": "k", "jpg": np.zeros((4, 4, 3), np.uint8), "jpg/extra": b"x", "j": 1.5}, None),
        (
            {"__key__": "k", "score": "0.25 1", "label": -3, "neg": np.asarray([-(2**40)])},
            {"score": "float"},
        ),
    ]
    for record, type_map in usual:
        direct = _direct(record, type_map)
        assert direct is not None
        assert direct[0] == _message_path(record, type_map)
        assert (
            example_pb2.Example.FromString(direct[0]).SerializeToString(deterministic=True)
            == direct[0]
        )
    # unusual ones step aside: an empty list, a float32 overflow, a name two entries share
    for record, type_map in [
        ({"__key__": "k", "a": []}, None),
        ({"__key__": "k", "f": 1e39}, None),
        ({"__key__": "k", "a": np.zeros(2), "a/shape": b"x"}, None),
    ]:
        assert _direct(record, type_map) is None
        assert ex.encode_record(record, type_map) == _message_path(record, type_map)


@given(st.one_of(st.integers(0, 1 << 22), st.integers(0, 2**64 - 1)))
def test_varint_is_protobufs(n):
    """The direct writer's varints (fast paths for 1-3 bytes) are the wire format's."""
    from google.protobuf.internal.encoder import _VarintBytes

    assert ex._varint(n) == _VarintBytes(n)


@pytest.mark.parametrize(
    "stages",
    [
        "[]",
        # the default image codec works on numpy arrays; the Pillow codec needs none
        "[Encode(Resize('jpg', (32, 24)), 'jpeg', quality=90)]",
    ],
)
def test_a_worker_without_array_ops_imports_no_numpy_and_writes_the_same_bytes(tmp_path, stages):
    """Passing records through (also its record file), or decode -> resize -> encode with
    the Pillow image codec, needs no numpy in a shard worker (~45 ms of its start-up:
    transforms.lazynp); the Examples are the same bytes as in a process where numpy is
    loaded."""
    codec = "import os; os.environ['TAR2TF_IMAGE_CODEC'] = 'pillow'; " if stages != "[]" else ""
    bare = _worker_run(tmp_path / "a", stages, "'numpy' in sys.modules", pre=codec)
    with_np = _worker_run(
        tmp_path / "b", stages, "'numpy' in sys.modules", pre=codec + "import numpy; "
    )
    assert bare[0] == "False" and with_np[0] == "True"
    assert bare[1] == with_np[1] and len(bare[1]) > 24 * 500


@given(
    st.one_of(
        st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1), st.integers(), st.floats()
    )
)
@example(1 << 63)  # past int64: numpy takes it as uint64
@example(1 << 64)  # past uint64 too: refused
@example(-(1 << 63) - 1)
@example((1 << 63) - 1)
def test_python_numbers_convert_as_their_numpy_scalars_do(v):
    """A label that is a plain int or float skips numpy; the values (and the refusals of
    ints outside int64) are the ones the numpy path gives."""

    def outcome(conv, value):
        try:
            return conv("x", value)
        except ValueError as e:
            return type(e)

    if isinstance(v, int):
        via_numpy = outcome(
            ex._as_ints, np.asarray(v)
        )  # int64, uint64 (2**63..), or object (refused)
        assert outcome(ex._as_ints, v) == via_numpy
    else:
        same = outcome(ex._as_floats, np.float64(v))
        got = outcome(ex._as_floats, v)
        assert got == same or (v != v and got[0] != got[0] and same[0] != same[0])  # NaN


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan, 0.5])
def test_a_float_array_that_is_not_whole_fails_as_int64_without_a_numpy_warning(bad):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "invalid value encountered" would raise here
        with pytest.raises(ex.EncodeError, match="'x' is not int64"):
            ex.encode_record({"__key__": "k", "x": np.array([1.0, bad])}, {"x": "int64"})
        assert ex.encode_record({"__key__": "k", "x": np.array([1.0, 2.0])}, {"x": "int64"})
