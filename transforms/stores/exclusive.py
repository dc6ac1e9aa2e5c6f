"""Small objects written only if absent, and replaced or deleted only if unchanged: what a
lock on an output needs from the store it is on (``pipelines.job.output_lock``).

Each operation takes a ``version``: what identifies one write of the object, as the store
can check it in the same request where it can.

========  ===========================================  ==========================================
store     create if absent                             replace / delete if unchanged
========  ===========================================  ==========================================
local     a complete temporary file hard-linked onto   under an ``flock`` of its directory:
          the name (``link`` fails if it exists), so   read and compared, then replaced with
          a reader never sees it half written; where   ``os.replace`` or deleted
          links are not supported, ``O_CREAT|O_EXCL``
gs://     upload with ``ifGenerationMatch=0``          ``ifGenerationMatch=<generation>``
                                                       (a delete also names the generation)
s3://     ``PutObject`` with ``If-None-Match: *``      ``If-Match: <ETag>`` on PutObject and
                                                       DeleteObject (a server that refuses the
                                                       header on a delete: deleted without it)
ais://    no conditional PUT in AIStore (5.0): HEAD,   read, compared, then written / deleted
          PUT, wait :data:`AIS_SETTLE_S`, read back;   (not atomic)
          another writer's token read back means it
          won.  Two creators both win only if one's
          PUT lands more than the settle time after
          its HEAD; the lock's heartbeat then finds
          the other's token (``output_lock``)
========  ===========================================  ==========================================

``FileExistsError``: the object exists (create) or changed (replace / delete).
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
import uuid
from typing import Any, Optional, Tuple

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None

from transforms.stores.base import StoreConfig, split_url
from transforms.stores.retry import status_of

AIS_SETTLE_S = 1.0  # between an AIS lock's PUT and its read-back (see the module docstring)


def _store(url: str, config: Optional[StoreConfig]):
    from transforms.stores.registry import get_store

    return get_store(url, config)


def _precondition_failed(e: BaseException) -> bool:
    seen = 0
    while e is not None and seen < 6:
        if status_of(e) == 412:
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


# -- create -------------------------------------------------------------------------------


def create(url: str, data: bytes, config: Optional[StoreConfig] = None) -> Any:
    """Write ``data`` at ``url`` if nothing is there; its version.  ``FileExistsError``
    if something is (also when another writer won a race for it)."""
    scheme = split_url(url)[0]
    if scheme == "":
        return _local_create(split_url(url)[2], data)
    store = _store(url, config)
    if scheme == "gs":
        blob = store._blob(url)
        try:
            store._call(
                url,
                "create",
                lambda: blob.upload_from_string(
                    data, if_generation_match=0, retry=None, timeout=store.timeout
                ),
            )
        except Exception as e:
            if _precondition_failed(e):
                return _won_anyway(url, data, config)
            raise
        return blob.generation
    if scheme == "s3":
        bucket, key = store._key(url)
        try:
            res = store._call(
                url,
                "create",
                lambda: store.client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*"),
            )
        except Exception as e:
            if _precondition_failed(e) or status_of(e) == 409:  # 409: a concurrent create
                return _won_anyway(url, data, config)
            raise
        return res.get("ETag")
    if scheme == "ais":
        return _ais_create(store, url, data)
    raise ValueError(f"no atomic create-if-absent on {scheme}:// (local, gs://, s3://, ais://)")


def _won_anyway(url: str, data: bytes, config) -> Any:
    """A precondition failed: our own first attempt may have landed before a retried one
    (the retry policy repeats a request whose answer was lost).  Ours if it holds ``data``."""
    try:
        got, version = read(url, config)
    except FileNotFoundError:
        got, version = None, None
    if got == data:
        return version
    raise FileExistsError(errno.EEXIST, "exists", url)


def _local_create(path: str, data: bytes) -> Any:
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f".{os.path.basename(path)}.new-{uuid.uuid4().hex[:12]}")
    try:
        with open(tmp, "wb") as f:  # (a full disk fails here: the finally removes it)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    except FileExistsError:
        raise FileExistsError(errno.EEXIST, "exists", path) from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        # a file system without hard links: exclusive create (a reader may see it empty
        # for the moment it is written, which output_lock reads as held)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return data


def _ais_create(store, url: str, data: bytes) -> Any:
    if store.exists(url):
        raise FileExistsError(errno.EEXIST, "exists", url)
    store.write_bytes(url, data)
    time.sleep(AIS_SETTLE_S)
    try:
        got = store.read_bytes(url)
    except FileNotFoundError:
        got = None
    if got != data:
        raise FileExistsError(errno.EEXIST, "another writer won", url)
    return data


# -- read / replace / delete ----------------------------------------------------------------


def read(url: str, config: Optional[StoreConfig] = None) -> Tuple[bytes, Any]:
    """The object's bytes and version; ``FileNotFoundError`` if absent."""
    scheme = split_url(url)[0]
    store = _store(url, config)
    if scheme == "gs":
        bucket, name = store._split(url)
        blob = store._call(
            url,
            "stat",
            lambda: store.client.bucket(bucket).get_blob(name, retry=None, timeout=store.timeout),
        )
        if blob is None:
            raise FileNotFoundError(url)
        data = store._call(
            url,
            "read",
            lambda: blob.download_as_bytes(
                if_generation_match=blob.generation, retry=None, timeout=store.timeout
            ),
        )
        return data, blob.generation
    if scheme == "s3":
        bucket, key = store._key(url)
        res = store._call(url, "read", lambda: store.client.get_object(Bucket=bucket, Key=key))
        return res["Body"].read(), res.get("ETag")
    data = store.read_bytes(url)
    return data, data  # local and AIS: the bytes are the version (they hold a unique token)


