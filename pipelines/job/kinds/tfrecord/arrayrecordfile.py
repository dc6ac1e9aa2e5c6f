"""A final ArrayRecord shard from the planned byte ranges of pieces (``--format array_record``).

Pieces are TFRecord files whatever the format (``pipelines.job.kinds.tfrecord.piece``), so that the plan
(``pipelines.job.kinds.tfrecord.plan``) cuts an ArrayRecord job's shards at exactly the records where the
TFRecord job with the same options cuts them: record ``i`` of shard ``k`` is the same in
both outputs.  :func:`write_array_record_shard` has the contract of
``pipelines.job.kinds.tfrecord.shardfile.write_shard``: it reads the task's byte ranges, takes the
serialized Examples out of their TFRecord frames (checking each frame's CRCs), writes them
with ``array_record``'s writer into a temporary file, and renames it (a local output) or
uploads it as one object (a bucket) once it is complete.  Its manifest row carries the
CRC32C of the whole file, as a TFRecord shard's does.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any, Dict, Iterator, Optional

from pipelines.job.kinds.tfrecord.plan import ShardTask
from transforms.arrayrecord import format as arf
from transforms.stores import StoreConfig, get_store, local_temp_name, split_url
from transforms.tfrecord import digests
from transforms.tfrecord.framing import iter_frames

READ_CHUNK = 1 << 20


class _Window:
    """The ``length`` bytes of an open file from its current position, as a file."""

    def __init__(self, f, length: int):
        self._f, self.left = f, length

    def read(self, n: int = -1) -> bytes:
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self._f.read(n) if n else b""
        self.left -= len(data)
        return data


def _skip(f, offset: int) -> None:
    """Position ``f`` at ``offset``: a seek, or reading past the bytes of a stream."""
    try:
        f.seek(offset)
        return
    except (AttributeError, OSError, ValueError):
        pass
    while offset:
        chunk = f.read(min(READ_CHUNK, offset))
        if not chunk:
            raise IOError("piece shorter than its sidecar says")
        offset -= len(chunk)


def payloads(task: ShardTask, config: Optional[StoreConfig] = None) -> Iterator[bytes]:
    """The serialized records of a shard task, in plan order, out of their frames."""
    for url, offset, length in task.ranges:
        with get_store(url, config).open_read(url) as src:
            _skip(src, offset)
            window = _Window(src, length)
            for _offset, payload in iter_frames(window):
                yield payload
            if window.left:
                raise IOError(f"piece {url} ended {window.left} bytes early")


def _copy(path: str, dst=None):
    """The CRC32C (hex) and size of the file at ``path``, read once; its bytes also go to
    ``dst`` when given (an upload)."""
    digest, n = digests.new("crc32c"), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(READ_CHUNK), b""):
            digest.update(chunk)
            n += len(chunk)
            if dst is not None:
                dst.write(chunk)
    return digests.hexdigest(digest), n


def write_array_record_shard(
    task: ShardTask, config: Optional[StoreConfig] = None, dali_index: bool = False
) -> Dict[str, Any]:
    """Write the task's records as one ArrayRecord file under its final name, atomically;
    return its manifest row ``{path, records, bytes, crc32c}``.  ``dali_index``: refused (a DALI index is for
    TFRecord files; ``ConvertConfig`` refuses the pair before a job starts)."""
    if dali_index:
        raise ValueError("a DALI index describes TFRecord files, not ArrayRecord")
    path = task.path
    local = split_url(path)[0] == ""
    if local:
        # beside the final name, hidden, under the name a killed job's leftovers are
        # recognised by (pipelines.job.names.stale_temporaries)
        final = split_url(path)[2]
        d = os.path.dirname(final) or "."
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, local_temp_name(os.path.basename(final)))
    else:
        fd, tmp = tempfile.mkstemp(prefix="tar2tf-", suffix=".array_record")
        os.close(fd)
    try:
        n = arf.write_file(tmp, payloads(task, config))
        if n != task.records:
            raise IOError(f"{path}: the pieces held {n} records, the plan says {task.records}")
        if arf.num_records(tmp) != n:  # the footer written: the file is whole
            raise IOError(f"{path}: ArrayRecord file holds fewer records than were written")
        if local:
            crc, size = _copy(tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, final)
        else:
            with get_store(path, config).open_write(path) as dst:  # visible when complete
                crc, size = _copy(tmp, dst)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return {"path": path, "records": n, "bytes": size, "crc32c": crc}
