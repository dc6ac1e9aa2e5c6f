"""Reading a local file so that a failure says where, as a store's failed read does.

``open(path, "rb")`` raises the OS's bare error (``[Errno 5] Input/output error``) from
deep inside the tar reader, which cannot tell it from a damaged archive.  :func:`open_local`
returns a buffered reader over :class:`LocalFile`, whose reads

* turn an ``OSError`` of the OS (EIO from a failing disk, ESTALE on NFS, ...) into a
  :class:`~transforms.stores.errors.LocalReadError` naming the file, the byte the read
  started at and the OS error;
* check after every read of a regular file that its size and modification time are those
  it had when opened (one ``fstat`` per read of up to 1 MB).  A file truncated, rewritten
  or appended to while it is read raises :class:`~transforms.stores.errors.FileChangedError`
  instead of handing out a mix of two versions, or an early end of file that would look
  like a truncated archive: what is on disk now may be complete again (``cp`` over it is
  a truncation then a rewrite) or a different file, so the shard is a ``fetch`` reject
  ("changed while being read"), not a ``tar`` one.  A file that was already short when it
  was opened is a truncated archive (``tar``): no change happened during the read.

A file deleted or renamed over while it is read is not a change: the open descriptor
keeps reading the same, complete file (POSIX), so its records convert normally.
"""

from __future__ import annotations

import io
import os
import stat
from typing import BinaryIO, Optional, Tuple

from transforms.stores import traffic
from transforms.stores.errors import FileChangedError, LocalReadError

BUFFER = 1 << 20


def open_local(path: str) -> BinaryIO:
    """``path`` opened for reading, buffered (1 MB); errors of the open itself
    (``FileNotFoundError``, ``PermissionError``, ...) are raised unchanged."""
    return io.BufferedReader(LocalFile(path), buffer_size=BUFFER)


class LocalFile(io.RawIOBase):
    """An unbuffered local file whose reads fail with the path and the offset."""

    def __init__(self, path: str):
        self.name = path
        self._f = None
        # opened without blocking: opening a FIFO for reading otherwise waits for a writer
        # forever; anything but a regular file (a FIFO, /dev/zero, a socket...) is refused
        # before a byte is read, as an endless or never-ending input would hang the job
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise NotRegularFileError(path, _kind(mode))
            os.set_blocking(fd, True)
            self._f = os.fdopen(fd, "rb", buffering=0)
        except BaseException:
            os.close(fd)
            raise
        self._pos = 0
        try:
            self._stamp = self._stat()
        except BaseException:
            self._f.close()
            raise

    def _stat(self) -> Tuple[int, int]:
        st = os.fstat(self._f.fileno())
        return st.st_size, st.st_mtime_ns

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self._f.seekable()

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = self._f.seek(offset, whence)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def fileno(self) -> int:
        return self._f.fileno()

    def readinto(self, b) -> Optional[int]:
        try:
            n = self._f.readinto(b)
            now = self._stat() if self._stamp is not None else None
        except OSError as e:
            raise LocalReadError(self.name, self._pos, e) from e
        if now is not None and now != self._stamp:
            raise FileChangedError(
                self.name, f"at byte {self._pos}: {_what_changed(self._stamp, now)}"
            )
        self._pos += n or 0
        traffic.add("local", "read", n or 0)
        return n

    def readall(self) -> bytes:
        chunks = []
        while True:
            chunk = self.read(BUFFER)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            traffic.flush()
        super().close()


class NotRegularFileError(OSError):
    """A local input that is not a regular file (a FIFO, a device, a socket): refused, as
    reading it may never end."""

    def __init__(self, path: str, kind: str):
        super().__init__(f"not a regular file ({kind}): {path}")
        self.path, self.kind = path, kind


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return f"file type {stat.S_IFMT(mode):o}"


def _what_changed(before: Tuple[int, int], now: Tuple[int, int]) -> str:
    if before[0] != now[0]:
        return f"the file was {before[0]} bytes when opened and is now {now[0]} bytes"
    return "the file was modified (its modification time changed)"
