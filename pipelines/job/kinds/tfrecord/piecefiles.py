"""A piece's per-record facts, kept in the work directory instead of in what crosses the job.

What a converted input shard tells the rest of the job is split by how it grows:

* its *summary* (``pipelines.job.kinds.tfrecord.summary.PieceSummary``, which its JSON sidecar holds): counts,
  bytes, CRC-32C, schema, reject counts -- a few hundred bytes whatever the shard holds.
  Summaries are what the global steps (gather, plan, manifest) see, so their memory grows
  with the number of input shards, never with the number of records;
* its *record file* ``piece-NNNNNN.recs`` beside the piece: a few flat arrays (a JSON
  header naming each one's dtype, offset and length, then their bytes) holding, per
  written record, its framed size (``sizes``, int64), a 128-bit hash of its
  key (``hashes``: what the duplicate-key check compares), its key's bytes (``keys``,
  NUL-separated: a tar member name holds no NUL), with ``--shuffle`` its sort key
  (``sort``), the piece's rejects as JSON lines (``rejects``), and for a piece written
  to its file, the file's CRC-32C up to the end of each record (``ends``: the CRC of
  any run of its records, without reading them).

The plan, the duplicate-key check, the shuffle and the rejects file read record files one
piece at a time (:func:`load`).  The file is written before the sidecar, which is written
last and holds the record file's CRC-32C (``recs_crc32c``): ``--resume`` trusts a piece
only when both its data and its record file match (:func:`verified`).  A piece the
in-process driver keeps in memory has no data file or sidecar, but its record file is
written all the same: the duplicate-key check of the job's end reads it, also after a
resume that kept the shard it went into.
"""

from __future__ import annotations

import io
import json
import sys
from array import array
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple

from transforms.stores import StoreConfig, get_store, split_url
from transforms.tfrecord import digests

if TYPE_CHECKING:
    import numpy as np

    from pipelines.job.kinds.tfrecord.summary import PieceSummary

try:  # hashlib's BLAKE2 without hashlib, whose OpenSSL start-up every worker would pay
    from _blake2 import blake2b
except ImportError:  # not CPython
    from hashlib import blake2b

SUFFIX = ".recs"
# The arrays' dtypes, as numpy describes them.  A shard worker writes record files without
# numpy (importing it costs every worker start-up; transforms.lazynp): only the global
# steps that read the files load it, and HASH / SORT are its dtypes of these fields.
SIZES_DESCR = "<i8"
BYTES_DESCR = "|u1"
HASH_DESCR = [["h0", ">u8"], ["h1", ">u8"]]  # big-endian: numeric order = byte order
SORT_DESCR = [["k0", ">u8"], ["k1", ">u4"]]  # the shuffle's 12-byte sort key
ENDS_DESCR = ">u4"  # a CRC-32C as google-crc32c's digest() gives it


def __getattr__(name: str):
    if name in ("HASH", "SORT"):
        return _dtype(HASH_DESCR if name == "HASH" else SORT_DESCR)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def url_of(piece_url: str) -> str:
    """``.../piece-000001.tfrecord`` -> ``.../piece-000001.recs`` (whose sidecar, for the
    clean-up of a failed job, is the piece's: ``workfiles.sidecar_of``)."""
    head, dot, ext = piece_url.rpartition(".")
    return (head if dot and "/" not in ext else piece_url) + SUFFIX


def key_bytes(key: str) -> bytes:
    # the key's own bytes, also where they are no UTF-8 (pipelines.job.element_coding)
    return key.encode("utf-8", "surrogateescape")


def sort_key(seed: Optional[int], shard: int, key: str) -> bytes:
    """The shuffle's order of a record: ``sha256(seed, input shard index, key)``, 12 bytes."""
    import hashlib  # only a shuffled job, a Beam job, needs it

    return hashlib.sha256(f"{seed}\0{shard}\0{key}".encode("utf-8", "surrogateescape")).digest()[
        :12
    ]


def key_hash(key: bytes) -> bytes:
    return blake2b(key, digest_size=16).digest()


MAGIC = b"tar2tf-recs\n"


def encode(
    sizes: List[int],
    keys: List[str],
    rejects: List[Dict[str, Any]],
    sort: Optional[List[bytes]] = None,
    ends: Optional[List[bytes]] = None,
) -> bytes:
    """The record file's bytes (without numpy: this runs in every shard worker)."""
    raw = [key_bytes(k) for k in keys]
    sized = array("q", sizes)
    if sys.byteorder != "little":
        sized.byteswap()
    members = [
        ("sizes", SIZES_DESCR, sized.tobytes()),
        ("hashes", HASH_DESCR, b"".join(key_hash(k) for k in raw)),
        ("keys", BYTES_DESCR, b"\0".join(raw)),
        (
            "rejects",
            BYTES_DESCR,
            "".join(json.dumps(r, sort_keys=True) + "\n" for r in rejects).encode(),
        ),
    ]
    if sort is not None:
        members.append(("sort", SORT_DESCR, b"".join(sort)))
    if ends is not None:
        members.append(("ends", ENDS_DESCR, b"".join(ends)))
    return _pack(members)


def pack(arrays: "Dict[str, np.ndarray]") -> bytes:
    """Flat numpy arrays as one record file (what :func:`encode` writes from lists)."""
    import numpy as np

    return _pack(
        [
            (
                name,
                [list(f) for f in a.dtype.descr] if a.dtype.names else a.dtype.str,
                np.ascontiguousarray(a).tobytes(),
            )
            for name, a in arrays.items()
        ]
    )


