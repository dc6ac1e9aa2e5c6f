"""tar2tf's own copy of the tf.train.Example wire format (``transforms/example_wire.proto``):
the bytes are TensorFlow's, and the default conversion path never imports TensorFlow."""

import os
import subprocess
import sys

import numpy as np
from hypothesis import given, settings, strategies as st

from protogen import assert_gencode_fresh
from transforms import example as ex

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

names = st.text(st.characters(min_codepoint=48, max_codepoint=122), min_size=1, max_size=8)
values = st.one_of(st.binary(max_size=64), st.integers(-2 ** 63, 2 ** 63 - 1),
                   st.floats(allow_nan=False, width=32),
                   st.lists(st.integers(-2 ** 31, 2 ** 31), min_size=1, max_size=5).map(np.asarray))


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(names.filter(lambda n: not n.startswith("__")), values, max_size=6), names)
def test_default_encoding_is_byte_identical_to_tensorflow(payload, key):
    record = dict(payload, __key__=key, __shard__="s.tar")
    ours = ex.encode_record(record)
    theirs = ex.serialize(ex.record_to_example(record))      # built with tf.train.Example
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
    from transforms.stages import Stages
    record = dict(payload, __key__=key, __shard__="s.tar")
    data, schema = ex.encode_with_schema(record)
    assert schema == ex.schema_of(data) and data == ex.encode_record(record)
    out, via_stages = Stages(example_stages=[lambda e: e]).process_with_schema(dict(record))
    assert out == data and via_stages == schema                     # a tf.train.Example message
    out, custom = Stages(to_example=lambda r: ex.encode_record(r)).process_with_schema(dict(record))
    assert out == data and custom == schema                         # a custom encoder's bytes


def test_gencode_matches_proto(tmp_path):
    assert_gencode_fresh("transforms/example_wire.proto", tmp_path)


def test_conversion_does_not_import_tensorflow(tmp_path):
    """Beam workers of the default path stay light: no TensorFlow import (seconds, ~0.5 GB)."""
    code = ("import sys; from pipelines.convert import ConvertConfig, convert; "
            f"r = convert(ConvertConfig(sources='launch/demo/shards/demo-{{0..1}}.tar', output={str(tmp_path)!r} + "
            "'/d-{}.record', type_map={'cls': 'int64'}, progress=False)); "
            "assert r.totals['records_written'] == 48, r.totals; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'))")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
