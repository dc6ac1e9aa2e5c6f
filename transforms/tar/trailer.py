"""What follows a tar's end-of-archive marker (:mod:`transforms.tar.grouping`): read, to
check a gzip stream's trailer and to report data that no tar reader would list, but never
further than a bound, so that a stream that never ends still ends its shard.
"""

from __future__ import annotations

import gzip
from typing import BinaryIO, Iterator, Optional

from transforms.record_types import Reject
from transforms.tar.damage import (
    STREAM_ERRORS,
    ShardCorrupt,
    describe,
    fetch_broke,
    is_trailing_garbage,
)
from transforms.tar.decompress import PastTheEnd, Source

# How far past the end-of-archive marker a stream is read: zero padding to the tar's
# blocking (10 KiB by default, 1 MiB for `tar -b 2048`), a gzip trailer, or the start of
# data tar would ignore (a concatenated archive) all fit; a stream that goes on further (a
# server sending an endless body, an endless gzip member) is not read to its end.
AFTER_END_LIMIT = 4 << 20
# The same for the compressed bytes under a gzip reader: tar's padding compresses to almost
# nothing, and Python's gzip reader eats zeros after a gzip member one byte at a time.
AFTER_END_COMPRESSED = 1 << 20


def after_the_end(
    stream: BinaryIO, source: Optional[Source], offset: int, shard: str
) -> Iterator[Reject]:
    """Read what follows the end-of-archive block at ``offset``, to the end of the stream
    but no further than :data:`AFTER_END_LIMIT` bytes past it (and, under a gzip reader,
    no further than :data:`AFTER_END_COMPRESSED` bytes of its compressed ``source``).

    Records end at that block, as GNU tar's listing does (without ``-i``), but what follows
    is read: gzip checks its CRC trailer only at the end of each member.  Zero padding
    (tar fills its 10 KiB records) is normal; other data, e.g. ``cat a.tar b.tar``, whose
    second archive no tar reader lists, is reported so that its records are not lost
    unnoticed.  Bytes after a complete gzip stream that are not gzip are ignored like
    ``gzip -d`` does ("trailing garbage ignored"): the gzip reader has checked the CRC of
    the member before them when it finds they are no gzip header, so the records stand.
    Any other error, a CRC or length mismatch above all, leaves the content unverified: a
    :class:`ShardCorrupt`.  So does a gzip stream that goes on past the limit (its
    trailer is never reached); a plain stream that does (a server sending an endless
    body) keeps its records, with a shard-level reject that says reading stopped.
    """
    if source is not None:
        source.stop_after(AFTER_END_COMPRESSED)
    pos, data_at, error, cut = offset, None, None, None
    limit = offset + AFTER_END_LIMIT
    try:
        while pos <= limit:  # one byte past the limit tells that the stream goes on
            chunk = stream.read(min(1 << 16, limit + 1 - pos))
            if not chunk:
                break
            if data_at is None and chunk.count(0) != len(chunk):
                data_at = pos + len(chunk) - len(chunk.lstrip(b"\0"))
            pos += len(chunk)
        if pos > limit:
            cut = f"{AFTER_END_LIMIT} bytes"
    except PastTheEnd:
        cut = f"{AFTER_END_COMPRESSED} compressed bytes"
    except STREAM_ERRORS as e:
        error = e
    if cut:
        what = (
            f"stream goes on after the end-of-archive marker: reading stopped {cut} past it "
            f"(offset {offset})"
        )
        if data_at is not None:
            what += f", with data from offset {data_at} on"
        if isinstance(stream, gzip.GzipFile):
            yield ShardCorrupt(
                shard,
                None,
                "tar",
                f"{what}, before the gzip CRC check at the end of the stream: content unverified",
                counts_record=False,
            )
        else:
            yield Reject(
                shard,
                None,
                "tar",
                f"{what}, as tar stops at the marker; the records before it are kept",
                counts_record=False,
            )
        return
    if data_at is not None:
        yield Reject(
            shard,
            None,
            "tar",
            f"ignored {pos - data_at} bytes of data after the end-of-archive marker (from offset "
            f"{data_at}; e.g. a concatenation of tars, whose later archives tar does not list)",
            counts_record=False,
        )
    if error is None:
        return
    broke = fetch_broke(error)
    if broke and not isinstance(stream, gzip.GzipFile):
        yield Reject(
            shard,
            None,
            "fetch",
            f"{broke}; the read broke after the end-of-archive marker, "
            "the records are complete and kept",
            counts_record=False,
        )
        return
    if broke:  # the gzip trailer, which vouches for the records, was not reached
        yield ShardCorrupt(
            shard,
            None,
            "fetch",
            f"{broke}; the read broke before the gzip CRC check at the "
            "end of the stream: content unverified",
            counts_record=False,
        )
        return
    if is_trailing_garbage(error):
        yield Reject(
            shard,
            None,
            "tar",
            f"trailing garbage after the gzip stream ignored, like gzip -d ({describe(error)}); "
            "the records passed the gzip CRC check and are kept",
            counts_record=False,
        )
        return
    yield ShardCorrupt(shard, None, "tar", f"corrupt gzip: {describe(error)}", counts_record=False)
