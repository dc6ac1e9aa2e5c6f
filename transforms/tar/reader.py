"""A sequential tar reader for streams: member headers and member bytes, in order.

Why not :mod:`tarfile`: in stream mode (``r|``) it re-buffers every 10 KB block through
bytes concatenation and builds a ``TarInfo`` with all of its post-processing for every
member, the largest CPU cost of a passthrough conversion, and all of it under the GIL
(docs/benchmarks.md, "Costs behind design choices").  Converting needs far less: each
member's name, size and type, then its bytes.  This reader parses the headers every common
writer produces -- POSIX ustar (with its name prefix), GNU (``L`` long names), pax (``x``
extended headers: ``path``, ``size``; ``g`` global headers are skipped), base-256 sizes --
checks every header's checksum like tarfile does, and reads member bytes straight from the
buffered stream.  The grouping tests
compare its records with WebDataset's own tar reader on GNU, pax and ``tar -c`` archives.

Members that are not regular files (directories, links, devices, GNU sparse files) are
reported with ``isreg() == False`` and their data is skipped; links carry their target in
``linkname`` (ustar field, GNU ``K`` long link name or pax ``linkpath``).

Metadata headers (GNU ``L``/``K``, pax ``x``/``g``) are read into memory, so their size
is bounded by :data:`MAX_META_SIZE`: a damaged or hostile size field (base-256 allows
2^95) would otherwise make one shard allocate until the job dies of MemoryError.
"""

from __future__ import annotations

import struct
import tarfile
from typing import BinaryIO, Dict, Optional

BLOCK = 512
_ZERO = bytes(BLOCK)
_REGULAR = (b"0", b"\0", b"7")  # regular, old-style regular, contiguous
_PAX = (b"x", b"X")  # per-member pax header (X: Solaris)
_META = _PAX + (b"g", b"L", b"K")  # headers that describe the next member
_NO_DATA = (b"1", b"2", b"3", b"4", b"5", b"6")  # links, devices, dirs, fifos
_SIGNED = struct.Struct("148b8x356b")
_SKIP_CHUNK = 1 << 20
_LINKS = (b"1", b"2")  # hard link, symbolic link

# Largest GNU long-name / pax header accepted.  Real ones hold a path or a few attributes
# (PATH_MAX is 4096); Go's archive/tar refuses the same headers above 1 MiB
# (maxSpecialFileSize, the fix for CVE-2022-2879).
MAX_META_SIZE = 1 << 20


class TarFormatError(tarfile.ReadError):
    """A header that is not a valid tar header, or a stream that ends inside one."""


class Member:
    """One archive member: ``name``, ``size`` (bytes of data), ``type`` (the typeflag),
    ``linkname`` (the target of a link, else "")."""

    __slots__ = ("name", "size", "type", "linkname")

    def __init__(self, name: str, size: int, type_: bytes, linkname: str = ""):
        self.name, self.size, self.type, self.linkname = name, size, type_, linkname

    def isreg(self) -> bool:
        return self.type in _REGULAR

    def islink(self) -> bool:
        """A hard link (``1``: GNU tar stores a file's second name so, with no data) or a
        symbolic link (``2``)."""
        return self.type in _LINKS

    def __repr__(self) -> str:
        return f"Member({self.name!r}, {self.size}, {self.type!r})"


def _number(field: bytes) -> int:
    """A numeric header field: octal text, or GNU base-256 (first byte 0x80 / 0xff)."""
    if field[:1] in (b"\x80", b"\xff"):
        n = int.from_bytes(field[1:], "big")
        return n - (1 << (8 * (len(field) - 1))) if field[0] == 0xFF else n
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise TarFormatError(f"invalid number field {field!r} in tar header") from None


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _check(header: bytes) -> None:
    stored = _number(header[148:156])
    unsigned = sum(header) - sum(header[148:156]) + 8 * 32
    if stored != unsigned and stored != sum(_SIGNED.unpack(header)) + 8 * 32:
        raise TarFormatError("bad checksum in tar header")


