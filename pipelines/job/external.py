"""Rows keyed by a uniform hash, grouped in bounded memory: the job's global steps over
every record (the duplicate-key check, the shuffle's order) use this instead of one list
of all records.

:func:`buckets` takes the rows a piece at a time (numpy structured arrays whose first
field is an unsigned big-endian integer of a uniform hash: its leading bits pick the
bucket) and yields them again bucket by bucket, in the order of those leading bits.  Up
to :data:`BUCKET_ROWS` rows in all, they stay in memory as one bucket.  Beyond, each
piece's rows are appended to one of 2^b bucket files in a local temporary directory (b
chosen so that a bucket holds about :data:`BUCKET_ROWS` rows), and each bucket file is
read back whole: memory is one bucket (plus one piece), disk is one copy of the rows.
"""

from __future__ import annotations

import math
import os
import tempfile
from typing import Iterable, Iterator, Tuple

import numpy as np

# rows per bucket: 250 k rows of <= 32 bytes is 8 MB, plus a sort's copies and index
# arrays (about 4 times that): small next to a driver's own footprint, and 2^12 bucket
# files at 10^9 records
BUCKET_ROWS = 250_000


def _open_files(n: int) -> None:
    """Allow this process ``n`` more open files than now, where its hard limit allows."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = n + 256
        if soft != resource.RLIM_INFINITY and soft < want:
            top = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))
    except (ImportError, ValueError, OSError):
        pass  # the open() of a bucket file then says what is missing


def bucket_bits(total: int, per_bucket: int = BUCKET_ROWS) -> int:
    """How many leading hash bits pick the bucket of ``total`` rows (0: one bucket)."""
    return 0 if total <= per_bucket else math.ceil(math.log2(total / per_bucket))


def split(rows: np.ndarray, bits: int) -> Iterator[Tuple[int, np.ndarray]]:
    """``(bucket, its rows)`` for each bucket ``rows`` fill, in bucket order: the bucket of
    a row is the leading ``bits`` bits of its first field (an unsigned big-endian int)."""
    first = rows.dtype.names[0]
    shift = np.uint64(8 * rows.dtype[first].itemsize - bits)
    which = (rows[first].astype(np.uint64) >> shift).astype(np.int64)
    order = np.argsort(which, kind="stable")
    rows, which = rows[order], which[order]
    cuts = np.searchsorted(which, np.arange((1 << bits) + 1))
    for b in np.unique(which):
        yield int(b), rows[cuts[b] : cuts[b + 1]]


def buckets(
    chunks: Iterable[np.ndarray], dtype: np.dtype, total: int, per_bucket: int = BUCKET_ROWS
) -> Iterator[np.ndarray]:
    """The rows of ``chunks`` (``total`` of them), bucket by bucket in the order of their
    first field's leading bits; within a bucket, in no particular order."""
    bits = bucket_bits(total, per_bucket)
    if bits == 0:
        parts = [c for c in chunks if len(c)]
        yield np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
        return
    _open_files(1 << bits)
    with tempfile.TemporaryDirectory(prefix="tar2tf-buckets-") as d:
        files = [open(os.path.join(d, f"{b:05d}"), "wb") for b in range(1 << bits)]
        try:
            for c in chunks:
                if not len(c):
                    continue
                for b, part in split(c, bits):
                    files[b].write(part.tobytes())
        finally:
            for f in files:
                f.close()
        for b in range(1 << bits):
            path = os.path.join(d, f"{b:05d}")
            yield np.fromfile(path, dtype=dtype)
            os.unlink(path)  # the disk held shrinks as the buckets are consumed
