"""Tar and gzipped-tar streams to records, following the WebDataset convention.

* The key of a member is its directory plus its basename up to the first dot; the
  extension is the rest of the basename, lower-cased: ``n01/a.seg.PNG`` -> key ``n01/a``,
  extension ``seg.png``.
* A record is the members sharing a key, which must come together: consecutively (the
  WebDataset rule, ``group_window=1``) or, by default, within a small window of open
  records in the same directory, so that tars made by ``tar -c`` of an unsorted directory
  still group.  A key seen again after its record was emitted is a duplicate: that second
  appearance is rejected.
* Directories, devices and members with no extension are skipped and counted, never
  turned into records.  A link (hard or symbolic) named like a record member rejects its
  record: following it would need the data of an earlier member, which is not kept.
* The tar is read as a stream, member by member (:mod:`transforms.tar.reader`; gzip is
  sniffed and decoded by :mod:`gzip`); a member's bytes are read only if it is within
  ``max_member_size``.

Bad input turns into :class:`~transforms.record_types.Reject` values in the same stream:
a zero-length or oversized member, a record whose members add up to more than
``max_record_size`` bytes, and a member named like a record's internal field
(``r1.__key__``: :func:`~transforms.record_types.is_internal_name`) reject their record; a
truncated tar or a corrupt gzip stream rejects the record being read at that point
(records completed before it are kept) and ends the shard with a shard-level reject; a
file that is not a tar at all is one shard-level reject.  A gzip CRC or length mismatch,
wherever it is found, is a :class:`ShardCorrupt`.  Records end at the end-of-archive
marker, as GNU tar's do; data after it (other than zero padding) and trailing garbage
after a complete gzip stream are ignored with a shard-level reject that says so, and the
records are kept.  What follows the marker is read no further than
:data:`AFTER_END_LIMIT` bytes, so a stream that never ends (a server sending an endless
body) ends the shard all the same.

A read that the store gave up on mid-object (:class:`~transforms.stores.retry.FetchError`:
retries spent, or an object replaced while it was read), or that the OS failed on a local
file (an I/O error, the file changed while read; :mod:`transforms.stores.local_read`), is no
damage in the archive: its rejects (the record being read, and the shard-level one) have
stage ``fetch``, not ``tar``, and name the object or file and the byte offset.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import tarfile
import zlib
from collections import OrderedDict
from typing import BinaryIO, Dict, Iterator, Optional, Tuple, Union

from transforms.record_types import KEY, SHARD, Record, Reject, is_internal_name
from transforms.stores.errors import (
    FetchError,
    FileChangedError,
    LocalReadError,
    ObjectChangedError,
)
from transforms.tar.reader import Member, TarStream

DEFAULT_MAX_MEMBER_SIZE = 256 * 1000 * 1000
# A record holds all of its members in memory until it is converted, so this bounds what
# one record (and the grouping window: all of its open records together) can hold.  When
# none is given, the larger of this and the member limit: a job that allows 2 GB members
# allows a record of one.
DEFAULT_MAX_RECORD_SIZE = 512 * 1000 * 1000
DEFAULT_GROUP_WINDOW = 64
# Longest key accepted, in characters: Linux's PATH_MAX, beyond any name a file system holds.
# Every key of a shard is kept while it converts (duplicates, the manifest), and pax names
# may be 1 MiB (reader.MAX_META_SIZE) that gzip shrinks to almost nothing: without this, a
# small shard of long-named records could fill memory with their keys alone.
MAX_KEY_LENGTH = 4096
# How far past the end-of-archive marker a stream is read: zero padding to the tar's
# blocking (10 KiB by default, 1 MiB for `tar -b 2048`), a gzip trailer, or the start of
# data tar would ignore (a concatenated archive) all fit; a stream that goes on further (a
# server sending an endless body, an endless gzip member) is not read to its end.
AFTER_END_LIMIT = 4 << 20
# The same for the compressed bytes under a gzip reader: tar's padding compresses to almost
# nothing, and Python's gzip reader eats zeros after a gzip member one byte at a time.
AFTER_END_COMPRESSED = 1 << 20

# What a damaged stream can raise from the tar reader (TarFormatError is a tarfile.TarError) / gzip / zlib.
_STREAM_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError, ValueError)


def split_key(name: str) -> Optional[Tuple[str, str]]:
    """``dir/base.ext.more`` -> (``dir/base``, ``ext.more`` lower-cased); None if no extension."""
    directory, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    if not dot or not stem or not ext:
        return None
    key = f"{directory}/{stem}" if directory else stem
    return key, ext.lower()


@dataclasses.dataclass
class TarStats:
    """Per-shard counts that are not records: skipped members (not files, no extension),
    duplicate members (a key's extension again, or a key again after its record), bytes read."""

    members: int = 0
    skipped_members: int = 0
    duplicate_members: int = 0
    member_bytes: int = 0


class ShardCorrupt(Reject):
    """The shard's integrity check failed after records were already produced (a gzip
    CRC or length mismatch at the end of the stream).  Consumers that can still take
    records back (the converter, before finalization) reject every record of the shard;
    content that may be wrong is never written as good."""


def _open_stream(stream: BinaryIO) -> "Tuple[BinaryIO, Optional[_Source]]":
    """Gzip streams are decoded by :mod:`gzip`, which checks the CRC32 and length trailer
    (tarfile's own gzip reader does not).  The second value is the compressed source under
    the gzip reader (None for a plain tar), whose reads can be bounded once the archive
    has ended."""
    if not hasattr(stream, "peek"):
        stream = (
            io.BufferedReader(stream) if isinstance(stream, io.RawIOBase) else _Peekable(stream)
        )
    if stream.peek(2)[:2] == b"\x1f\x8b":
        source = _Source(stream)
        return gzip.GzipFile(fileobj=source, mode="rb"), source
    return stream, None


class _PastTheEnd(Exception):
    """The compressed source was read :data:`AFTER_END_COMPRESSED` bytes past the point
    where the archive ended."""


class _Source:
    """The compressed stream as the gzip reader takes it, counting the bytes taken.  After
    :meth:`stop_after` it gives at most ``n`` more and then raises :class:`_PastTheEnd`:
    the gzip reader consumes zero padding after a member one byte at a time, without
    end, so bounding what it decompresses is not enough to bound what it reads."""

    def __init__(self, f: BinaryIO):
        self._f = f
        self.taken = 0
        self._limit: Optional[int] = None

    def stop_after(self, n: int) -> None:
        self._limit = self.taken + n

    def read(self, n: int = -1) -> bytes:
        if self._limit is not None:
            left = self._limit - self.taken
            if left <= 0:
                raise _PastTheEnd()
            n = left if n is None or n < 0 else min(n, left)
        data = self._f.read(n)
        self.taken += len(data)
        return data


class _Peekable(io.BufferedReader):
    def __init__(self, f):
        super().__init__(_RawAdapter(f))


class _RawAdapter(io.RawIOBase):
    def __init__(self, f):
        self._f = f

    def readable(self):
        return True

    def readinto(self, b):
        data = self._f.read(len(b))
        b[: len(data)] = data
        return len(data)


class _Group:
    __slots__ = ("key", "entries", "problem", "size")

    def __init__(self, key: str):
        self.key = key
        # extension -> bytes; None for a member of a record already rejected (its bytes are
        # not read, the extension stays for duplicate detection)
        self.entries: Dict[str, Optional[bytes]] = {}
        self.problem: Optional[str] = None
        self.size = 0  # bytes of the members held

    def reject(self, problem: str) -> int:
        """Mark the record rejected (the first problem stands) and drop the bytes it holds:
        the number of bytes freed."""
        self.problem = self.problem or problem
        freed, self.size = self.size, 0
        for ext in self.entries:
            self.entries[ext] = None
        return freed


class _StreamBroke(Exception):
    """The stream failed while the header of the next member (``member`` None) or the data
    of ``member`` was read: ``error`` is what the reader raised."""

    def __init__(self, error: BaseException, member: Optional[str] = None):
        super().__init__(error)
        self.error, self.member = error, member


def iter_records(
    stream: BinaryIO,
    shard: str,
    max_member_size: int = DEFAULT_MAX_MEMBER_SIZE,
    stats: Optional[TarStats] = None,
    group_window: int = DEFAULT_GROUP_WINDOW,
    max_record_size: Optional[int] = None,
) -> Iterator[Union[Record, Reject]]:
    """Yield records and rejects from one tar / tgz stream, in tar order.

    ``group_window`` is how many records may be open at once in the same directory.  With
    1 this is exactly WebDataset's rule (members of a record must be consecutive).  The
    default tolerates tars written by ``tar -c`` from an unsorted directory, where
    ``x/001.cls, x/002.cls, x/002.jpg, x/001.jpg`` is common: members join their open
    record while it is within the window; a record is emitted when it leaves the window
    or its directory ends.  A key seen again after its record was emitted is a duplicate.

    Memory: a record whose members add up to more than ``max_record_size`` bytes is
    rejected (its bytes are dropped as soon as it is, and no more of them are read), and
    the open records together hold at most ``max_record_size`` bytes: a member that would
    go over makes the oldest other open records leave the window first.  So the records
    this reader holds never exceed ``max_record_size`` bytes, whatever the input.  None:
    :data:`DEFAULT_MAX_RECORD_SIZE`, or ``max_member_size`` if that is larger.

    The stream goes through three steps: :func:`_members` (the tar's record members),
    :class:`_Grouping` (members -> records), then :func:`_after_the_end` (what follows
    the end-of-archive marker).  Wherever the stream breaks, :func:`_broken` says what
    the record being read and the shard become.
    """
    if max_record_size is None:
        max_record_size = max(DEFAULT_MAX_RECORD_SIZE, max_member_size)
    stats = stats if stats is not None else TarStats()
    try:
        stream, source = _open_stream(stream)
        tar = TarStream(stream)
    except _STREAM_ERRORS as e:
        yield _unreadable(shard, e)
        return
    grouping = _Grouping(shard, stats, group_window, max_member_size, max_record_size)
    try:
        yield from grouping.records(_members(tar, stats), tar)
    except _StreamBroke as b:
        if b.member is None and stats.members == 0 and not _fetch_broke(b.error):
            yield _unreadable(shard, b.error)  # the first header: this is not a tar at all
            return
        stage, reason, shard_reject = _broken(b, shard, stats.members)
        yield from grouping.close(stage, reason)
        yield shard_reject
        return
    if stats.members and not tar.ended:
        # The stream stopped exactly at a member boundary, without the zero blocks that end
        # every tar: a shard cut short (a partial download or copy).  The record read last
        # may have lost members that came after the cut, so it is rejected like any record
        # at a truncation point; the shard-level reject says what happened.
        reason = "truncated shard: the archive ends after this record without its end marker"
        yield from grouping.close("tar", reason)
        yield Reject(
            shard,
            None,
            "tar",
            f"truncated archive: the stream ended after {stats.members} members without the "
            "end-of-archive marker (later members may be missing)",
            counts_record=False,
        )
        return
    yield from grouping.close()
    if source is not None:
        source.stop_after(AFTER_END_COMPRESSED)
    yield from _after_the_end(stream, tar.offset, shard)


def _members(tar: TarStream, stats: TarStats) -> Iterator[Tuple[Member, str, str]]:
    """The members of ``tar`` that can belong to a record, as (member, key, extension):
    files and links with an extension.  Others (directories, devices, no extension) are
    counted as skipped.  A stream that fails while a header is read raises
    :class:`_StreamBroke`."""
    while True:
        try:
            member = tar.next()
        except _STREAM_ERRORS as e:
            raise _StreamBroke(e) from e
        if member is None:
            return
        stats.members += 1
        parsed = split_key(member.name) if member.isreg() or member.islink() else None
        if parsed is None:
            stats.skipped_members += 1
            continue
        yield member, parsed[0], parsed[1]


class _Grouping:
    """Members -> records: the open records of the window, and what was emitted."""

    def __init__(
        self, shard: str, stats: TarStats, window: int, max_member_size: int, max_record: int
    ):
        self.shard, self.stats = shard, stats
        self.window = max(1, int(window))
        self.max_member, self.max_record = max_member_size, max_record
        self.emitted: set = set()
        self.pending: "OrderedDict[str, _Group]" = OrderedDict()
        self.held = 0  # bytes of the members the open records hold: at most max_record
        self.last_dup: Optional[str] = None
        self.last_long: Optional[str] = (
            None  # the too-long key rejected last (its members come together)
        )
        self.directory: Optional[str] = None
        self.current: Optional[str] = None  # key of the record whose member was read last

    def records(
        self, members: Iterator[Tuple[Member, str, str]], tar: TarStream
    ) -> Iterator[Union[Record, Reject]]:
        """The records and rejects of ``members``, except the records still open at their
        end (:meth:`close`).  A stream that fails while a member's data is read raises
        :class:`_StreamBroke`."""
        for member, key, ext in members:
            if len(key) > MAX_KEY_LENGTH:
                # the reject names the key by its start: it is not kept whole anywhere
                if key != self.last_long:
                    yield Reject(
                        self.shard,
                        f"{key[:200]}...",
                        "tar",
                        f"key too long: {len(key)} characters > {MAX_KEY_LENGTH} (member {member.name[:200]}...)",
                    )
                self.last_long, self.current = key, None
                continue
            self.last_long = None
            group = yield from self._open(key)
            if group is None:
                continue
            self.current = key
            yield from self._add(group, member, ext, tar)

    def close(self, stage: str = "", reason: str = "") -> Iterator[Union[Record, Reject]]:
        """Emit the open records.  With a ``reason`` (the stream broke after the record read
        last, which may have lost members), that record is rejected with it instead."""
        if reason and self.current is not None and self.current in self.pending:
            self._take(self.current)
            yield Reject(self.shard, self.current, stage, reason)
        yield from self._flush(0)

    def _open(self, key: str) -> Iterator[Reject]:
        """The open record ``key`` (opened if new; others leave the window as it fills),
        or None for a duplicate of an emitted record.  A generator: what leaves the
        window is yielded; the record is its return value."""
        new_dir = key.rpartition("/")[0]
        if new_dir != self.directory:
            yield from self._flush(0)
            self.directory = new_dir
        group = self.pending.get(key)
        if group is not None:
            return group
        if key in self.emitted:
            if key != self.last_dup:
                yield Reject(
                    self.shard,
                    key,
                    "tar",
                    f"duplicate key: {key!r} appears again, not with its first members",
                )
            self.last_dup = key
            self.stats.duplicate_members += 1
            return None
        group = self.pending[key] = _Group(key)
        self.last_dup = None
        yield from self._flush(self.window)
        return group

    def _add(self, group: _Group, member: Member, ext: str, tar: TarStream) -> Iterator[Record]:
        """Add ``member`` to its open record, reading its bytes unless the record is
        rejected (by this member or before)."""
        problem = _member_problem(member, ext, self.max_member)
        if problem:
            self.held -= group.reject(problem)
            return
        if ext in group.entries:
            # the key starts over inside the window: the first record stands, this
            # second appearance is the duplicate
            if self.last_dup != group.key:
                yield Reject(
                    self.shard,
                    group.key,
                    "tar",
                    f"duplicate key: {member.name} repeats '.{ext}' of {group.key!r}",
                )
            self.last_dup = group.key
            self.stats.duplicate_members += 1
            return
        if not group.problem and group.size + member.size > self.max_record:
            self.held -= group.reject(
                f"record too large: {group.key!r} is over max-record-size {self.max_record} bytes "
                f"with member {member.name} ({group.size} + {member.size} bytes)"
            )
        if group.problem:  # the record is rejected anyway: its bytes are not read
            group.entries[ext] = None
            return
        while self.held + member.size > self.max_record:
            # the open records together stay within max_record: the oldest others leave
            # the window (the record this member joins fits on its own, checked above)
            yield self._finish(self._take(next(k for k in self.pending if k != group.key)))
        try:
            data = tar.read(member)
        except _STREAM_ERRORS as e:
            raise _StreamBroke(e, member.name) from e
        self.stats.member_bytes += len(data)
        group.entries[ext] = data
        group.size += len(data)
        self.held += len(data)

    def _take(self, key: str) -> _Group:
        """Close the open record ``key``: it leaves the window."""
        g = self.pending.pop(key)
        self.held -= g.size
        self.emitted.add(key)
        return g

    def _finish(self, g: _Group) -> Union[Record, Reject]:
        if g.problem:
            return Reject(self.shard, g.key, "tar", g.problem)
        rec: Record = {KEY: g.key, SHARD: self.shard}
        rec.update(g.entries)
        return rec

    def _flush(self, keep: int) -> Iterator[Union[Record, Reject]]:
        while len(self.pending) > keep:
            yield self._finish(self._take(next(iter(self.pending))))


def _member_problem(member: Member, ext: str, max_member_size: int) -> Optional[str]:
    """Why ``member`` rejects its record whatever the rest of it holds, or None."""
    if is_internal_name(ext):
        # as an entry it would overwrite the record's own field (its key, its shard...)
        # with bytes, which no later stage expects
        return (
            f"member named like an internal field: {member.name} (extensions of the "
            f"form __name__, such as {KEY} and {SHARD}, are the record's own fields)"
        )
    if member.islink():
        # GNU tar stores the second name of a hard link as a link entry without data.
        # Following it would mean keeping every earlier member's bytes (the target may
        # be anywhere before it in the shard), so the record is rejected instead of
        # being written without that member.
        kind = "hard link" if member.type == b"1" else "symbolic link"
        return f"{kind} member {member.name} -> {member.linkname}: links are not followed"
    if member.size == 0:
        return f"zero-length member: {member.name}"
    if member.size > max_member_size:
        return f"member too large: {member.name} is {member.size} bytes > max-member-size {max_member_size}"
    return None


def _unreadable(shard: str, e: BaseException) -> Reject:
    """The shard-level reject of a stream that fails before its first member."""
    broke = _fetch_broke(e)
    if broke:
        return Reject(shard, None, "fetch", broke, counts_record=False)
    return Reject(shard, None, "tar", f"not a tar archive: {_describe(e)}", counts_record=False)


def _broken(b: _StreamBroke, shard: str, members: int) -> Tuple[str, str, Reject]:
    """A stream that broke after ``members`` members, in a header or inside member
    ``b.member``: the stage and reason of the reject of the record read last (it may have
    lost members), and the shard-level reject.  The records before it are complete.  A
    failed read is a ``fetch`` reject; a gzip check that fails is a :class:`ShardCorrupt`
    (nothing of the shard is trusted); any other damage is a truncated or corrupt tar."""
    e, name = b.error, b.member
    broke, what = _fetch_broke(e), _describe(e)
    if broke:
        if name is None:
            reason = f"{broke}; the read broke after this record"
            where = f"after {members} members, the records before them are kept"
        else:
            reason = f"{broke}; member {name} is incomplete"
            where = f"inside member {name}, the records before it are kept"
        return (
            "fetch",
            reason,
            Reject(shard, None, "fetch", f"{broke}; the read broke {where}", counts_record=False),
        )
    if name is None:
        reason = f"truncated shard: the stream broke after this record ({what})"
    elif _is_integrity_error(e):
        # a gzip member (bgzip, `cat a.gz b.gz`) ended inside this tar member and failed
        # its CRC: as on the header path, nothing of the shard is trusted
        reason = f"corrupt shard: reading member {name} failed the gzip check ({what})"
    else:
        reason = f"truncated shard: member {name} is incomplete ({what})"
    if _is_integrity_error(e):
        return (
            "tar",
            reason,
            ShardCorrupt(shard, None, "tar", f"corrupt gzip: {what}", counts_record=False),
        )
    where = f"after {members} members" if name is None else f"inside member {name}"
    return (
        "tar",
        reason,
        Reject(
            shard, None, "tar", f"truncated or corrupt archive {where}: {what}", counts_record=False
        ),
    )


def _after_the_end(stream: BinaryIO, offset: int, shard: str) -> Iterator[Reject]:
    """Read what follows the end-of-archive block at ``offset``, to the end of the stream
    but no further than :data:`AFTER_END_LIMIT` bytes past it.

    Records end at that block, as GNU tar's listing does (without ``-i``), but what follows
    is read: gzip checks its CRC trailer only at the end of each member.  Zero padding
    (tar fills its 10 KiB records) is normal; other data, e.g. ``cat a.tar b.tar``, whose
    second archive no tar reader lists, is reported so that its records are not lost
    unnoticed.  Bytes after a complete gzip stream that are not gzip are ignored like
    ``gzip -d`` does ("trailing garbage ignored"): the gzip reader has checked the CRC of
    the member before them when it finds they are no gzip header, so the records stand.
    Any other error, a CRC or length mismatch above all, leaves the content unverified: a
    :class:`ShardCorrupt`.  So does a gzip stream that goes on past the limit (its
    trailer is never reached); a plain stream that does (a server sending an endless
    body) keeps its records, with a shard-level reject that says reading stopped.
    """
    pos, data_at, error, cut = offset, None, None, None
    limit = offset + AFTER_END_LIMIT
    try:
        while pos <= limit:  # one byte past the limit tells that the stream goes on
            chunk = stream.read(min(1 << 16, limit + 1 - pos))
            if not chunk:
                break
            if data_at is None and chunk.count(0) != len(chunk):
                data_at = pos + len(chunk) - len(chunk.lstrip(b"\0"))
            pos += len(chunk)
        if pos > limit:
            cut = f"{AFTER_END_LIMIT} bytes"
    except _PastTheEnd:
        cut = f"{AFTER_END_COMPRESSED} compressed bytes"
    except _STREAM_ERRORS as e:
        error = e
    if cut:
        what = (
            f"stream goes on after the end-of-archive marker: reading stopped {cut} past it "
            f"(offset {offset})"
        )
        if data_at is not None:
            what += f", with data from offset {data_at} on"
        if isinstance(stream, gzip.GzipFile):
            yield ShardCorrupt(
                shard,
                None,
                "tar",
                f"{what}, before the gzip CRC check at the end of the stream: content unverified",
                counts_record=False,
            )
        else:
            yield Reject(
                shard,
                None,
                "tar",
                f"{what}, as tar stops at the marker; the records before it are kept",
                counts_record=False,
            )
        return
    if data_at is not None:
        yield Reject(
            shard,
            None,
            "tar",
            f"ignored {pos - data_at} bytes of data after the end-of-archive marker (from offset "
            f"{data_at}; e.g. a concatenation of tars, whose later archives tar does not list)",
            counts_record=False,
        )
    if error is None:
        return
    broke = _fetch_broke(error)
    if broke and not isinstance(stream, gzip.GzipFile):
        yield Reject(
            shard,
            None,
            "fetch",
            f"{broke}; the read broke after the end-of-archive marker, "
            "the records are complete and kept",
            counts_record=False,
        )
        return
    if broke:  # the gzip trailer, which vouches for the records, was not reached
        yield ShardCorrupt(
            shard,
            None,
            "fetch",
            f"{broke}; the read broke before the gzip CRC check at the "
            "end of the stream: content unverified",
            counts_record=False,
        )
        return
    if _is_trailing_garbage(error):
        yield Reject(
            shard,
            None,
            "tar",
            f"trailing garbage after the gzip stream ignored, like gzip -d ({_describe(error)}); "
            "the records passed the gzip CRC check and are kept",
            counts_record=False,
        )
        return
    yield ShardCorrupt(shard, None, "tar", f"corrupt gzip: {_describe(error)}", counts_record=False)


def _fetch_broke(e: BaseException) -> Optional[str]:
    """The reason of a ``fetch`` reject when the store's or the OS's read failed (not the
    archive), else None."""
    if isinstance(e, FileChangedError):
        return f"file changed while being read: {e.url} ({e.detail})"
    if isinstance(e, ObjectChangedError):
        return f"object changed while being read: {e.url} ({e.detail})"
    if isinstance(e, LocalReadError):  # the OS failed a read of a local file: EIO, ESTALE...
        return str(e)
    if isinstance(e, FetchError):  # retries spent, or an error no retry helps
        return f"fetch failed mid-object: {e}"
    return None


def _is_integrity_error(e: BaseException) -> bool:
    text = str(e)
    return "CRC check failed" in text or "Incorrect length" in text


def _is_trailing_garbage(e: BaseException) -> bool:
    """gzip raises this only where a new member's header should start: at the start (the
    stream was sniffed as gzip, so not there) or after a member whose CRC and length it
    has just checked."""
    return isinstance(e, gzip.BadGzipFile) and str(e).startswith("Not a gzipped file")


def _describe(e: BaseException) -> str:
    msg = str(e) or e.__class__.__name__
    return f"{e.__class__.__name__}: {msg}" if e.__class__.__name__ not in msg else msg
