"""TFRecord framing against TensorFlow itself, the compat vectors, and the packer."""

import glob
import io
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.tfrecord.framing import (
    FRAME_OVERHEAD,
    CorruptRecordError,
    TFRecordWriter,
    frame,
    frame_parts,
    iter_frames,
    pack,
    read_records,
    record_index,
)


def test_framing_is_byte_identical_to_tf(tmp_path):
    import tensorflow as tf

    payloads = [b"", b"x", os.urandom(1000), bytes(range(256)) * 300]
    ours = io.BytesIO()
    w = TFRecordWriter(ours)
    for p in payloads:
        w.write(p)
    path = str(tmp_path / "tf.record")
    with tf.io.TFRecordWriter(path) as tw:
        for p in payloads:
            tw.write(p)
    assert ours.getvalue() == open(path, "rb").read()
    assert w.bytes == len(ours.getvalue()) == sum(len(p) + FRAME_OVERHEAD for p in payloads)


@given(st.lists(st.binary(max_size=3000), max_size=8))
def test_framing_parts_equals_framing_their_concatenation(parts):
    """The converter frames an Example from its parts (one copy); same bytes as joining first."""
    assert frame_parts(parts) == frame(b"".join(parts))
    assert len(frame_parts(parts)) == sum(map(len, parts)) + FRAME_OVERHEAD


def test_compat_records_read_by_ours_and_tf(compat_dir):
    import tensorflow as tf

    files = sorted(
        glob.glob(os.path.join(compat_dir, "*.record"))
        + glob.glob(os.path.join(compat_dir, "*.tfrecord"))
    )
    assert len(files) == 4
    for f in files:
        ours = list(read_records(f))
        theirs = [r.numpy() for r in tf.data.TFRecordDataset(f)]
        assert ours == theirs and ours
        idx = record_index(open(f, "rb"))
        assert sum(s for _, s in idx) == os.path.getsize(f)


def test_corruption_detected():
    buf = io.BytesIO()
    TFRecordWriter(buf).write(b"hello world")
    data = bytearray(buf.getvalue())
    data[14] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(iter_frames(io.BytesIO(bytes(data))))
    with pytest.raises(CorruptRecordError, match="truncated"):
        list(iter_frames(io.BytesIO(buf.getvalue()[:-3])))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(min_value=17, max_value=5000), max_size=200),
    st.one_of(st.none(), st.integers(min_value=17, max_value=20000)),
    st.one_of(st.none(), st.integers(min_value=1, max_value=50)),
)
def test_pack_properties(sizes, max_bytes, max_records):
    spans = pack(sizes, max_bytes, max_records)
    # covers every record once, in order, no empty shard
    assert [i for a, b in spans for i in range(a, b)] == list(range(len(sizes)))
    assert all(b > a for a, b in spans)
    for a, b in spans:
        total = sum(sizes[a:b])
        if max_bytes is not None:
            assert total <= max_bytes or b - a == 1
        if max_records is not None:
            assert b - a <= max_records
    # greedy: the next record would not have fit in the previous shard
    for (a, b), (c, _) in zip(spans, spans[1:]):
        over_bytes = max_bytes is not None and sum(sizes[a:b]) + sizes[c] > max_bytes
        over_count = max_records is not None and b - a >= max_records
        assert over_bytes or over_count
