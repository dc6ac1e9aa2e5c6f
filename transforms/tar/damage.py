"""What a broken or damaged tar stream becomes (:mod:`transforms.tar.grouping`): the
errors a damaged stream raises, how a failed read is told from damage in the archive, and
the rejects of the record being read and of the shard.

A read that the store gave up on mid-object, or that the OS failed on a local file, is no
damage in the archive: its rejects have stage ``fetch`` and name the object or file.  A
gzip check that fails is a :class:`ShardCorrupt`: nothing of the shard is trusted.  Any
other failure is a truncated or corrupt tar.
"""

from __future__ import annotations

import gzip
import tarfile
import zlib
from typing import Optional, Tuple

from transforms.record_types import Reject
from transforms.stores.errors import (
    FetchError,
    FileChangedError,
    LocalReadError,
    ObjectChangedError,
)

# What a damaged stream can raise from the tar reader (TarFormatError is a tarfile.TarError) / gzip / zlib.
STREAM_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError, ValueError)


class ShardCorrupt(Reject):
    """The shard's integrity check failed after records were already produced (a gzip
    CRC or length mismatch at the end of the stream).  Consumers that can still take
    records back (the converter, before finalization) reject every record of the shard;
    content that may be wrong is never written as good."""


class StreamBroke(Exception):
    """The stream failed while the header of the next member (``member`` None) or the data
    of ``member`` was read: ``error`` is what the reader raised."""

    def __init__(self, error: BaseException, member: Optional[str] = None):
        super().__init__(error)
        self.error, self.member = error, member


def unreadable(shard: str, e: BaseException) -> Reject:
    """The shard-level reject of a stream that fails before its first member."""
    broke = fetch_broke(e)
    if broke:
        return Reject(shard, None, "fetch", broke, counts_record=False)
    return Reject(shard, None, "tar", f"not a tar archive: {describe(e)}", counts_record=False)


def broken(b: StreamBroke, shard: str, members: int) -> Tuple[str, str, Reject]:
    """A stream that broke after ``members`` members, in a header or inside member
    ``b.member``: the stage and reason of the reject of the record read last (it may have
    lost members), and the shard-level reject.  The records before it are complete.  A
    failed read is a ``fetch`` reject; a gzip check that fails is a :class:`ShardCorrupt`
    (nothing of the shard is trusted); any other damage is a truncated or corrupt tar."""
    e, name = b.error, b.member
    broke, what = fetch_broke(e), describe(e)
    if broke:
        if name is None:
            reason = f"{broke}; the read broke after this record"
            where = f"after {members} members, the records before them are kept"
        else:
            reason = f"{broke}; member {name} is incomplete"
            where = f"inside member {name}, the records before it are kept"
        return (
            "fetch",
            reason,
            Reject(shard, None, "fetch", f"{broke}; the read broke {where}", counts_record=False),
        )
    if name is None:
        reason = f"truncated shard: the stream broke after this record ({what})"
    elif is_integrity_error(e):
        # a gzip member (bgzip, `cat a.gz b.gz`) ended inside this tar member and failed
        # its CRC: as on the header path, nothing of the shard is trusted
        reason = f"corrupt shard: reading member {name} failed the gzip check ({what})"
    else:
        reason = f"truncated shard: member {name} is incomplete ({what})"
    if is_integrity_error(e):
        return (
            "tar",
            reason,
            ShardCorrupt(shard, None, "tar", f"corrupt gzip: {what}", counts_record=False),
        )
    where = f"after {members} members" if name is None else f"inside member {name}"
    return (
        "tar",
        reason,
        Reject(
            shard, None, "tar", f"truncated or corrupt archive {where}: {what}", counts_record=False
        ),
    )


def fetch_broke(e: BaseException) -> Optional[str]:
    """The reason of a ``fetch`` reject when the store's or the OS's read failed (not the
    archive), else None."""
    if isinstance(e, FileChangedError):
        return f"file changed while being read: {e.url} ({e.detail})"
    if isinstance(e, ObjectChangedError):
        return f"object changed while being read: {e.url} ({e.detail})"
    if isinstance(e, LocalReadError):  # the OS failed a read of a local file: EIO, ESTALE...
        return str(e)
    if isinstance(e, FetchError):  # retries spent, or an error no retry helps
        return f"fetch failed mid-object: {e}"
    return None


def is_integrity_error(e: BaseException) -> bool:
    text = str(e)
    return "CRC check failed" in text or "Incorrect length" in text


def is_trailing_garbage(e: BaseException) -> bool:
    """gzip raises this only where a new member's header should start: at the start (the
    stream was sniffed as gzip, so not there) or after a member whose CRC and length it
    has just checked."""
    return isinstance(e, gzip.BadGzipFile) and str(e).startswith("Not a gzipped file")


def describe(e: BaseException) -> str:
    msg = str(e) or e.__class__.__name__
    return f"{e.__class__.__name__}: {msg}" if e.__class__.__name__ not in msg else msg
