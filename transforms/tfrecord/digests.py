"""Whole-file digests of the files tar2tf writes and checks.

* ``crc32c`` (hex, 8 digits): final TFRecord shards (manifest rows) and the work pieces
  behind ``--resume``.  A converter touches every output byte at least twice, and
  google-crc32c's hardware CRC costs a fraction of sha256's CPU (docs/benchmarks.md,
  "Costs behind design choices").  It is the check object
  stores keep themselves: a GCS object's ``crc32c`` (``gcloud storage hash --hex``) equals
  the manifest's for an uploaded shard.  It detects accidental damage (the threat here:
  truncation, bit rot, a half-copied file), not deliberate tampering.
* ``sha256``: PCR record files (the digest also lives in the PCR index), and manifests
  written by tar2tf 0.1; ``tar2tf verify`` checks whichever a row carries.
"""

from __future__ import annotations

import functools
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


def crc32c_of(digest) -> int:
    """A running crc32c digest's value as an int (what :func:`crc32c_combine` takes)."""
    return int.from_bytes(digest.digest(), "big")


def kind_of(row: Mapping[str, Any]) -> str:
    """The digest a manifest row or sidecar carries (crc32c when it has both); '' if none."""
    return next((k for k in KINDS if k in row), "")


# --- combining CRC-32C values --------------------------------------------------------
# A final shard's bytes may be written by several processes, each hashing its own range;
# the shard's CRC-32C is then combined from the ranges' CRCs.  Neither google-crc32c nor
# the crc32c package exposes a combine, so it is computed here the way zlib's
# crc32_combine does (a CRC is affine in its input: crc(A + B) = crc(A) * x^(8|B|) mod P
# xor crc(B), in the reflected bit order), with the CRC-32C polynomial: O(log |B|)
# carry-less multiplications of 32-bit words, tens of microseconds in Python.
_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected
_X0 = 1 << 31  # the polynomial 1, reflected


def _mulmod(a: int, b: int) -> int:
    """a * b mod P, both reflected."""
    prod = 0
    m = _X0
    while a:
        if a & m:
            prod ^= b
            a ^= m
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return prod


@functools.lru_cache(maxsize=None)
def _squares() -> tuple:
    """x^(2^k) mod P for k = 0..63 (built at the first combine, ~0.2 ms: worker processes,
    which import this module but never combine, do not pay for it)."""
    out, p = [], _X0 >> 1  # x^1
    for _ in range(64):
        out.append(p)
        p = _mulmod(p, p)
    return tuple(out)


def _xpow8(n: int) -> int:
    """x^(8n) mod P."""
    squares = _squares()
    p, k = _X0, 3  # x^(8n) = product of x^(2^(k+3)) over the bits k of n
    while n:
        if n & 1:
            p = _mulmod(squares[k], p)
        n >>= 1
        k += 1
    return p


def crc32c_combine(crc_a: int, crc_b: int, len_b: int) -> int:
    """The CRC-32C of A + B from crc(A), crc(B) and len(B) (the empty input's CRC is 0)."""
    return _mulmod(_xpow8(len_b), crc_a) ^ crc_b if len_b else crc_a
