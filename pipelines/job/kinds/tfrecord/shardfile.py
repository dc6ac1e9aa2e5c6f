"""A final shard while it is written, and the planned copy of piece byte ranges into one.

Why this shape: TFRecord files concatenate byte-wise, so a final shard is the pieces'
byte ranges copied in plan order (:func:`write_shard`); no record is parsed or re-framed.
Each final shard is written under a temporary name and renamed when complete
(:class:`ShardFile`), so an interrupted job never leaves a partial file under a final name.

Who owns what in a :class:`ShardFile` (the streamed path writes one from several threads:
``pipelines.inprocess.stream``):

=====================================  ==========================  =============================
state                                  owner                       how other threads reach it
=====================================  ==========================  =============================
the open file, ``digest``, ``bytes``,  the appending thread, up    not at all until
``records``, ``sizes`` (appends)       to :meth:`ShardFile.seal`   :meth:`~ShardFile.seal`; then
                                                                   frozen, read by the closing
                                                                   thread (handed over through
                                                                   the closer's queue)
the byte ranges and their CRC-32C,     :class:`RangeLedger`        its one lock: ``filled``
a cancellation                                                     (a pool thread), ``cancel``
                                                                   (any thread), the wait in
                                                                   ``close``
=====================================  ==========================  =============================
"""

from __future__ import annotations

import io
import json
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from pipelines.job.kinds.tfrecord import piecefiles
from pipelines.job.kinds.tfrecord.plan import ShardTask
from transforms.stores import StoreConfig, get_store, split_url, writeback
from transforms.stores import copy as store_copy
from transforms.tfrecord import digests

COPY_CHUNK = 1 << 20
# a local shard's appended bytes go to the device in ranges of this size while it fills
# (transforms.stores.writeback), so that closing it does not wait for all of them
WRITEBACK_CHUNK = 8 << 20


def copy_range(src, dst, offset: int, length: int, digest) -> None:
    """Copy ``length`` bytes at ``offset`` of ``src`` to ``dst``, feeding ``digest``.

    Plain 1 MB reads: google-crc32c only takes ``bytes`` (no memoryview into a reused
    buffer), and larger ``bytes`` objects cost page-faulting allocations
    (docs/benchmarks.md, "Costs behind design choices")."""
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


class _NoDigest:
    def update(self, data) -> None:
        pass


_NO_DIGEST = _NoDigest()


def _discard(src, n: int) -> None:
    while n:
        chunk = src.read(min(COPY_CHUNK, n))
        if not chunk:
            raise IOError("piece shorter than its sidecar says")
        n -= len(chunk)


class RangeLedger:
    """The byte ranges of one shard that are hashed apart -- reserved for another writer,
    copied with a known CRC-32C, or cut off the shard's running digest -- and their CRC-32C
    once known: the only part of a :class:`ShardFile` that several threads reach, all of it
    under one lock.  ``offset -> (length, crc or None until filled)``."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._ranges: Dict[int, Tuple[int, Optional[int]]] = {}
        self._failed: Optional[BaseException] = None
        # ranges left to other writers (a kernel copy's or a cut's are filled at once): a
        # cancellation only fails a shard that waits for some
        self._reserved = False

    def __bool__(self) -> bool:
        with self._cv:
            return bool(self._ranges)

    def add(self, offset: int, length: int, crc: Optional[int]) -> None:
        """A range at ``offset``; ``crc`` None: reserved, :meth:`fill` gives it later."""
        with self._cv:
            self._ranges[offset] = (length, crc)
            if crc is None:
                self._reserved = True

    def fill(self, offset: int, crc: int) -> None:
        with self._cv:
            self._ranges[offset] = (self._ranges[offset][0], crc)
            self._cv.notify_all()

    def cancel(self, exc: BaseException) -> None:
        with self._cv:
            self._failed = exc
            self._cv.notify_all()

    def combined(self) -> int:
        """The CRC-32C of all the ranges end to end, once each is filled; raises the
        cancellation's error instead when a reserved range may never be."""
        with self._cv:
            while self._failed is None and any(crc is None for _, crc in self._ranges.values()):
                self._cv.wait()
            if self._failed is not None and self._reserved:
                raise self._failed
            crc = 0
            for offset in sorted(self._ranges):
                length, part = self._ranges[offset]
                crc = digests.crc32c_combine(crc, part, length)
        return crc


