"""Tar and gzipped-tar streams to records, following the WebDataset convention.

* The key of a member is its directory plus its basename up to the first dot; the
  extension is the rest of the basename, lower-cased: ``n01/a.seg.PNG`` -> key ``n01/a``,
  extension ``seg.png``.
* A record is a run of *consecutive* members sharing a key.  A key seen again later
  in the same shard is a duplicate: that second run is rejected.
* Directories, links, devices and members with no extension are skipped and counted,
  never turned into records.
* The tar is read as a stream (``tarfile`` mode ``r|*``, which also sniffs gzip), member by
  member; a member's bytes are read only if it is within ``max_member_size``.

Bad input turns into :class:`~transforms.records.Reject` values in the same stream:
a zero-length or oversized member rejects its record; a truncated tar or a corrupt gzip
stream rejects the record being read at that point (records completed before it are
kept) and ends the shard with a shard-level reject; a file that is not a tar at all is one
shard-level reject.
"""

from __future__ import annotations

import dataclasses
import tarfile
import zlib
from typing import BinaryIO, Dict, Iterator, Optional, Tuple, Union

from transforms.records import KEY, SHARD, Record, Reject

DEFAULT_MAX_MEMBER_SIZE = 256 * 1000 * 1000

# What a damaged stream can raise from inside tarfile / gzip / zlib.
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
    """Per-shard counts that are not records: skipped members and bytes read."""
    members: int = 0
    skipped_members: int = 0
    member_bytes: int = 0


class _Group:
    __slots__ = ("key", "entries", "problem")

    def __init__(self, key: str):
        self.key = key
        self.entries: Dict[str, bytes] = {}
        self.problem: Optional[str] = None


def iter_records(stream: BinaryIO, shard: str, max_member_size: int = DEFAULT_MAX_MEMBER_SIZE,
                 stats: Optional[TarStats] = None) -> Iterator[Union[Record, Reject]]:
    """Yield records and rejects from one tar / tgz stream, in tar order."""
    stats = stats if stats is not None else TarStats()
    seen = set()
    group: Optional[_Group] = None

    def finish(g: _Group):
        if g.key in seen:
            return Reject(shard, g.key, "tar", f"duplicate key: {g.key!r} appears again, not consecutively")
        seen.add(g.key)
        if g.problem:
            return Reject(shard, g.key, "tar", g.problem)
        rec: Record = {KEY: g.key, SHARD: shard}
        rec.update(g.entries)
        return rec

    try:
        tf = tarfile.open(fileobj=stream, mode="r|*", ignore_zeros=False)
    except _STREAM_ERRORS as e:
        yield Reject(shard, None, "tar", f"not a tar archive: {_describe(e)}", counts_record=False)
        return

    members = iter(tf)
    while True:
        try:
            member = next(members)
        except StopIteration:
            break
        except _STREAM_ERRORS as e:
            # Damage while reading a header: the run in progress is complete as far as
            # its members go, but it may have lost later members, so it is rejected too.
            if group is not None:
                yield Reject(shard, group.key, "tar",
                             f"truncated shard: the stream broke after this record ({_describe(e)})")
                group = None
            yield Reject(shard, None, "tar",
                         f"truncated or corrupt archive after {stats.members} members: {_describe(e)}",
                         counts_record=False)
            break
        stats.members += 1
        if not member.isreg():
            stats.skipped_members += 1
            continue
        parsed = split_key(member.name)
        if parsed is None:
            stats.skipped_members += 1
            continue
        key, ext = parsed
        if group is not None and group.key != key:
            yield finish(group)
            group = None
        if group is None:
            group = _Group(key)
        if member.size == 0:
            group.problem = group.problem or f"zero-length member: {member.name}"
            continue
        if member.size > max_member_size:
            group.problem = group.problem or (
                f"member too large: {member.name} is {member.size} bytes > max-member-size {max_member_size}")
            continue
        if ext in group.entries:
            group.problem = group.problem or f"duplicate extension: {member.name} repeats '.{ext}'"
            continue
        try:
            f = tf.extractfile(member)
            data = f.read() if f is not None else b""
            if len(data) != member.size:
                raise EOFError(f"member {member.name} has {len(data)} of {member.size} bytes")
        except _STREAM_ERRORS as e:
            yield Reject(shard, key, "tar", f"truncated shard: member {member.name} is incomplete ({_describe(e)})")
            group = None
            yield Reject(shard, None, "tar",
                         f"truncated or corrupt archive inside member {member.name}: {_describe(e)}",
                         counts_record=False)
            break
        stats.member_bytes += len(data)
        group.entries[ext] = data
    if group is not None:
        yield finish(group)


def _describe(e: BaseException) -> str:
    msg = str(e) or e.__class__.__name__
    return f"{e.__class__.__name__}: {msg}" if e.__class__.__name__ not in msg else msg
