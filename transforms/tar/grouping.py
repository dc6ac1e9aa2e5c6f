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
file that is not a tar at all is one shard-level reject.  A gzip CRC or length
mismatch, wherever it is found, is a :class:`~transforms.tar.damage.ShardCorrupt`.
Records end at the end-of-archive marker, as GNU tar's do; data after it (other than zero
padding) and trailing garbage after a complete gzip stream are ignored with a shard-level
reject that says so, and the records are kept (:mod:`transforms.tar.trailer`, which reads
no further than a bound past the marker, so a stream that never ends, such as a server
sending an endless body, ends the shard all the same).

A read that the store gave up on mid-object (:class:`~transforms.stores.retry.FetchError`:
retries spent, or an object replaced while it was read), or that the OS failed on a local
file (an I/O error, the file changed while read; :mod:`transforms.stores.local_read`), is no
damage in the archive: its rejects (the record being read, and the shard-level one) have
stage ``fetch``, not ``tar``, and name the object or file and the byte offset.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import BinaryIO, Dict, Iterator, Optional, Tuple, Union

from transforms.record_types import KEY, SHARD, Record, Reject, is_internal_name
from transforms.tar.damage import STREAM_ERRORS, StreamBroke, broken, fetch_broke, unreadable
from transforms.tar.decompress import open_stream
from transforms.tar.reader import Member, TarStream
from transforms.tar.trailer import after_the_end

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
    :class:`_Grouping` (members -> records), then :func:`~transforms.tar.trailer.after_the_end` (what follows
    the end-of-archive marker).  Wherever the stream breaks, :func:`_broken` says what
    the record being read and the shard become.
    """
    if max_record_size is None:
        max_record_size = max(DEFAULT_MAX_RECORD_SIZE, max_member_size)
    stats = stats if stats is not None else TarStats()
    try:
        stream, source = open_stream(stream)
        tar = TarStream(stream)
    except STREAM_ERRORS as e:
        yield unreadable(shard, e)
        return
    grouping = _Grouping(shard, stats, group_window, max_member_size, max_record_size)
    try:
        yield from grouping.records(_members(tar, stats), tar)
    except StreamBroke as b:
        if b.member is None and stats.members == 0 and not fetch_broke(b.error):
            yield unreadable(shard, b.error)  # the first header: this is not a tar at all
            return
        stage, reason, shard_reject = broken(b, shard, stats.members)
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
    yield from after_the_end(stream, source, tar.offset, shard)


def _members(tar: TarStream, stats: TarStats) -> Iterator[Tuple[Member, str, str]]:
    """The members of ``tar`` that can belong to a record, as (member, key, extension):
    files and links with an extension.  Others (directories, devices, no extension) are
    counted as skipped.  A stream that fails while a header is read raises
    :class:`StreamBroke`."""
    while True:
        try:
            member = tar.next()
        except STREAM_ERRORS as e:
            raise StreamBroke(e) from e
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
        :class:`StreamBroke`."""
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
        except STREAM_ERRORS as e:
            raise StreamBroke(e, member.name) from e
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
