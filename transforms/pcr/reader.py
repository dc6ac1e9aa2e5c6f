"""Loading PCR datasets at a chosen number of scan groups: tf.data and plain Python.

``ProgressiveCompressedRecordDataset(filenames, index_filename, scan_groups=k)`` runs on
stock TensorFlow: per record file it reads only the prefix ``L_meta + L_1 + ... + L_k``
with ``tf.data.FixedLengthRecordDataset`` (one record of exactly that many bytes, the
rest of the file declared as footer, a read buffer of exactly the prefix size so nothing
past it is fetched), cuts the chunks with ``tf.strings.substr``, parses them with
``tf.io.decode_proto`` against the schema in ``pcr.proto`` and joins pieces 1..k plus
``FFD9`` per image.  Asking for more groups than a record has gives the full image, and so
does the default (``scan_groups=None``: every group, full quality); fewer groups read fewer
bytes at a lower quality (docs/pcr.md, "Scan groups").

``iter_pcr(...)`` is the same without TensorFlow (for PyTorch: wrap it in an
``IterableDataset``).  Both read the reference layout too (``.pcr`` names, int32-only
offsets, an index that repeats entries).
"""

from __future__ import annotations

import io
from typing import Callable, Iterator, Optional, Sequence, Tuple, Union

from transforms.pcr import format as fmt
from transforms.pcr import pcr_pb2
from transforms.stores import StoreConfig

EOI = b"\xff\xd9"


def _plan(
    filenames: Union[str, Sequence[str]],
    index_filename: str,
    scan_groups: Optional[int],
    config: Optional[StoreConfig] = None,
):
    if scan_groups is not None and scan_groups < 1:
        raise ValueError("scan_groups must be >= 1 (or None: every group)")
    if isinstance(filenames, str):
        filenames = [filenames]
    _, entries = fmt.read_index(index_filename, config)
    plan = []
    for fn in filenames:
        e = fmt.lookup(entries, fn)
        plan.append((fn, e, e.groups if scan_groups is None else min(scan_groups, e.groups)))
    return plan


def iter_pcr(
    filenames: Union[str, Sequence[str]],
    index_filename: str,
    scan_groups: Optional[int] = None,
    decode: bool = False,
    with_keys: bool = False,
    config: Optional[StoreConfig] = None,
    opener: Optional[Callable[[str], io.BufferedIOBase]] = None,
) -> Iterator[Tuple]:
    """Yield ``(jpeg_bytes, label)`` (``(key, jpeg_bytes, label)`` with ``with_keys``).

    ``scan_groups``: how many scan groups of each image to read; None (the default) reads
    them all, the full-quality image.

    ``decode=True`` yields an RGB ``uint8`` ndarray (HxWx3, via Pillow) instead of bytes.
    ``opener(url)`` replaces the store's ``open_read`` (e.g. to count bytes read).
    """
    for fn, entry, k in _plan(filenames, index_filename, scan_groups, config):
        buf = fmt.read_prefix(fn, entry.prefix(k), config, opener)
        meta, jpegs = fmt.parse_prefix(buf, entry, k)
        keys = (
            [im.key for im in meta.images] if len(meta.images) == len(jpegs) else [""] * len(jpegs)
        )
        for key, jpeg, label in zip(keys, jpegs, meta.labels):
            value = _decode(jpeg) if decode else jpeg
            yield (key, value, int(label)) if with_keys else (value, int(label))


def _decode(jpeg: bytes):
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(jpeg)) as im:
        return np.asarray(im.convert("RGB"))


def descriptor_source() -> bytes:
    """``bytes://`` descriptor for ``tf.io.decode_proto`` (the messages of pcr.proto)."""
    from google.protobuf import descriptor_pb2

    fds = descriptor_pb2.FileDescriptorSet()
    pcr_pb2.DESCRIPTOR.CopyToProto(fds.file.add())
    return b"bytes://" + fds.SerializeToString()


def ProgressiveCompressedRecordDataset(
    filenames: Union[str, Sequence[str]],
    index_filename: str,
    scan_groups: Optional[int] = None,
    decode: bool = False,
    channels: int = 3,
    num_parallel_reads: Optional[int] = None,
    deterministic: bool = True,
    config: Optional[StoreConfig] = None,
):
    """A ``tf.data.Dataset`` of ``(jpeg_bytes, label)``; ``decode=True`` gives
    ``(uint8 image HxWxchannels, label)``.  ``scan_groups`` as for :func:`iter_pcr` (None,
    the default: every group, full quality).  File names may be local paths or any
    filesystem TensorFlow reads (``gs://``); the index is read once, here."""
    import tensorflow as tf

    plan = _plan(filenames, index_filename, scan_groups, config)
    width = 1 + max(
        (k for _, _, k in plan), default=0
    )  # no files (a worker's empty split): no elements
    names = [fn for fn, _, _ in plan]
    prefix = [e.prefix(k) for _, e, k in plan]
    footer = [e.size - e.prefix(k) for _, e, k in plan]
    lengths = [list(e.lengths[: k + 1]) + [0] * (width - k - 1) for _, e, k in plan]
    ks = [k for _, _, k in plan]
    source = descriptor_source()
    meta_type = pcr_pb2.MetadataRecord.DESCRIPTOR.full_name
    group_type = pcr_pb2.ScanGroup.DESCRIPTOR.full_name

    def read(fn, nbytes, rest, lens, k):
        prefix_ds = tf.data.FixedLengthRecordDataset(
            fn, record_bytes=nbytes, footer_bytes=rest, buffer_size=nbytes
        )
        return prefix_ds.map(lambda buf: parse(buf, lens, k))

    def parse(buf, lens, k):
        starts = tf.math.cumsum(lens, exclusive=True)
        meta = tf.strings.substr(buf, tf.constant(0, tf.int64), lens[0])
        _, (labels,) = tf.io.decode_proto(
            tf.reshape(meta, [1]), meta_type, ["labels"], [tf.int32], descriptor_source=source
        )
        chunks = tf.strings.substr(buf, starts[1 : k + 1], lens[1 : k + 1])
        _, (pieces,) = tf.io.decode_proto(
            chunks, group_type, ["image_bytes"], [tf.string], descriptor_source=source
        )
        n = tf.shape(labels)[1]
        pieces = pieces[:, :n]
        pieces = tf.pad(
            pieces, [[0, 0], [0, n - tf.shape(pieces)[1]]], constant_values=""
        )  # short groups
        jpegs = tf.strings.reduce_join(pieces, axis=0) + tf.constant(EOI)
        return tf.data.Dataset.from_tensor_slices((jpegs, labels[0]))

    files = tf.data.Dataset.from_tensor_slices(
        (
            tf.constant(names, tf.string),
            tf.constant(prefix, tf.int64),
            tf.constant(footer, tf.int64),
            tf.reshape(tf.constant(lengths, tf.int64), [-1, width]),
            tf.constant(ks, tf.int64),
        )
    )
    parallel = (
        {"num_parallel_calls": num_parallel_reads, "deterministic": deterministic}
        if num_parallel_reads
        else {}
    )
    ds = files.interleave(
        lambda *a: read(*a).flat_map(lambda x: x), cycle_length=num_parallel_reads or 1, **parallel
    )
    if decode:
        ds = ds.map(
            lambda jpeg, label: (tf.io.decode_jpeg(jpeg, channels=channels), label),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic,
        )
    return ds
