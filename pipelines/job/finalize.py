"""Finalization: write final shards from pieces, atomically, and the manifest.

Why this shape: every input shard is converted into one *piece* (a TFRecord file), its
record file (``pipelines.job.piecefiles``: framed record sizes, keys, rejects) and a JSON
*sidecar* holding its summary.  Pieces are named by input shard index, so what a worker
wrote never depends on bundling or worker count.  The plan (``pipelines.job.plan``) packs
the records of all pieces, in input order, into final shards with the greedy rule of
:func:`transforms.tfrecord.pack`; since TFRecord files concatenate byte-wise, writing a
final shard is a copy of byte ranges -- no record is parsed or re-framed.  Each final
shard is written under a temporary name and renamed when complete (:class:`ShardFile`).
``pipelines.local.stream`` applies the same rule while the pieces arrive.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

# the names this module once defined, for its importers
from pipelines.job.names import (  # noqa: F401
    companion,
    existing_outputs,
    output_pattern,
    shard_names,
    stale_temporaries,
)
from transforms.records import Reject
from transforms.stores import (
    Store,
    StoreConfig,
    get_store,
    split_url,
    writeback,
)
from transforms.tfrecord import digests

log = logging.getLogger("tar2tf")
COPY_CHUNK = 1 << 20
# a local shard's appended bytes go to the device in ranges of this size while it fills
# (transforms.stores.writeback), so that closing it does not wait for all of them
WRITEBACK_CHUNK = 8 << 20


# -- writing ----------------------------------------------------------------------------


def copy_range(src, dst, offset: int, length: int, digest) -> None:
    """Copy ``length`` bytes at ``offset`` of ``src`` to ``dst``, feeding ``digest``.

    Plain 1 MB reads: google-crc32c only takes ``bytes`` (no memoryview into a reused
    buffer), and 256 KB-1 MB reads measured fastest (~1.5-2 GB/s of CPU for copy + CRC;
    4 MB ``bytes`` objects cost page-faulting allocations)."""
    try:
        src.seek(offset)
    except (AttributeError, OSError, ValueError):
        _discard(src, offset)
    left = length
    while left:
        chunk = src.read(min(COPY_CHUNK, left))
        if not chunk:
            raise IOError(f"piece ended {left} bytes early")
        dst.write(chunk)
        digest.update(chunk)
        left -= len(chunk)


def _discard(src, n: int) -> None:
    while n:
        chunk = src.read(min(COPY_CHUNK, n))
        if not chunk:
            raise IOError("piece shorter than its sidecar says")
        n -= len(chunk)


class ShardFile:
    """One final shard while it is written: bytes appended in order, its crc32c and framed
    record sizes kept, the file under a temporary name until :meth:`close` (fsync, rename),
    removed by :meth:`abort`.  The one writer of final TFRecord shards: the planned copy
    (:func:`write_shard`), the streaming writer (``pipelines.local.stream``) and the
    shuffle (``pipelines.beam.shuffle``) all go through it.

    A local shard can also leave ranges to other processes (:meth:`reserve`): a worker
    writes a range into :attr:`local_path` at its offset and reports the range's CRC-32C
    (:meth:`filled`, from any thread); :meth:`close` waits for every range and combines
    the CRCs (:func:`transforms.tfrecord.digests.crc32c_combine`)."""

    def __init__(self, path: str, config: Optional[StoreConfig] = None, dali_index: bool = False):
        self.path, self.dali_index = path, dali_index
        self.store = get_store(path, config)
        self.digest = digests.new("crc32c")
        self.sizes: List[int] = []  # framed record sizes, kept for a DALI index only
        self.records = 0
        self.bytes = 0
        self._cm = self.store.open_write(path)
        self.f = self._cm.__enter__()
        self._start = 0  # where the bytes that self.digest hashes begin
        # offset -> (length, CRC-32C or None until the range is filled); empty while this
        # process writes every byte itself
        self._ranges: Dict[int, Tuple[int, Optional[int]]] = {}
        self._cv = threading.Condition()
        self._failed: Optional[BaseException] = None
        self._local = self.local_path is not None
        self._flushed = 0  # writeback started for the bytes before this offset

    @property
    def local_path(self) -> Optional[str]:
        """The temporary file other processes write reserved ranges into (local shards
        only; None elsewhere)."""
        name = getattr(self.f, "name", None)
        return name if isinstance(name, str) and split_url(self.path)[0] == "" else None

    def write(self, frames: Sequence[bytes], sizes: Sequence[int]) -> None:
        """Append whole frames (``sizes``: their framed lengths), each in its own
        ``write`` call: the file's 1 MB buffer turns them into few system calls.  (One
        ``writev`` per run of frames, or a larger buffer, measured no faster:
        docs/benchmarks.md, sessions 16-17.)"""
        for fr in frames:
            self.f.write(fr)
            self.digest.update(fr)
        self._count(sizes)
        self.bytes += sum(sizes)
        self._start_writeback()

    def copy(self, src, offset: int, length: int, sizes: Sequence[int]) -> None:
        """Append ``length`` bytes at ``offset`` of the open file ``src`` (whole frames)."""
        copy_range(src, self.f, offset, length, self.digest)
        self._count(sizes)
        self.bytes += length
        self._start_writeback()

    def _count(self, sizes: Sequence[int]) -> None:
        self.records += len(sizes)
        if self.dali_index:
            self.sizes.extend(sizes)

    def _start_writeback(self) -> None:
        """Every :data:`WRITEBACK_CHUNK` bytes, have the kernel start writing the new ones
        to the device (a head start for :meth:`close`'s fsync; local shards only).
        Reserved ranges inside them are started by their writers."""
        if self._local and self.bytes - self._flushed >= WRITEBACK_CHUNK:
            self.f.flush()
            writeback.start(self.f.fileno(), self._flushed, self.bytes - self._flushed)
            self._flushed = self.bytes

    def reserve(self, length: int, sizes: Sequence[int]) -> int:
        """Leave the next ``length`` bytes (whole frames: ``sizes``) to another writer;
        returns their offset in :attr:`local_path`.  Appends continue after them."""
        self._cut()
        offset = self.bytes
        with self._cv:
            self._ranges[offset] = (length, None)
        self._count(sizes)
        self.bytes += length
        self._start = self.bytes
        self.f.seek(self.bytes)
        return offset

    def park(self) -> None:
        """Nothing more is appended here before :meth:`close`: give the file descriptor
        back while the shard waits (a local file, or a bucket object's spool file; see
        ``transforms.stores.ParkableFile``)."""
        park = getattr(self.f, "park", None)
        if park is not None:
            park()

    def filled(self, offset: int, crc: int) -> None:
        """The range reserved at ``offset`` is written; ``crc``: its CRC-32C."""
        with self._cv:
            self._ranges[offset] = (self._ranges[offset][0], crc)
            self._cv.notify_all()

    def cancel(self, exc: BaseException) -> None:
        """A reserved range will never be filled: :meth:`close` (even one already
        waiting) raises ``exc`` and removes the file."""
        with self._cv:
            self._failed = exc
            self._cv.notify_all()

    def _cut(self) -> None:
        """The bytes appended since the last reserved range become a range of their own."""
        if self.bytes > self._start:
            with self._cv:
                self._ranges[self._start] = (
                    self.bytes - self._start,
                    digests.crc32c_of(self.digest),
                )
            self.digest = digests.new("crc32c")
            self._start = self.bytes

    def _crc32c(self) -> str:
        if not self._ranges:  # every byte appended here
            return digests.hexdigest(self.digest)
        self._cut()
        with self._cv:
            while self._failed is None and any(crc is None for _, crc in self._ranges.values()):
                self._cv.wait()
            if self._failed is not None:
                raise self._failed
            crc = 0
            for offset in sorted(self._ranges):
                length, part = self._ranges[offset]
                crc = digests.crc32c_combine(crc, part, length)
        return f"{crc:08x}"

    def close(self) -> Dict[str, Any]:
        """Make the shard durable under its final name (once its reserved ranges are
        filled); its manifest row."""
        try:
            crc = self._crc32c()
        except BaseException as e:
            self.abort(e)
            raise
        self._cm.__exit__(None, None, None)
        if self.dali_index:
            lines, off = [], 0
            for s in self.sizes:
                lines.append(f"{off} {int(s)}\n")
                off += s
            self.store.write_bytes(self.path + ".idx", "".join(lines).encode())
        return {"path": self.path, "records": self.records, "bytes": self.bytes, "crc32c": crc}

    def abort(self, exc: Optional[BaseException] = None) -> None:
        """Remove the temporary file; nothing appears under the final name."""
        exc = exc or RuntimeError(f"writing {self.path} was abandoned")
        self._cm.__exit__(type(exc), exc, exc.__traceback__)


def write_shard(
    task: Dict[str, Any], config: Optional[StoreConfig] = None, dali_index: bool = False
) -> Dict[str, Any]:
    """Copy the task's byte ranges into its final name, atomically; return its manifest row.
    ``task``: one of ``pipelines.job.plan.stream_plan``."""
    shard = ShardFile(task["path"], config, dali_index)
    try:
        for url, offset, length in task["ranges"]:
            with get_store(url, config).open_read(url) as src:
                shard.copy(src, offset, length, ())
    except BaseException as e:
        shard.abort(e)
        raise
    shard.records = task["records"]
    if dali_index:
        shard.sizes = [int(s) for s in task["sizes"]]
    return shard.close()


def has_files(store: Store, prefix: str) -> bool:
    """Whether anything is stored under the directory ``prefix`` (a job's work directory)."""
    return next(iter(store.list(prefix.rstrip("/") + "/")), None) is not None


def delete_tree(store: Store, prefix: str) -> None:
    """Remove a work directory (and its parent, when that is left empty)."""
    if split_url(prefix)[0] == "":
        store.delete(prefix)
        parent = os.path.dirname(prefix.rstrip(os.sep))
        if os.path.isdir(parent) and not os.listdir(parent):
            os.rmdir(parent)
        return
    for url in list(store.list(prefix.rstrip("/") + "/")):
        store.delete(url)


# -- manifest ---------------------------------------------------------------------------


def reject_counts(info: Dict[str, Any]) -> List[Tuple[str, str, int]]:
    """``(stage, kind, count)`` of a piece's rejects: its summary's ``reject_counts`` (a
    TFRecord piece), or counted from its ``rejects`` (a PCR unit's info)."""
    if "reject_counts" in info:
        return [tuple(x) for x in info["reject_counts"]]
    by: Dict[Tuple[str, str], int] = {}
    for r in info["rejects"]:
        k = (r["stage"], Reject.from_dict(r).kind)
        by[k] = by.get(k, 0) + 1
    return [(st, kind, n) for (st, kind), n in sorted(by.items())]


def piece_counts(info: Dict[str, Any]) -> Dict[str, int]:
    """What one converted input shard (its piece summary) adds to the job's counts:
    the Beam counters of the ``tar2tf`` namespace, ``reject:<stage>:<kind>`` included."""
    c = {
        "shards_read": 1,
        "records_read": info["records_read"],
        "records_written": info["records"] if "records" in info else len(info["sizes"]),
        "records_filtered": info["filtered"],
        "bytes_written": info.get("bytes", 0),
        "member_bytes_read": info.get("member_bytes", 0),
        "members_skipped": info.get("skipped_members", 0),
        "members_duplicate": info.get("duplicate_members", 0),
        "records_rejected": 0,
        "shards_rejected": 0,
    }
    if "reject_counts" in info:
        c["records_rejected"] = info["records_rejected"]
        c["shards_rejected"] = info["shards_rejected"]
    else:
        for r in info["rejects"]:
            c["records_rejected" if r.get("record", True) else "shards_rejected"] += 1
    for stage, kind, n in reject_counts(info):
        name = "reject:" + stage + ":" + kind
        # a counter name is UTF-8 text: a member name's undecodable bytes stay escaped
        name = name.encode("utf-8", "backslashreplace").decode("utf-8")
        c[name] = c.get(name, 0) + n
    return c


_PIECE_TOTALS = (
    "shards_read",
    "records_read",
    "records_written",
    "records_rejected",
    "records_filtered",
    "shards_rejected",
    "members_skipped",
    "members_duplicate",
)


def totals_of(
    pieces: Sequence[Dict[str, Any]],
    list_rejects: Sequence[Reject],
    shards: Sequence[Dict[str, Any]],
) -> Dict[str, int]:
    """The manifest totals: the pieces' counts (:func:`piece_counts`), the listing's
    rejected shards, and the bytes and number of the final shards."""
    t = dict.fromkeys(_PIECE_TOTALS, 0)
    t.update(
        shards_rejected=len(list_rejects),
        bytes_written=sum(s["bytes"] for s in shards),
        shards=len(shards),
    )
    for p in pieces:
        c = piece_counts(p)
        for k in _PIECE_TOTALS:
            t[k] += c[k]
    return t


def all_rejects(
    pieces: Sequence[Dict[str, Any]], list_rejects: Sequence[Reject]
) -> List[Dict[str, Any]]:
    out = [r.to_dict() for r in list_rejects]
    for p in sorted(pieces, key=lambda p: p["index"]):
        out.extend(p["rejects"])
    return out


def exit_code(totals: Dict[str, int], rejected: int, max_rejects: int) -> int:
    """3 when rejects exceed ``max_rejects``, or when the job wrote nothing because
    everything it read was rejected (within ``max_rejects`` or not): an empty output is no
    success.  Else 0."""
    if rejected > max_rejects:
        return 3
    return 3 if rejected and not totals.get("records_written", 0) else 0


def reasons_of(
    pieces: Sequence[Dict[str, Any]], list_rejects: Sequence[Reject]
) -> Tuple[int, Dict[str, int]]:
    """The number of rejects and ``"<stage>: <kind>" -> count`` (sorted by reason: the
    manifest's), from the pieces' summaries and the listing's rejects."""
    out: Dict[str, int] = {}
    count = 0
    for r in list_rejects:
        k = f"{r.stage}: {r.kind}"
        out[k] = out.get(k, 0) + 1
        count += 1
    for p in pieces:
        for stage, kind, n in reject_counts(p):
            k = f"{stage}: {kind}"
            out[k] = out.get(k, 0) + n
            count += n
    return count, dict(sorted(out.items()))


def rejects_by_reason(rejects: Sequence[Dict[str, Any]]) -> Dict[str, int]:
    """``"<stage>: <kind>" -> count`` over reject dicts, sorted by reason (the manifest's)."""
    out: Dict[str, int] = {}
    for r in rejects:
        k = f"{r['stage']}: {Reject.from_dict(r).kind}"
        out[k] = out.get(k, 0) + 1
    return dict(sorted(out.items()))


def write_manifest(
    output: str,
    manifest: Dict[str, Any],
    rejects: Iterable[Dict[str, Any]],
    config: Optional[StoreConfig] = None,
) -> Tuple[str, str]:
    """The rejects file (``rejects`` streamed into it, one at a time), then the manifest."""
    mpath, rpath = companion(output, ".manifest.json"), companion(output, ".rejects.jsonl")
    store = get_store(mpath, config)
    from transforms.redact import redact_obj  # no credential in a file tar2tf writes

    manifest = redact_obj(manifest)
    with store.open_write(rpath) as f:
        for r in rejects:
            f.write((json.dumps(redact_obj(r), sort_keys=True) + "\n").encode())
    store.write_bytes(mpath, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    return mpath, rpath
