"""Copies a store makes without passing the bytes through tar2tf.

A final TFRecord shard is byte ranges of pieces, concatenated (``pipelines.job.kinds.tfrecord.shardfile``).
Where the store can concatenate them itself, the job saves reading and writing every
output byte a second time:

* local files: ``copy_file_range`` (:func:`kernel_copy`), a copy inside the kernel (no
  read into and write out of this process), only when ``$TAR2TF_KERNEL_COPY=1``: on ext4
  the kernel's copy measured slower than tar2tf's own read and write of 1 MB pieces
  (docs/benchmarks.md), but a file system that copies on the server (NFS 4.2) or shares
  blocks (XFS, Btrfs, where offsets are block-aligned) may do better;
* S3: a multipart upload whose parts are ``UploadPartCopy`` requests with a byte range of
  a piece (``transforms.stores.s3``); parts but the last must be >= 5 MiB, so smaller
  ranges are downloaded and sent as ordinary parts (:func:`plan_parts`);
* GCS: ``compose`` of whole objects (``transforms.stores.gcs``); a range that is not a
  whole piece is uploaded as a temporary object first;
* AIS (5.0): nothing concatenates objects on the server; the ranges are downloaded and the
  shard uploaded, as before (docs/object-stores.md).

``$TAR2TF_STORE_COPY=0`` turns all of them off (every range read and written by tar2tf),
for comparison and as a way out should a store refuse them.
"""

from __future__ import annotations

import errno
import os
from typing import List, Optional, Sequence, Tuple

from transforms.stores import traffic

ENV = "TAR2TF_STORE_COPY"
KERNEL_ENV = "TAR2TF_KERNEL_COPY"
# what copy_file_range answers where it cannot copy between these two files at all
_UNSUPPORTED = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF}

Range = Tuple[str, int, int]  # (source URL, offset, length)


def enabled() -> bool:
    """Store-side copies are on unless ``$TAR2TF_STORE_COPY`` is ``0``/``no``/``off``."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "no", "off", "false")


def kernel_copy(src_fd: int, dst_fd: int, src_off: int, dst_off: int, length: int) -> bool:
    """Copy ``length`` bytes at ``src_off`` of ``src_fd`` to ``dst_off`` of ``dst_fd``
    inside the kernel (with ``$TAR2TF_KERNEL_COPY=1``).  False when it is off, or this pair
    of files cannot be copied so (another file system on an old kernel, no
    ``copy_file_range``): nothing was copied, the caller copies.
    A source that ends early is an ``IOError``."""
    fn = getattr(os, "copy_file_range", None)
    if fn is None or not enabled() or os.environ.get(KERNEL_ENV, "").strip() != "1":
        return False
    done = 0
    while done < length:
        try:
            n = fn(src_fd, dst_fd, length - done, src_off + done, dst_off + done)
        except OSError as e:
            if done == 0 and e.errno in _UNSUPPORTED:
                return False
            raise
        if n == 0:
            raise IOError(f"piece ended {length - done} bytes early")
        done += n
    traffic.add("local", "copy", length)
    return True


class Part:
    """One part of an assembled object: either a server-side copy of one range
    (``copy``), or bytes of one or more ranges that go through tar2tf (``ranges``)."""

    def __init__(self, copy: Optional[Range] = None, ranges: Optional[List[Range]] = None):
        self.copy = copy
        self.ranges = ranges or []

    @property
    def length(self) -> int:
        return self.copy[2] if self.copy else sum(r[2] for r in self.ranges)

    def __repr__(self) -> str:
        return f"Part(copy={self.copy!r})" if self.copy else f"Part(ranges={self.ranges!r})"


def plan_parts(ranges: Sequence[Range], min_part: int, max_part: int) -> List[Part]:
    """Parts for a multipart upload of the concatenated ``ranges``: every part but the last
    at least ``min_part`` bytes, none above ``max_part``, as many bytes as possible copied
    by the server.  A range of ``min_part`` bytes or more is a copy part (split at
    ``max_part``); smaller ones gather into uploaded parts, which take the first bytes of
    the next range when they would otherwise stay too small."""
    parts: List[Part] = []
    pending: List[Range] = []
    held = 0
    for url, off, length in ranges:
        if held:  # an uploaded part is gathering: fill it up to min_part first
            take = min(length, min_part - held)
            pending.append((url, off, take))
            held += take
            off, length = off + take, length - take
            if held >= min_part:
                parts.append(Part(ranges=pending))
                pending, held = [], 0
        if not length:
            continue
        if length >= min_part:
            while length:
                n = length if length <= max_part else min(max_part, length - min_part)
                parts.append(Part(copy=(url, off, n)))
                off, length = off + n, length - n
        else:
            pending.append((url, off, length))
            held += length
    if pending:
        if len(pending) == 1:  # the last part may be small: the server copies it all the same
            parts.append(Part(copy=pending[0]))
        else:
            parts.append(Part(ranges=pending))
    return parts
