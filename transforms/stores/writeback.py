"""Start the kernel's writeback of a file range without waiting for it.

A final shard is fsync'ed before it gets its name (``transforms.stores.LocalStore``).
Without a hint, the kernel keeps a fresh file's pages dirty for up to 30 s, so that fsync
finds the whole shard unwritten and the job's last shard costs a serial wait at its very
end: ~0.04 s for a 70 MB shard on the benchmark machine, a tenth of a passthrough job.
Writers call :func:`start` as ranges of a shard are complete; the device then writes them
while later records convert, and the closing fsync waits only for the last range.

Linux's ``sync_file_range(SYNC_FILE_RANGE_WRITE)`` does exactly this and nothing else (it
neither waits nor drops cached pages).  Python's :mod:`os` does not expose it and no
maintained package wraps it, so it is called through :mod:`ctypes`: a dozen lines, loaded
at the first call.  ``os.posix_fadvise(POSIX_FADV_DONTNEED)`` would also start writeback,
but it drops the pages from the cache too, which a user reading the shards next would pay
for.  Elsewhere (other systems, file systems that refuse it) :func:`start` does nothing:
it is only ever a head start for the fsync that follows, never needed for correctness.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

# SYNC_FILE_RANGE_WRITE from <linux/fs.h>: start writeback of the range's dirty pages
_WRITE = 2

_call: Optional[Any] = None  # the libc function; False where there is none


def _load():
    global _call
    if _call is None:
        _call = False
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                fn = ctypes.CDLL(None, use_errno=True).sync_file_range
                fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
                fn.restype = ctypes.c_int
                _call = fn
            except (OSError, AttributeError):
                pass
    return _call


def start(fd: int, offset: int, length: int) -> bool:
    """Ask the kernel to start writing bytes ``offset..offset+length-1`` of the open file
    ``fd`` to its device (flush Python's buffer first); returns at once.  False where that
    is not possible (not Linux, a pipe, a file system without it): nothing else happens."""
    fn = _load()
    if not fn or length <= 0:
        return False
    return fn(fd, offset, length, _WRITE) == 0
