"""Where bytes live: one small interface over local disks, AIStore, GCS and Beam filesystems.

Every location is a URL string: a local path (``/data/x.tar``, ``file:///data/x.tar``),
``ais://bucket/obj``, ``gs://bucket/obj``, or any other scheme Beam's ``FileSystems``
knows.  A :class:`Store` does five things with URLs of its scheme:

* ``list(prefix)``     every object URL that starts with ``prefix`` (pages followed);
* ``open_read(url)``   a streaming, read-only binary file (never the whole object in RAM);
* ``open_write(url)``  a context manager yielding a binary file that becomes visible under
                       ``url`` only when the ``with`` block exits cleanly (atomic);
                       ``durable=False`` (scratch files: pieces, unit blobs) skips the
                       fsync, which is safe because ``--resume`` re-hashes them;
* ``exists``, ``delete``, ``size``.

Errors: a missing object raises ``FileNotFoundError``; a refused one ``PermissionError``.
Transient faults are retried inside the store (see ``transforms.stores.retry``); what escapes is
final.  Stores are cheap to build and picklable through :class:`StoreConfig`, so Beam
workers rebuild them in ``DoFn.setup``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from typing import BinaryIO, Dict, Iterator, Optional, Tuple

from transforms.stores import traffic
from transforms.stores.base import Store, StoreConfig, basename, dirname, join, split_url
from transforms.stores.local_read import open_local

__all__ = [
    "Store",
    "StoreConfig",
    "LocalStore",
    "BeamFileSystemStore",
    "get_store",
    "split_url",
    "join",
    "dirname",
    "basename",
]


class LocalStore(Store):
    """Local files.  Reads fail naming the path and the offset, also when the file changes
    while it is read (:mod:`transforms.stores.local_read`).  Atomic writes go to a hidden temp
    file in the same directory, are fsync'ed (unless ``durable=False``), then
    ``os.replace``d onto the final name."""

    @staticmethod
    def _path(url: str) -> str:
        return split_url(url)[2]

    def list(self, prefix: str) -> Iterator[str]:
        path = self._path(prefix)
        root = path if path.endswith(os.sep) else os.path.dirname(path)
        root = root or "."
        if not os.path.isdir(root):
            return
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for fn in sorted(filenames):
                full = os.path.join(dirpath, fn)
                if root == "." and not path.startswith("./"):
                    full = os.path.relpath(full)
                if full.startswith(path):
                    yield full

    def open_read(self, url: str) -> BinaryIO:
        path = self._path(url)
        if os.path.isdir(path):
            raise IsADirectoryError(path)
        return open_local(path)

    @contextlib.contextmanager
    def open_write(self, url: str, durable: bool = True):
        path = self._path(url)
        d = os.path.dirname(path) or "."
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, local_temp_name(os.path.basename(path)))
        f = ParkableFile(tmp, counted=True)
        try:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
            f.close()
            os.replace(tmp, path)
        except BaseException:
            # closing flushes what is buffered: on a full disk that fails again, and the
            # temporary file must go all the same
            with contextlib.suppress(OSError):
                f.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def exists(self, url: str) -> bool:
        return os.path.exists(self._path(url))

    def delete(self, url: str) -> None:
        path = self._path(url)
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def size(self, url: str) -> int:
        return os.path.getsize(self._path(url))


class ParkableFile:
    """A local file being written (1 MB buffer) that can give its descriptor back while it
    waits (:meth:`park`) and takes a new one when it is used again.  A job writing many
    small final shards has many of them waiting at once -- for the ranges worker processes
    fill, or for the one thread that makes them durable -- and open descriptors are few
    (1024 by default on Linux, 256 on macOS): a parked file holds none."""

    def __init__(self, path: str, counted: bool = False):
        self.name = path
        self._counted = counted  # a store's file (traffic counts it), not an upload's spool
        self._f: Optional[BinaryIO] = open(path, "wb", buffering=1 << 20)
        self._pos = 0
        self._closed = False

    def _file(self) -> BinaryIO:
        if self._f is None:
            if self._closed:
                raise ValueError(f"I/O operation on closed file {self.name}")
            self._f = open(self.name, "r+b", buffering=1 << 20)
            self._f.seek(self._pos)
        return self._f

    def write(self, data) -> int:
        n = self._file().write(data)
        if self._counted:
            traffic.add("local", "write", n)
        return n

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._file().seek(offset, whence)

    def tell(self) -> int:
        return self._file().tell() if self._f is not None else self._pos

    def fileno(self) -> int:
        return self._file().fileno()

    def flush(self) -> None:
        if self._f is not None:
            self._f.flush()

    def park(self) -> None:
        """Flush and close the descriptor; the next use reopens the file where it was."""
        if self._f is not None:
            self._pos = self._f.tell()
            self._f.close()
            self._f = None

    def close(self) -> None:
        self._closed = True
        if self._f is not None:
            self._f.close()
            self._f = None
        if self._counted:
            traffic.flush()

    @property
    def closed(self) -> bool:
        return self._closed

    def __getattr__(self, name):  # anything else a writer may use (writelines, truncate...)
        return getattr(self._file(), name)


def local_temp_name(name: str) -> str:
    """Where :meth:`LocalStore.open_write` writes ``name`` until it is complete (hidden)."""
    return f".{name}.tmp-{uuid.uuid4().hex[:12]}"


LOCAL_TEMP = re.compile(r"\.(?P<name>.+)\.tmp-[0-9a-f]{12}\Z")  # a local_temp_name


class BeamFileSystemStore(Store):
    """Any other scheme Beam's FileSystems supports (hdfs://, ...).

    Beam's filesystems write through a temp object and expose the final name on close,
    which gives the same atomicity on object stores."""

    def list(self, prefix: str) -> Iterator[str]:
        from apache_beam.io.filesystems import FileSystems

        for m in FileSystems.match([prefix + "**"])[0].metadata_list:
            yield m.path

    def open_read(self, url: str) -> BinaryIO:
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems

        if not FileSystems.exists(url):
            raise FileNotFoundError(url)
        return FileSystems.open(url, compression_type=CompressionTypes.UNCOMPRESSED)

    @contextlib.contextmanager
    def open_write(self, url: str, durable: bool = True):
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems

        tmp = url + f".tmp-{uuid.uuid4().hex[:12]}"
        f = FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED)
        try:
            yield f
            f.close()
            FileSystems.rename([tmp], [url])
        except BaseException:
            with contextlib.suppress(Exception):
                f.close()
            with contextlib.suppress(Exception):
                FileSystems.delete([tmp])
            raise

    def exists(self, url: str) -> bool:
        from apache_beam.io.filesystems import FileSystems

        return FileSystems.exists(url)

    def delete(self, url: str) -> None:
        from apache_beam.io.filesystems import FileSystems

        if FileSystems.exists(url):
            FileSystems.delete([url])

    def size(self, url: str) -> int:
        from apache_beam.io.filesystems import FileSystems

        return FileSystems.match([url])[0].metadata_list[0].size_in_bytes


_CACHE: Dict[Tuple[str, StoreConfig], Store] = {}


def get_store(url: str, config: Optional[StoreConfig] = None) -> Store:
    """The store for ``url``'s scheme, built once per (scheme, config) per process."""
    config = config or StoreConfig()
    scheme = split_url(url)[0]
    key = (scheme, config)
    store = _CACHE.get(key)
    if store is None:
        if scheme == "":
            store = LocalStore()
        elif scheme == "ais":
            from transforms.stores.ais import AISStore

            store = AISStore(config)
        elif scheme == "gs":
            from transforms.stores.gcs import GCSStore

            store = GCSStore(config)
        elif scheme in ("http", "https"):
            from transforms.stores.http import HTTPStore

            store = HTTPStore(config)
        elif scheme == "s3":
            from transforms.stores.s3 import S3Store

            store = S3Store(config)
        else:
            store = BeamFileSystemStore()
        _CACHE[key] = store
    return store
