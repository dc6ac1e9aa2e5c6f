"""The errors a streamed read of an object (or a local file) raises when it fails for good
mid-object.

A module of their own, without the retry machinery (tenacity), so that the tar reader,
which every shard worker imports, can tell a failed fetch from a damaged archive without
importing what only the stores need.  ``transforms.stores.retry`` raises the store ones and
re-exports them; :mod:`transforms.stores.local_read` raises the local ones.
"""

from __future__ import annotations

import errno


class FetchError(IOError):
    """A streamed read failed for good (retries spent, or a permanent error) mid-object.

    An ``OSError``, so code reading a file handles it like any failed read; the tar reader
    turns it into a ``fetch`` reject saying where the stream broke."""


class ObjectChangedError(FetchError):
    """The object was replaced between two requests of one read (a resume after a fault,
    or a seek): going on would splice two versions, so the read fails.  Never retried --
    every retry would reopen the new version at the old offset.

    ``url`` names the object and ``detail`` says what changed where (``at byte N: ...``),
    for the ``fetch`` reject the tar reader makes of it."""

    def __init__(self, url: str, detail: str):
        super().__init__(
            f"{url}: object changed while being read ({detail}); not resuming into another version"
        )
        self.url, self.detail = url, detail

    def __reduce__(self):  # crosses process boundaries (worker processes) with its fields
        return type(self), (self.url, self.detail)


class LocalReadError(FetchError):
    """The OS failed a read of a local file (``EIO`` from a failing disk, ``ESTALE`` on
    NFS, ...): like a store's read failing for good, the archive is not what broke.

    ``path`` names the file, ``offset`` the byte the failed read started at, ``error`` is
    the OS's error (its errno is kept as this error's)."""

    def __init__(self, path: str, offset: int, error: OSError):
        name = errno.errorcode.get(error.errno or 0, "")
        super().__init__(
            f"read error on local file {path} at byte {offset}: {error}"
            + (f" ({name})" if name else "")
        )
        self.errno = error.errno
        self.path, self.offset, self.error = path, offset, error

    def __reduce__(self):
        return type(self), (self.path, self.offset, self.error)


class FileChangedError(FetchError):
    """A local file was modified (its size or modification time changed) while it was
    read: the bytes from the offset ``detail`` names on may belong to another version.
    ``url`` is the file's path."""

    def __init__(self, url: str, detail: str):
        super().__init__(f"{url}: file changed while being read ({detail})")
        self.url, self.detail = url, detail

    def __reduce__(self):
        return type(self), (self.url, self.detail)