def replace(url: str, data: bytes, version: Any, config: Optional[StoreConfig] = None) -> Any:
    """Write ``data`` over the object if it is still ``version``; the new version."""
    scheme = split_url(url)[0]
    store = _store(url, config)
    try:
        if scheme == "gs":
            blob = store._blob(url)
            store._call(
                url,
                "replace",
                lambda: blob.upload_from_string(
                    data, if_generation_match=version, retry=None, timeout=store.timeout
                ),
            )
            return blob.generation
        if scheme == "s3":
            bucket, key = store._key(url)
            res = store._call(
                url,
                "replace",
                lambda: store.client.put_object(Bucket=bucket, Key=key, Body=data, IfMatch=version),
            )
            return res.get("ETag")
    except FileNotFoundError:
        raise FileExistsError(errno.EEXIST, "gone", url) from None
    except Exception as e:
        if _precondition_failed(e):
            raise FileExistsError(errno.EEXIST, "changed", url) from None
        raise
    if scheme == "":
        return _local_replace(split_url(url)[2], data, version)
    if read(url, config)[0] != version:
        raise FileExistsError(errno.EEXIST, "changed", url)
    store.write_bytes(url, data)
    return data


@contextlib.contextmanager
def flocked(path: str, create: bool = False):
    """An exclusive ``flock`` of ``path`` (a directory, or a lock file made if ``create``),
    held by this process for the block; the kernel releases it if the process dies, so a
    crash leaves no stale lock."""
    if fcntl is None:
        raise OSError(errno.ENOSYS, "flock is not available on this system", path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT if create else os.O_RDONLY, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # and with it the flock


@contextlib.contextmanager
def local_guard(path: str):
    """An exclusive ``flock`` on the directory of the local object ``path``, held while a
    replace or delete compares and then writes: no other process's replace or delete (a
    takeover) can fall between the two, and overwrite a lock it did not read.  Readers
    and creators need none: every write is a rename or a link, seen whole."""
    if fcntl is None:  # no flock here (not POSIX): compare and write unguarded
        yield
        return
    with flocked(os.path.dirname(os.path.abspath(path))):
        yield


def _local_replace(path: str, data: bytes, version: bytes) -> bytes:
    tmp = os.path.join(
        os.path.dirname(path) or ".", f".{os.path.basename(path)}.new-{uuid.uuid4().hex[:12]}"
    )
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        with local_guard(path):
            got = _local_current(path)
            if got is None:
                raise FileExistsError(errno.EEXIST, "gone", path)
            if got != version:
                raise FileExistsError(errno.EEXIST, "changed", path)
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return data


def delete(url: str, version: Any, config: Optional[StoreConfig] = None) -> bool:
    """Delete the object if it is still ``version``: True if deleted, False if it was
    already gone; ``FileExistsError`` if it changed."""
    scheme = split_url(url)[0]
    if scheme == "":
        return _local_delete(split_url(url)[2], version)
    store = _store(url, config)
    try:
        if scheme == "gs":
            # that generation only (``generation=``, which fake-gcs-server honours too; on
            # a bucket without versioning another live generation answers 404)
            blob = store._blob(url, generation=version)
            try:
                store._call(
                    url,
                    "delete",
                    lambda: blob.delete(
                        if_generation_match=version, retry=None, timeout=store.timeout
                    ),
                )
            except FileNotFoundError:
                if store.exists(url):
                    raise FileExistsError(errno.EEXIST, "changed", url) from None
                raise
            return True
        if scheme == "s3":
            bucket, key = store._key(url)
            try:
                store._call(
                    url,
                    "delete",
                    lambda: store.client.delete_object(Bucket=bucket, Key=key, IfMatch=version),
                )
            except Exception as e:
                if _precondition_failed(e) or status_of(e) not in (400, 501):
                    raise
                store.delete(url)  # a server without conditional deletes
            return True
    except FileNotFoundError:
        return False
    except Exception as e:
        if _precondition_failed(e):
            raise FileExistsError(errno.EEXIST, "changed", url) from None
        raise
    try:
        if read(url, config)[0] != version:
            raise FileExistsError(errno.EEXIST, "changed", url)
    except FileNotFoundError:
        return False
    store.delete(url)
    return True


def _local_delete(path: str, version: bytes) -> bool:
    # the file exists until the unlink, so no creator can slip in; every replace and
    # delete of it waits for the guard
    with local_guard(path):
        got = _local_current(path)
        if got is None:
            return False
        if got != version:
            raise FileExistsError(errno.EEXIST, "changed", path)
        os.unlink(path)
    return True


def _local_current(path: str) -> Optional[bytes]:
    """The local object's bytes (read under :func:`local_guard`), None if it is absent."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
