"""A shard's byte stream as the tar reader takes it (:mod:`transforms.tar.grouping`): any
file-like object made peekable, a gzip stream sniffed and decoded, and the compressed
bytes under the gzip reader counted, so that what is read past the archive's end can be
bounded (:mod:`transforms.tar.trailer`).
"""

from __future__ import annotations

import gzip
import io
from typing import BinaryIO, Optional, Tuple


def open_stream(stream: BinaryIO) -> Tuple[BinaryIO, Optional[Source]]:
    """Gzip streams are decoded by :mod:`gzip`, which checks the CRC32 and length trailer
    (tarfile's own gzip reader does not).  The second value is the compressed source under
    the gzip reader (None for a plain tar), whose reads can be bounded once the archive
    has ended."""
    if not hasattr(stream, "peek"):
        stream = (
            io.BufferedReader(stream) if isinstance(stream, io.RawIOBase) else _Peekable(stream)
        )
    if stream.peek(2)[:2] == b"\x1f\x8b":
        source = Source(stream)
        return gzip.GzipFile(fileobj=source, mode="rb"), source
    return stream, None


class PastTheEnd(Exception):
    """The compressed source was read as far past the archive's end as
    :meth:`Source.stop_after` allowed."""


class Source:
    """The compressed stream as the gzip reader takes it, counting the bytes taken.  After
    :meth:`stop_after` it gives at most ``n`` more and then raises :class:`PastTheEnd`:
    the gzip reader consumes zero padding after a member one byte at a time, without
    end, so bounding what it decompresses is not enough to bound what it reads."""

    def __init__(self, f: BinaryIO):
        self._f = f
        self.taken = 0
        self._limit: Optional[int] = None

    def stop_after(self, n: int) -> None:
        self._limit = self.taken + n

    def read(self, n: int = -1) -> bytes:
        if self._limit is not None:
            left = self._limit - self.taken
            if left <= 0:
                raise PastTheEnd()
            n = left if n is None or n < 0 else min(n, left)
        data = self._f.read(n)
        self.taken += len(data)
        return data


class _Peekable(io.BufferedReader):
    def __init__(self, f):
        super().__init__(_RawAdapter(f))


class _RawAdapter(io.RawIOBase):
    def __init__(self, f):
        self._f = f

    def readable(self):
        return True

    def readinto(self, b):
        data = self._f.read(len(b))
        b[: len(data)] = data
        return len(data)