class ShardFile:
    """One final shard while it is written: bytes appended in order, its crc32c and framed
    record sizes kept, the file under a temporary name until :meth:`close` (fsync, rename),
    removed by :meth:`abort`.  The one writer of final TFRecord shards: the planned copy
    (:func:`write_shard`), the streaming writer (``pipelines.inprocess.stream``) and the
    shuffle (``pipelines.beam.shuffle``) all go through it.

    A local shard can also leave ranges to other processes (:meth:`reserve`): a worker
    writes a range into :attr:`local_path` at its offset and reports the range's CRC-32C
    (:meth:`filled`, from any thread); :meth:`close` waits for every range and combines
    the CRCs (:func:`transforms.tfrecord.digests.crc32c_combine`).

    Threads: one thread appends (:meth:`write`, :meth:`copy`, :meth:`reserve`) until
    :meth:`seal` (or :meth:`park`, which seals); after it, another thread may
    :meth:`close` or :meth:`abort` it.  :meth:`filled` and :meth:`cancel` may come from
    any thread at any time (they only reach the :class:`RangeLedger`)."""

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
        # empty while this process writes every byte itself (self.digest then hashes them all)
        self._ledger = RangeLedger()
        self._local = self.local_path is not None
        self._flushed = 0  # writeback started for the bytes before this offset
        self._sealed = False  # nothing more is appended: digest and sizes are final

    @property
    def local_path(self) -> Optional[str]:
        """The temporary file other processes write reserved ranges into (local shards
        only; None elsewhere)."""
        name = getattr(self.f, "name", None)
        return name if isinstance(name, str) and split_url(self.path)[0] == "" else None

    def write(self, frames: Sequence[bytes], sizes: Sequence[int]) -> None:
        """Append whole frames (``sizes``: their framed lengths), each in its own
        ``write`` call: the file's 1 MB buffer turns them into few system calls (one
        ``writev`` per run of frames, or a larger buffer, was no faster:
        docs/benchmarks.md, "Costs behind design choices")."""
        self._appending()
        for fr in frames:
            self.f.write(fr)
            self.digest.update(fr)
        self._count(sizes)
        self.bytes += sum(sizes)
        self._start_writeback()

    def copy(
        self, src, offset: int, length: int, sizes: Sequence[int], crc: Optional[int] = None
    ) -> None:
        """Append ``length`` bytes at ``offset`` of the open file ``src`` (whole frames).
        ``crc``: their CRC-32C where the caller knows it (a whole piece's, from its
        sidecar), which spares hashing them (and reading them, when the kernel copies
        them: ``$TAR2TF_KERNEL_COPY``)."""
        self._appending()
        if not (self._local and self._kernel_copy(src, offset, length, crc)):
            if crc is None:
                copy_range(src, self.f, offset, length, self.digest)
            else:  # the CRC-32C is known: copied without hashing, kept as a range of its own
                self._cut()
                copy_range(src, self.f, offset, length, _NO_DIGEST)
                self._ledger.add(self.bytes, length, crc)
                self._start = self.bytes + length
        self._count(sizes)
        self.bytes += length
        self._start_writeback()

    def _kernel_copy(self, src, offset: int, length: int, crc: Optional[int]) -> bool:
        """Copy a local source's range with ``copy_file_range`` (no read into and write out
        of this process) and keep its CRC-32C as a range of its own; False if the kernel
        cannot copy between these files (the caller copies)."""
        try:
            src_fd = src.fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
            return False
        self.f.flush()
        if not store_copy.kernel_copy(src_fd, self.f.fileno(), offset, self.bytes, length):
            return False
        if crc is None:
            # the bytes are in the page cache now: hashing them is a read, without the write
            digest = digests.new("crc32c")
            src.seek(offset)
            left = length
            while left:
                chunk = src.read(min(COPY_CHUNK, left))
                if not chunk:
                    raise IOError(f"piece ended {left} bytes early")
                digest.update(chunk)
                left -= len(chunk)
            crc = digests.crc32c_of(digest)
        self._cut()
        self._ledger.add(self.bytes, length, crc)
        self._start = self.bytes + length
        self.f.seek(self.bytes + length)
        return True

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
        self._appending()
        self._cut()
        offset = self.bytes
        self._ledger.add(offset, length, None)
        self._count(sizes)
        self.bytes += length
        self._start = self.bytes
        self.f.seek(self.bytes)
        return offset

    def _appending(self) -> None:
        if self._sealed:  # another thread may be closing it: its digest and size are final
            raise RuntimeError(f"{self.path}: appended to after it was sealed")

    def seal(self) -> None:
        """Nothing more is appended: the appending thread's last step, after which the
        shard may be closed on another thread.  The bytes appended since the last range
        become a range of their own (where there are ranges), so that :meth:`close` only
        reads what is final."""
        if not self._sealed:
            if self._ledger:
                self._cut()
            self._sealed = True

    def park(self) -> None:
        """Nothing more is appended here before :meth:`close` (:meth:`seal`): give the
        file descriptor back while the shard waits (a local file, or a bucket object's spool
        file; see ``transforms.stores.ParkableFile``)."""
        self.seal()
        park = getattr(self.f, "park", None)
        if park is not None:
            park()

    def filled(self, offset: int, crc: int) -> None:
        """The range reserved at ``offset`` is written; ``crc``: its CRC-32C."""
        self._ledger.fill(offset, crc)

    def cancel(self, exc: BaseException) -> None:
        """A reserved range will never be filled: :meth:`close` (even one already
        waiting) raises ``exc`` and removes the file."""
        self._ledger.cancel(exc)

    def _cut(self) -> None:
        """The bytes appended since the last reserved range become a range of their own."""
        if self.bytes > self._start:
            self._ledger.add(self._start, self.bytes - self._start, digests.crc32c_of(self.digest))
            self.digest = digests.new("crc32c")
            self._start = self.bytes

    def _crc32c(self) -> str:
        self.seal()  # a no-op on a sealed shard: its owner sealed it before handing it over
        if not self._ledger:  # every byte appended here
            return digests.hexdigest(self.digest)
        return f"{self._ledger.combined():08x}"

    def close(self, guard: Optional[Callable[[], None]] = None) -> Dict[str, Any]:
        """Make the shard durable under its final name (once its reserved ranges are
        filled); its manifest row.  ``guard``: called right before the rename; what it
        raises (a job whose output lock was taken) removes the temporary file instead."""
        try:
            crc = self._crc32c()
            if guard is not None:
                guard()
        except BaseException as e:
            self.abort(e)
            raise
        self._cm.__exit__(None, None, None)
        if self.dali_index:
            self.store.write_bytes(self.path + ".idx", dali_index_bytes(self.sizes))
        return {"path": self.path, "records": self.records, "bytes": self.bytes, "crc32c": crc}

    def abort(self, exc: Optional[BaseException] = None) -> None:
        """Remove the temporary file; nothing appears under the final name."""
        exc = exc or RuntimeError(f"writing {self.path} was abandoned")
        self._cm.__exit__(type(exc), exc, exc.__traceback__)


