"""Atomic writes to object stores: spool locally, then one whole-object upload.

Why this shape: an object store has no rename that is both cheap and atomic, but a single
PUT (AIS) or a single upload (GCS, simple or resumable) of a whole object makes the object
visible only when the upload completes -- an interrupted upload leaves the old object (or
none).  So :func:`spooled_upload` hands the caller a local temporary file (in
``$TMPDIR``, never the whole object in RAM), and on a clean exit of the ``with`` block
uploads it in one request; a transient fault restarts that upload from the first byte of
the spool file (``RetryPolicy``).  If the block raises, nothing is uploaded.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import BinaryIO, Callable, Iterator

from transforms.retry import RetryPolicy

SPOOL_DIR_ENV = "TAR2TF_SPOOL_DIR"


@contextlib.contextmanager
def spooled_upload(url: str, upload: Callable[[str, int], None], policy: RetryPolicy) -> Iterator[BinaryIO]:
    """Yield a writable local file; on success call ``upload(spool path, size)``, retried.

    The spool goes to ``$TAR2TF_SPOOL_DIR`` or the system temp dir and is always removed."""
    spool_dir = os.environ.get(SPOOL_DIR_ENV) or None
    with tempfile.NamedTemporaryFile(prefix="tar2tf-upload-", dir=spool_dir) as f:
        yield f
        f.flush()
        size = f.tell()
        policy.call(lambda: upload(f.name, size), f"upload {url}")
