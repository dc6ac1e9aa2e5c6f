"""Whole-file digests of the files tar2tf writes and checks.

* ``crc32c`` (hex, 8 digits): final TFRecord shards (manifest rows) and the work pieces
  behind ``--resume``.  google-crc32c's hardware CRC runs at ~5 GB/s where sha256 runs at
  ~1 GB/s, and a converter touches every output byte at least twice (measured: sha256 was
  ~0.5 s of CPU per 282 MB passthrough job, a third of its time).  It is the check object
  stores keep themselves: a GCS object's ``crc32c`` (``gcloud storage hash --hex``) equals
  the manifest's for an uploaded shard.  It detects accidental damage (the threat here:
  truncation, bit rot, a half-copied file), not deliberate tampering.
* ``sha256``: PCR record files (the digest also lives in the PCR index), and manifests
  written by tar2tf 0.1; ``tar2tf verify`` checks whichever a row carries.
"""

from __future__ import annotations

from typing import Any, Mapping

import google_crc32c

KINDS = ("crc32c", "sha256")


def new(kind: str):
    """A running digest with ``update(bytes)``; read it with :func:`hexdigest`."""
    if kind == "crc32c":
        return google_crc32c.Checksum()
    if kind == "sha256":
        import hashlib  # only PCR files and older manifests: a worker need not load OpenSSL
        return hashlib.sha256()
    raise ValueError(f"unknown digest {kind!r}")


def hexdigest(digest) -> str:
    h = digest.hexdigest()
    return h.decode() if isinstance(h, bytes) else h


def kind_of(row: Mapping[str, Any]) -> str:
    """The digest a manifest row or sidecar carries (crc32c when it has both); '' if none."""
    return next((k for k in KINDS if k in row), "")