def dali_index_bytes(sizes: Sequence[int]) -> bytes:
    """A DALI index of framed records of ``sizes``: one ``offset size`` line each."""
    lines, off = [], 0
    for s in sizes:
        lines.append(f"{off} {int(s)}\n")
        off += int(s)
    return "".join(lines).encode()


# A range that is a run of a piece's records but not the whole piece gets its CRC-32C
# from the piece's record file when that file is small beside the range: reading it costs
# about this many bytes a record (sizes and ends; a bucket's whole record file, keys too)
RECORD_FILE_BYTES_PER_RECORD = 64


def piece_crcs(
    ranges: Sequence[Tuple[str, int, int]],
    config: Optional[StoreConfig] = None,
    pieces: Optional[Dict[str, Dict[str, Any]]] = None,
) -> List[Optional[int]]:
    """Each range's CRC-32C, from what the piece writer hashed as it wrote the bytes, so
    that a copy the store or the kernel makes need not read them back: a whole piece's
    from ``pieces`` (the plan's copy of its summary, ``ShardTask.pieces``) or else its
    sidecar; a run of its records' from its record file, which holds the piece's
    CRC-32C at the end of each record (crc(run) = crc(up to its end) xor crc(up to its
    start) carried over the run's length).  None where neither is known (a piece without
    sidecar, a record file without ``ends``), or where the record file would cost more to
    read than the range (records much smaller than their keys)."""
    out: List[Optional[int]] = []
    sidecars: Dict[str, Optional[Dict[str, Any]]] = {}
    ends: Dict[str, Any] = {}
    for url, offset, length in ranges:
        if url not in sidecars:
            given = (pieces or {}).get(url)
            sidecars[url] = given if given is not None else _sidecar(url, config)
        info = sidecars[url]
        crc = None
        try:
            whole = int(info["crc32c"], 16) if info is not None else None
        except (KeyError, TypeError, ValueError):
            whole = None
        if whole is not None and offset == 0 and info.get("bytes") == length:
            crc = whole
        elif whole is not None and length >= RECORD_FILE_BYTES_PER_RECORD * int(
            info.get("records") or 0
        ):
            if url not in ends:
                ends[url] = _checked_ends(url, info, whole, config)
            if ends[url] is not None:
                crc = _run_crc(*ends[url], offset, length)
        out.append(crc)
    return out


