"""Atomic writes to object stores: spool locally, then one whole-object upload.

Why this shape: an object store has no rename that is both cheap and atomic, but a single
PUT (AIS) or a single upload (GCS, simple or resumable) of a whole object makes the object
visible only when the upload completes -- an interrupted upload leaves the old object (or
none).  So :func:`spooled_upload` hands the caller a local temporary file (in
``$TMPDIR``, never the whole object in RAM), and on a clean exit of the ``with`` block
uploads it in one request; a transient fault restarts that upload from the first byte of
the spool file (``RetryPolicy``).  If the block raises, nothing is uploaded.

The spool file is a :class:`~transforms.stores.ParkableFile`, as a local output's
temporary file is: a job writing many small shards to a bucket has many of them waiting
for the one thread that uploads them, and a parked spool file holds no descriptor.  How
many bytes may wait is bounded (:func:`spool_limit`; the writer that would exceed it
waits: ``pipelines.inprocess.stream``), so uploads slower than conversion do not fill the disk.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import BinaryIO, Callable, Iterator

from transforms.sizes import parse_size
from transforms.stores import ParkableFile, traffic
from transforms.stores.retry import RetryPolicy

SPOOL_DIR_ENV = "TAR2TF_SPOOL_DIR"
SPOOL_LIMIT_ENV = "TAR2TF_SPOOL_LIMIT"
DEFAULT_SPOOL_LIMIT = 1_000_000_000  # 1 GB


def spool_limit() -> int:
    """Bytes of finished shards that may wait in spool files for the upload thread:
    ``$TAR2TF_SPOOL_LIMIT`` (a size: ``500MB``, ``2GB``, bytes) or 1 GB.  A shard larger
    than the limit still goes, alone."""
    value = os.environ.get(SPOOL_LIMIT_ENV)
    if not value:
        return DEFAULT_SPOOL_LIMIT
    try:
        return parse_size(value)
    except ValueError as e:
        raise ValueError(f"${SPOOL_LIMIT_ENV}: {e}") from None


@contextlib.contextmanager
def spooled_upload(
    url: str, upload: Callable[[str, int], None], policy: RetryPolicy
) -> Iterator[BinaryIO]:
    """Yield a writable local file; on success call ``upload(spool path, size)``, retried.

    The spool goes to ``$TAR2TF_SPOOL_DIR`` or the system temp dir and is always removed;
    it can be parked (:meth:`~transforms.stores.ParkableFile.park`) while it waits."""
    spool_dir = os.environ.get(SPOOL_DIR_ENV) or None
    fd, path = tempfile.mkstemp(prefix="tar2tf-upload-", dir=spool_dir)
    os.close(fd)  # the ParkableFile opens (and parks) its own
    f = ParkableFile(path)
    try:
        yield f
        f.close()
        size = os.path.getsize(path)
        policy.call(lambda: upload(path, size), f"upload {url}")
        traffic.add(traffic.scheme_of(url), "write", size)
        traffic.flush()
    finally:
        f.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