def _pack(members: List[Tuple[str, Any, bytes]]) -> bytes:
    """Magic, header length (8 bytes), a JSON header naming each array's offset, length
    and dtype, then the arrays' bytes."""
    head, off = {}, 0
    for name, descr, data in members:
        head[name] = [off, len(data), descr]
        off += len(data)
    text = json.dumps(head).encode()
    parts = [MAGIC, len(text).to_bytes(8, "little"), text]
    return b"".join(parts + [data for _, _, data in members])


def _dtype(d) -> "np.dtype":
    import numpy as np

    return np.dtype([tuple(f) for f in d]) if isinstance(d, list) else np.dtype(d)


def _header(f) -> Tuple[Dict[str, Any], int]:
    if f.read(len(MAGIC)) != MAGIC:
        raise ValueError("not a tar2tf record file")
    n = int.from_bytes(f.read(8), "little")
    return json.loads(f.read(n)), len(MAGIC) + 8 + n


def write(piece_url: str, data: bytes, config: Optional[StoreConfig] = None) -> str:
    """Store a piece's record file (atomically, as every store write); its CRC-32C."""
    get_store(piece_url, config).write_bytes(url_of(piece_url), data)
    d = digests.new("crc32c")
    d.update(data)
    return digests.hexdigest(d)


class Records:
    """One piece's record file, read whole (one piece's worth of memory)."""

    def __init__(self, data: bytes):
        f = io.BytesIO(data)
        self._members, self._base = _header(f)
        self._data = data

    def __getitem__(self, name: str) -> "np.ndarray":
        import numpy as np

        off, n, dt = self._members[name]
        start = self._base + off
        return np.frombuffer(self._data[start : start + n], dtype=_dtype(dt))

    def key(self, r: int) -> str:
        """Record ``r``'s key."""
        return self["keys"].tobytes().split(b"\0")[r].decode("utf-8", "surrogateescape")

    def rejects(self) -> List[Dict[str, Any]]:
        text = self["rejects"].tobytes().decode()
        return [json.loads(line) for line in text.splitlines()]


def load(summary: "PieceSummary", config: Optional[StoreConfig] = None) -> Records:
    return _load(summary.piece, config)


def _load(piece_url: str, config: Optional[StoreConfig]) -> Records:
    url = url_of(piece_url)
    return Records(get_store(url, config).read_bytes(url))


def member(
    summary: "PieceSummary", name: str, config: Optional[StoreConfig] = None
) -> "np.ndarray":
    """One array of a piece's record file; from a local file, only that array is read
    (the plan reads sizes, 8 bytes a record, not the keys beside them)."""
    return _members(summary.piece, [name], config)[0]


def _members(
    piece_url: str, names: Sequence[str], config: Optional[StoreConfig]
) -> "List[np.ndarray]":
    """Arrays of a piece's record file, read at once: from a bucket the whole file once,
    from a local file its header once and only those arrays."""
    url = url_of(piece_url)
    if split_url(url)[0] != "":
        recs = _load(piece_url, config)
        return [recs[name] for name in names]
    import numpy as np

    out = []
    with open(url, "rb") as f:
        members, base = _header(f)
        for name in names:
            off, n, dt = members[name]
            f.seek(base + off)
            data = f.read(n)
            if len(data) != n:
                raise IOError(f"{url} is shorter than its header says")
            out.append(np.frombuffer(data, dtype=_dtype(dt)))
    return out


def sizes(summary: "PieceSummary", config: Optional[StoreConfig] = None) -> "np.ndarray":
    """The framed sizes of a piece's written records (none read for an empty piece)."""
    if not summary.records:
        import numpy as np

        return np.zeros(0, dtype=SIZES_DESCR)
    return member(summary, "sizes", config)


def record_ends(
    piece_url: str, config: Optional[StoreConfig] = None
) -> "Optional[Tuple[np.ndarray, np.ndarray]]":
    """Where each written record ends in the piece's file, and the file's CRC-32C up to
    there; None when the record file has no ``ends`` (a piece held in memory, or written by
    an earlier version) or cannot be read."""
    import numpy as np

    try:
        crcs, framed = _members(piece_url, ["ends", "sizes"], config)
        offsets = np.cumsum(framed, dtype=np.int64)
    except (KeyError, OSError, ValueError):
        return None
    return (offsets, crcs) if len(offsets) == len(crcs) else None


def verified(summary: "PieceSummary", config: Optional[StoreConfig] = None) -> bool:
    """Whether the piece's record file is there with the CRC-32C its sidecar holds."""
    want = summary.recs_crc32c
    if not want:
        return False
    url = url_of(summary.piece)
    try:
        data = get_store(url, config).read_bytes(url)
    except (FileNotFoundError, OSError):
        return False
    d = digests.new("crc32c")
    d.update(data)
    return digests.hexdigest(d) == want


def rejects_of(
    summaries: Iterable["PieceSummary"], config: Optional[StoreConfig] = None
) -> Iterable[Dict[str, Any]]:
    """The rejects of the pieces, in input order, their record files read many at a time
    (``pipelines.job.inflight``)."""
    from pipelines.job import inflight

    rejected = (
        s
        for s in sorted(summaries, key=lambda s: s.index)
        if s.records_rejected or s.shards_rejected
    )
    for _, rejects in inflight.ordered(lambda s: load(s, config).rejects(), rejected):
        yield from rejects