def _checked_ends(url: str, info: Dict[str, Any], whole: int, config: Optional[StoreConfig]):
    """The record file's ends when they agree with the sidecar (its bytes and CRC-32C)."""
    got = piecefiles.record_ends(url, config)
    if got is None or not len(got[0]):
        return None
    offsets, crcs = got
    if int(offsets[-1]) != info.get("bytes") or int(crcs[-1]) != whole:
        return None
    return got


def _run_crc(offsets, crcs, offset: int, length: int) -> Optional[int]:
    """The CRC-32C of the piece's bytes ``[offset, offset + length)`` when both ends are
    record ends, from the piece's CRC-32C at each record end."""
    import numpy as np

    def at(pos: int) -> Optional[int]:
        if pos == 0:
            return 0
        i = int(np.searchsorted(offsets, pos))
        return int(crcs[i]) if i < len(offsets) and int(offsets[i]) == pos else None

    head, end = at(offset), at(offset + length)
    if head is None or end is None:
        return None
    return end ^ digests.crc32c_combine(head, 0, length)


def _sidecar(url: str, config: Optional[StoreConfig]) -> Optional[Dict[str, Any]]:
    from pipelines.job.workfiles import describes, sidecar_of

    try:
        info = json.loads(get_store(url, config).read_bytes(sidecar_of(url)))
    except (FileNotFoundError, ValueError):
        return None
    # another attempt of the unit may have finished after this piece's: its digest is
    # not this file's
    return info if describes(info, url, "piece") else None


# Small ranges from a bucket are fetched many at once, ahead of the copy: a shard of many
# small pieces is otherwise a round trip per piece, one after another.  At most
# 2 x FETCH_AHEAD of them are held, FETCH_BYTES each at most; a larger range streams.
FETCH_AHEAD = 16
FETCH_BYTES = 2 << 20


def _fetched(ranges, config: Optional[StoreConfig], crcs):
    """``((url, offset, length), crc, bytes or None)`` for each range in order: the bytes of
    a small range of a remote piece, read ahead; None where the copy reads it itself."""
    from pipelines.job import inflight

    def fetch(item):
        (url, offset, length), _ = item
        if length > FETCH_BYTES or not split_url(url)[0]:
            return None
        buf = io.BytesIO()
        with get_store(url, config).open_read(url) as src:
            copy_range(src, buf, offset, length, _NO_DIGEST)
        return buf.getvalue()

    for (rng, crc), data in inflight.ordered(fetch, zip(ranges, crcs), FETCH_AHEAD):
        yield rng, crc, data


def write_shard(
    task: ShardTask, config: Optional[StoreConfig] = None, dali_index: bool = False
) -> Dict[str, Any]:
    """Copy the task's byte ranges into its final name, atomically; return its manifest row.

    The store copies the ranges itself where it can (``Store.assemble``: S3 part copies,
    GCS compose; locally ``copy_file_range``), with the CRC-32C of whole pieces taken from
    their sidecars; else they are read and written here."""
    path = task.path
    ranges = [(str(u), int(o), int(n)) for u, o, n in task.ranges]
    crcs = piece_crcs(ranges, config, task.pieces) if store_copy.enabled() else [None] * len(ranges)
    if store_copy.enabled() and split_url(path)[0]:
        store = get_store(path, config)
        crc = store.assemble(path, ranges, crcs)
        if crc is not None:
            if dali_index:
                store.write_bytes(path + ".idx", dali_index_bytes(task.sizes))
            return {
                "path": path,
                "records": task.records,
                "bytes": sum(n for _, _, n in ranges),
                "crc32c": crc,
            }
    shard = ShardFile(path, config, dali_index)
    try:
        for (url, offset, length), crc, data in _fetched(ranges, config, crcs):
            if data is not None:
                shard.copy(io.BytesIO(data), 0, length, (), crc=crc)
                continue
            with get_store(url, config).open_read(url) as src:
                shard.copy(src, offset, length, (), crc=crc)
    except BaseException as e:
        shard.abort(e)
        raise
    shard.records = task.records
    if dali_index:
        shard.sizes = [int(s) for s in task.sizes]
    return shard.close()
