"""Bytes moved through the stores, counted per process when ``$TAR2TF_STORE_TRAFFIC`` is set.

What a job costs a store is the bytes it sends and receives, not the bytes it converts:
a Beam job writes each output byte into a piece and then into a final shard, and on an
object store that second write may be a download and an upload, or a copy the server
does alone.  The benchmark ``benchmarks/transfers.py`` reads these counters.

Counted, by scheme (``local``, ``gs``, ``s3``, ``ais``, ``http``...) and kind:

* ``read``: bytes handed to tar2tf by a read (a local file read, an object downloaded);
* ``write``: bytes tar2tf sent (written into a local file, uploaded as an object);
* ``copy``: bytes the store copied without passing them through tar2tf (a local
  ``copy_file_range``, an S3 ``UploadPartCopy``, a GCS ``compose``).

Not counted: the local spool file an upload goes through (one local write and one local
read of every uploaded byte, ``transforms.stores.upload``), and metadata requests.

Each process writes its totals to ``<dir>/<pid>-<id>.json`` when a counted operation ends
(a read closed, an upload or a copy done) and at exit; :func:`collect` sums the files.
Counting is off (one comparison per call) unless the variable names a directory when the
process first counts (or at :func:`reset`).
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import uuid
from typing import Dict, Optional

ENV = "TAR2TF_STORE_TRAFFIC"
KINDS = ("read", "write", "copy")

_lock = threading.Lock()
_counts: Dict[str, int] = {}
_file: Optional[str] = None
_dir: Optional[str] = None
_pid = os.getpid()


_UNSET = object()
_env: object = _UNSET  # $TAR2TF_STORE_TRAFFIC as first read (reset() reads it again)


def _directory() -> Optional[str]:
    # read once: add() runs for every write of a frame into a local shard
    global _env
    if _env is _UNSET:
        _env = os.environ.get(ENV) or None
    return _env  # type: ignore[return-value]


def scheme_of(url: str) -> str:
    if "://" not in url or url.startswith("file://"):
        return "local"
    return url.split("://", 1)[0]


def add(scheme: str, kind: str, n: int) -> None:
    """Count ``n`` bytes of ``kind`` on ``scheme`` (nothing unless counting is on)."""
    if not n or _directory() is None:
        return
    key = f"{scheme}.{kind}"
    with _lock:
        _forked()
        _counts[key] = _counts.get(key, 0) + int(n)


def _forked() -> None:
    """A forked child starts from zero, in a file of its own (the parent's are its own)."""
    global _file, _dir, _pid
    if os.getpid() != _pid:
        _counts.clear()
        _file = _dir = None
        _pid = os.getpid()


def flush() -> None:
    """Write this process's totals to its file (an operation ended)."""
    global _file, _dir
    d = _directory()
    if d is None:
        return
    with _lock:
        _forked()
        if not _counts:
            return
        if _file is None or _dir != d:
            os.makedirs(d, exist_ok=True)
            _dir, _file = d, os.path.join(d, f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json")
        data = json.dumps(_counts, sort_keys=True)
        tmp = _file + ".tmp"
        with open(tmp, "w") as f:
            f.write(data)
        os.replace(tmp, _file)  # a reader never sees half a file


def reset() -> None:
    """Forget this process's counts and read ``$TAR2TF_STORE_TRAFFIC`` again (a test or
    benchmark starting a new measurement)."""
    global _file, _dir, _env
    with _lock:
        _counts.clear()
        _file = _dir = None
        _env = _UNSET


def collect(directory: str) -> Dict[str, int]:
    """The sums of every process's counts under ``directory``: ``{"gs.read": n, ...}``."""
    flush()
    out: Dict[str, int] = {}
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else ():
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(directory, name)) as f:
                counts = json.load(f)
        except (OSError, ValueError):
            continue
        for k, v in counts.items():
            out[k] = out.get(k, 0) + int(v)
    return out


atexit.register(flush)