def _pax_records(data: bytes) -> Dict[str, str]:
    """``"<len> <key>=<value>\\n"`` records of a pax extended header."""
    out: Dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos : pos + 1] != b"\0":
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space])
        except ValueError:
            raise TarFormatError("invalid pax extended header") from None
        if space < 0 or length <= 0 or pos + length > len(data):
            raise TarFormatError("invalid pax extended header")
        key, eq, value = data[space + 1 : pos + length - 1].partition(b"=")
        if not eq:
            raise TarFormatError("invalid pax extended header")
        out[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


class TarStream:
    """Iterate the members of the tar archive in ``stream`` (anything with ``read(n)``
    that returns fewer than ``n`` bytes only at the end, e.g. a ``BufferedReader``).

    After each member from :meth:`next`, call :meth:`read` for its bytes, or nothing (the
    next call skips them).  :meth:`next` returns None at the end: ``ended`` is then True
    if the archive's end-of-archive block was seen, False if the stream simply stopped at
    a member boundary (a cut-short archive).  Damage raises :class:`TarFormatError` (or
    ``EOFError`` for member data cut short).
    """

    def __init__(self, stream: BinaryIO):
        self._f = stream
        self._unread = 0  # data + padding of the current member not yet consumed
        self.offset = 0  # stream position of the next header
        self.ended = False

    def _take(self, n: int) -> bytes:
        data = self._f.read(n)
        self.offset += len(data)
        return data

    def _skip(self, n: int) -> None:
        while n > 0:
            got = len(self._take(min(n, _SKIP_CHUNK)))
            if got == 0:
                raise EOFError(f"the stream ended {n} bytes before the end of a tar member")
            n -= got

    def _data(self, size: int) -> bytes:
        data = self._take(size)
        if len(data) != size:
            raise EOFError(f"the stream ended inside a tar member ({len(data)} of {size} bytes)")
        self._skip(-size % BLOCK)
        return data

    def next(self) -> Optional[Member]:
        if self._unread:
            n, self._unread = self._unread, 0
            self._skip(n)
        name: Optional[str] = None
        linkname: Optional[str] = None
        size: Optional[int] = None
        sparse = False
        first = True
        while True:
            start = self.offset
            header = self._take(BLOCK)
            if not header:
                if not first:
                    raise TarFormatError("the stream ended after an extended header")
                if start == 0:
                    raise TarFormatError("empty file")
                return None
            if len(header) < BLOCK:
                raise TarFormatError(f"the stream ended inside a tar header at offset {start}")
            if header == _ZERO:
                if not first:
                    raise TarFormatError("end-of-archive block right after an extended header")
                self.ended = True
                return None
            _check(header)
            first = False
            kind = header[156:157]
            length = _number(header[124:136])
            if kind in _META:
                if length < 0:
                    raise TarFormatError(f"negative size in a tar header at offset {start}")
                if length > MAX_META_SIZE:
                    raise TarFormatError(
                        f"oversized metadata header (type {kind.decode('latin-1')}) at offset "
                        f"{start}: {length} bytes, over the {MAX_META_SIZE}-byte limit"
                    )
                data = self._data(length)
                if kind == b"L":
                    name = _text(data)
                elif kind == b"K":
                    linkname = _text(data)
                elif kind in _PAX:
                    rec = _pax_records(data)
                    name = rec.get("path", name)
                    linkname = rec.get("linkpath", linkname)
                    if "size" in rec:
                        try:
                            size = int(rec["size"])
                        except ValueError:
                            raise TarFormatError("invalid size in a pax extended header") from None
                    sparse = sparse or any(k.startswith("GNU.sparse.") for k in rec)
                continue  # g (global header) does not change members
            if name is None:
                name = _text(header[0:100])
                prefix = header[345:500] if header[257:265] == b"ustar\x0000" else b""
                if prefix[:1] not in (b"", b"\0"):
                    name = _text(prefix) + "/" + name
            if size is None:
                size = length
            if size < 0:
                raise TarFormatError(f"negative size in a tar header at offset {start}")
            if kind == b"S":
                sparse = True
                ext = header[482]
                while ext:  # old GNU sparse: extension blocks follow the header
                    block = self._take(BLOCK)
                    if len(block) < BLOCK:
                        raise TarFormatError("the stream ended inside a sparse header")
                    ext = block[504]
            if kind == b"\0" and name.endswith("/"):
                kind = b"5"  # an old-style directory
            if kind == b"5":
                name = name.rstrip("/")
            if kind in _NO_DATA:
                size = 0  # like tarfile: links, devices and directories have no data blocks
            if kind in _LINKS and linkname is None:
                linkname = _text(header[157:257])
            self._unread = size + (-size % BLOCK)
            return Member(name, size, b"S" if sparse else kind, linkname or "")

    def read(self, member: Member) -> bytes:
        """The bytes of ``member``, the one :meth:`next` returned last."""
        if self._unread != member.size + (-member.size % BLOCK):
            raise ValueError(f"{member.name}: its data was already consumed")
        self._unread = 0
        return self._data(member.size)
