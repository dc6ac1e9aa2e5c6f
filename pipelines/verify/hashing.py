"""A file's bytes read once, through the digest its manifest row carries: the whole-file
checks every shard format shares (size and crc32c, or sha256 in older manifests)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from pipelines.verify.manifest import is_int
from transforms.tfrecord import digests


class HashingReader:
    """Wraps a binary stream: every byte read also goes into the digest the manifest row
    carries (:mod:`transforms.tfrecord.digests`) and a byte count."""

    def __init__(self, f, row: Dict[str, Any]):
        self.kind = digests.kind_of(row)
        self._f, self.n = f, 0
        self._digest = digests.new(self.kind) if self.kind else None
        # one byte beyond the size the manifest gives is enough to tell the file is longer:
        # a frame whose length field is huge (or an endless file) is never read whole
        size = row.get("bytes")
        self.limit = size + 1 if is_int(size) and size >= 0 else None

    def read(self, n=-1):
        if self.limit is not None:
            left = max(0, self.limit - self.n)
            n = left if n is None or n < 0 else min(n, left)
        data = self._f.read(n)
        if self._digest is not None:
            self._digest.update(data)
        self.n += len(data)
        return data

    def mismatch(self, row: Dict[str, Any]) -> Optional[str]:
        """What differs when the bytes read do not match the row's digest (the check's
        name is :attr:`kind`); None when they match or the row carries no digest."""
        if self._digest is None:
            return None
        got = digests.hexdigest(self._digest)
        return None if got == row[self.kind] else f"{got}, manifest says {row[self.kind]}"

    def drain(self):
        for _chunk in iter(lambda: self.read(4 << 20), b""):
            pass


def check_bytes(f: HashingReader, row: Dict[str, Any], add) -> None:
    """A shard's size and whole-file digest, read through ``f``, against its manifest row."""
    if f.limit is not None and f.n >= f.limit:
        add("size", f"more than {row['bytes']} bytes, manifest says {row['bytes']}")
    elif f.n != row["bytes"]:
        add("size", f"{f.n} bytes, manifest says {row['bytes']}")
    differs = f.mismatch(row)
    if not f.kind:
        add("digest", "manifest row has no crc32c (or sha256)")
    elif differs:
        add(f.kind, differs)
