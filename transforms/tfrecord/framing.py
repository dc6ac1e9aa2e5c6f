"""TFRecord framing: writer, reader, and the masked CRC32C.

Each record on disk is::

    uint64 length (little-endian)
    uint32 masked_crc32c(length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

with ``masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8`` (mod 2**32).  Files are plain
concatenations of records, so two TFRecord files concatenated byte-wise are one valid
TFRecord file -- the fact the shard packer relies on.  CRC32C comes from
``google-crc32c`` (hardware-accelerated C); this module writes exactly the bytes
``tf.io.TFRecordWriter`` writes for the same payloads (tested).
"""

from __future__ import annotations

import struct
from typing import BinaryIO, Iterator, List, Optional, Sequence, Tuple

import google_crc32c

FRAME_OVERHEAD = 16  # 8 length + 4 length crc + 4 data crc
_MASK_DELTA = 0xA282EAD8
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")


class CorruptRecordError(ValueError):
    """A TFRecord frame whose length, CRC or size is wrong."""


def _mask(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data) -> int:
    return _mask(
        google_crc32c.value(bytes(data) if not isinstance(data, (bytes, memoryview)) else data)
    )


def frame(payload: bytes) -> bytes:
    """One framed record, ready to append to a file."""
    return frame_parts((payload,))


def frame_parts(parts: Sequence[bytes]) -> bytes:
    """The framed record of ``b"".join(parts)``, joined once: the payload is copied into the
    frame and nowhere else (its CRC is extended part by part)."""
    n, crc = 0, 0
    for part in parts:
        n += len(part)
        crc = google_crc32c.extend(crc, part)
    length = _U64.pack(n)
    return b"".join((length, _U32.pack(masked_crc32c(length)), *parts, _U32.pack(_mask(crc))))


class TFRecordWriter:
    """Appends framed records to a binary file object, counting records and bytes."""

    def __init__(self, fileobj: BinaryIO):
        self._f = fileobj
        self.records = 0
        self.bytes = 0

    def write(self, payload: bytes) -> int:
        data = frame(payload)
        self._f.write(data)
        self.records += 1
        self.bytes += len(data)
        return len(data)


#: the most one read of a frame's body asks for: a length field is only a claim (2^40 in a
#: damaged or hostile file), and one read of that size allocates it before the file ends
_READ_STEP = 64 << 20


def _read_up_to(fileobj: BinaryIO, n: int) -> bytes:
    """``n`` bytes of ``fileobj``, or fewer where it ends; memory follows the bytes there
    are, not ``n``."""
    if n <= _READ_STEP:
        return fileobj.read(n)
    buf = bytearray()
    while len(buf) < n:
        part = fileobj.read(min(_READ_STEP, n - len(buf)))
        if not part:
            break
        buf += part
    return bytes(buf)


def iter_frames(fileobj: BinaryIO, check_crc: bool = True) -> Iterator[Tuple[int, bytes]]:
    """Yield (offset, payload) for each record; raise CorruptRecordError on damage."""
    offset = 0
    while True:
        header = fileobj.read(12)
        if not header:
            return
        if len(header) < 12:
            raise CorruptRecordError(f"truncated header at offset {offset}")
        (length,) = _U64.unpack_from(header, 0)
        (lcrc,) = _U32.unpack_from(header, 8)
        if check_crc and masked_crc32c(header[:8]) != lcrc:
            raise CorruptRecordError(f"length CRC mismatch at offset {offset}")
        body = _read_up_to(fileobj, length + 4)
        if len(body) < length + 4:
            raise CorruptRecordError(
                f"truncated record at offset {offset}: {len(body)} of {length + 4} bytes"
            )
        payload = body[:length]
        if check_crc and masked_crc32c(payload) != _U32.unpack_from(body, length)[0]:
            raise CorruptRecordError(f"data CRC mismatch in record at offset {offset}")
        yield offset, payload
        offset += 12 + length + 4


def read_records(path_or_file, check_crc: bool = True) -> Iterator[bytes]:
    """Payloads of a TFRecord file (a local path or an open binary file: a bucket's object
    is opened by its store, which sits above this module)."""
    if hasattr(path_or_file, "read"):
        for _, payload in iter_frames(path_or_file, check_crc):
            yield payload
        return
    with open(path_or_file, "rb") as f:
        for _, payload in iter_frames(f, check_crc):
            yield payload


def record_index(fileobj: BinaryIO, check_crc: bool = True) -> List[Tuple[int, int]]:
    """(offset, framed size) per record: the DALI ``tfrecord2idx`` content."""
    return [(off, len(p) + FRAME_OVERHEAD) for off, p in iter_frames(fileobj, check_crc)]


class Packer:
    """The greedy packing rule, one record at a time, in order.

    :meth:`starts_shard` says whether a record of ``size`` framed bytes opens a new shard
    (the first record always does).  A shard never exceeds ``max_bytes`` unless one record
    alone does (it then sits alone), holds at most ``max_records`` records, and is never
    empty.  The decision depends only on the sizes seen so far, so a writer can apply it
    while records still arrive (``pipelines.inprocess.stream``) and get the same shards as
    :func:`pack` over the whole list."""

    def __init__(self, max_bytes: Optional[int], max_records: Optional[int]):
        self.max_bytes, self.max_records = max_bytes, max_records
        self.count = self.acc = 0

    def starts_shard(self, size: int) -> bool:
        new = (
            self.count == 0
            or (self.max_bytes is not None and self.acc + size > self.max_bytes)
            or (self.max_records is not None and self.count >= self.max_records)
        )
        if new:
            self.count = self.acc = 0
        self.count += 1
        self.acc += size
        return new


def pack(
    sizes: List[int], max_bytes: Optional[int], max_records: Optional[int]
) -> List[Tuple[int, int]]:
    """Greedy, order-preserving packing of framed record sizes into shards (:class:`Packer`).

    Returns ``[(first_record, end_record), ...]``.  Greedy filling in order is optimal for
    the number of shards when order must be kept, and it depends only on the sizes, so any
    runner and any bundling give the same plan.
    """
    packer = Packer(max_bytes, max_records)
    starts = [i for i, s in enumerate(sizes) if packer.starts_shard(s)]
    return list(zip(starts, starts[1:] + [len(sizes)]))
