"""The TFDS metadata files of a dataset directory on disk: ``dataset_info.json`` and
``features.json``, the lock that serialises their updates, and their reads and writes.

Each file is written under a temporary name, synced and renamed, ``dataset_info.json``
last: a reader sees the old metadata or the new, never a mix.  The lock is an exclusive
``fcntl`` lock on a file in the directory, released by the kernel if the job dies, so a
crash leaves no stale lock.  A file read back is bounded and must be a regular file: what
cannot be read as the metadata tar2tf writes is a :class:`TfdsError` naming it, never
metadata written over without the splits it names.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from typing import Any

from pipelines.export.tfds_features import TfdsError
from pipelines.export.tfds_names import FILE_FORMATS
from transforms.stores.exclusive import flocked

LOCK_NAME = ".tar2tf-tfds.lock"
INFO_NAME, FEATURES_NAME = "dataset_info.json", "features.json"
#: the largest metadata file read back: a dataset_info.json of thousands of splits and
#: shards is well under it; a file beyond it (a link to a device, a stray dump) is no metadata
MAX_METADATA_BYTES = 64 << 20


def locked(directory: str):
    """An exclusive lock on ``directory``'s TFDS metadata (a context), held by this process
    for the block."""
    return flocked(os.path.join(directory, LOCK_NAME), create=True)


def sync_dir(directory: str) -> None:
    """The renames and removals in ``directory`` made durable."""
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def replace_file(path: str, data: bytes) -> None:
    """``data`` at ``path``, written under a temporary name, synced, then renamed."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tar2tf-tfds-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    sync_dir(directory)


def write_files(info, directory: str) -> None:
    """``info``'s files into ``directory``: each written under a temporary name, synced, then
    renamed, ``dataset_info.json`` last, so that its new splits appear with their features."""
    tmp = tempfile.mkdtemp(prefix=".tar2tf-tfds-", dir=directory)
    try:
        info.write_to_directory(tmp)
        names = sorted(os.listdir(tmp), key=lambda f: (f == INFO_NAME, f))
        for f in names:
            fd = os.open(os.path.join(tmp, f), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for f in names:
            os.replace(os.path.join(tmp, f), os.path.join(directory, f))
        sync_dir(directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def json_file(path: str) -> Any:
    """The JSON in one of the metadata files, or a :class:`TfdsError` naming the file: not
    a regular file (a link to /dev/zero), larger than :data:`MAX_METADATA_BYTES`, not JSON."""
    try:
        # O_NONBLOCK: a FIFO under the name must not hold the job at the open
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise _damaged(path, e.strerror or str(e)) from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise _damaged(path, "not a regular file")
        data = f.read(MAX_METADATA_BYTES + 1)
    if len(data) > MAX_METADATA_BYTES:
        raise _damaged(path, f"larger than {MAX_METADATA_BYTES} bytes")
    try:
        return json.loads(data)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise _damaged(path, f"not JSON: {e}") from None


def _damaged(path: str, why: str) -> TfdsError:
    return TfdsError(
        f"--tfds: {path} is not TFDS metadata ({why}); its splits would be lost, so this "
        f"split was not added: restore the file, or delete {INFO_NAME} and {FEATURES_NAME} "
        "to describe this split alone"
    )


def existing(directory: str):
    """``(DatasetInfo proto, features.json)`` of the metadata already in ``directory``,
    checked: a file that cannot be read as the metadata tar2tf writes is a
    :class:`TfdsError` naming it, never metadata written over it without its splits (an
    empty ``{}`` would otherwise be read as a dataset of no splits)."""
    from google.protobuf import json_format
    from tensorflow_datasets.core.proto import dataset_info_pb2

    info_path = os.path.join(directory, INFO_NAME)
    doc = json_file(info_path)
    if not isinstance(doc, dict) or not isinstance(doc.get("splits"), list) or not doc["splits"]:
        raise _damaged(info_path, "it names no splits")
    try:
        old = json_format.ParseDict(doc, dataset_info_pb2.DatasetInfo())
    except (json_format.ParseError, TypeError, ValueError) as e:
        raise _damaged(info_path, " ".join(str(e).split())[:200]) from None
    if not all(p.name for p in old.splits):
        raise _damaged(info_path, "a split has no name")
    if old.file_format not in FILE_FORMATS.values():
        raise _damaged(info_path, f"file format {old.file_format!r}")
    features_path = os.path.join(directory, FEATURES_NAME)
    features = json_file(features_path)
    if not isinstance(features, dict):
        raise _damaged(features_path, f"a JSON {type(features).__name__}, not an object")
    return old, features
