"""Records whose key an earlier input shard already had, found in bounded memory.

Within a shard a repeated key is a ``tar`` reject; across shards both records are
written (they may be distinct samples that share a name), and the manifest says so: the
count of records written whose key an earlier input shard (in input order, a different
shard URL) had, and the first few (in input order), each with the shard that had it first.

Keys are compared by a 128-bit hash (``pipelines.job.kinds.tfrecord.piecefiles``; the chance of two keys
sharing one among 10^9 records is about 10^-21).  Each record is a row ``(hash, shard,
piece, record)``; the rows are grouped by the hash's leading bits into buckets, and each
bucket is sorted and scanned with array operations (:func:`scan`), which gives its count
and its earliest examples; the buckets' results add up (:func:`merge`).  Only the
examples' keys are then read back as text (:func:`report`).  Two drivers group the rows:

* :func:`duplicate_keys`, on one worker: the record files read many at a time, the rows
  bucketed in local files (:mod:`pipelines.job.external`);
* the Beam graph (``pipelines.beam.duplicates``): the rows keyed by bucket across the
  workers, a ``GroupByKey`` per bucket, no per-record scratch on any one worker's disk.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from pipelines.job import external, inflight
from pipelines.job.kinds.tfrecord import piecefiles
from pipelines.job.kinds.tfrecord.summary import PieceSummary
from transforms.stores import StoreConfig

EXAMPLES = 5
# s: the input shard's URL as a 64-bit hash: two pieces of one URL (an input listed twice)
# are one shard, as the manifest has always counted; p: the piece's index in the job
ROW = np.dtype([("h0", ">u8"), ("h1", ">u8"), ("s", "<u8"), ("p", "<i4"), ("r", "<i4")])
Found = Tuple[int, int, int]  # (piece, record, piece that had the key first)


def shard_id(url: str) -> int:
    return int.from_bytes(piecefiles.key_hash(piecefiles.key_bytes(url))[:8], "little")


def rows_of(piece: PieceSummary, hashes: np.ndarray) -> np.ndarray:
    """The rows of one piece's records, from its record file's key hashes."""
    rows = np.empty(len(hashes), dtype=ROW)
    rows["h0"], rows["h1"] = hashes["h0"], hashes["h1"]
    rows["s"], rows["p"], rows["r"] = shard_id(piece.shard), piece.index, np.arange(len(hashes))
    return rows


def scan(rows: np.ndarray) -> Tuple[int, List[Found]]:
    """One bucket's rows (all rows of each hash they hold, in any order): how many are
    duplicates, and the earliest :data:`EXAMPLES` of them."""
    if len(rows) < 2:
        return 0, []
    rows = rows[np.lexsort((rows["r"], rows["p"], rows["h1"], rows["h0"]))]
    new = np.ones(len(rows), dtype=bool)
    new[1:] = (rows["h0"][1:] != rows["h0"][:-1]) | (rows["h1"][1:] != rows["h1"][:-1])
    first = np.maximum.accumulate(np.where(new, np.arange(len(rows)), 0))
    dup = ~new & (rows["s"] != rows["s"][first])
    n = int(dup.sum())
    if not n:
        return 0, []
    at = np.nonzero(dup)[0]
    at = at[np.lexsort((rows["r"][at], rows["p"][at]))][:EXAMPLES]
    return n, [(int(rows["p"][i]), int(rows["r"][i]), int(rows["p"][first[i]])) for i in at]


def merge(results: Sequence[Tuple[int, List[Found]]]) -> Tuple[int, List[Found]]:
    """The buckets' results as one."""
    count = sum(n for n, _ in results)
    found = sorted(f for _, fs in results for f in fs)[:EXAMPLES]
    return count, [tuple(f) for f in found]


def report(
    result: Tuple[int, List[Found]],
    pieces: Sequence[PieceSummary],
    key_of: Callable[[PieceSummary, int], str],
) -> Dict[str, Any]:
    """``{"count", "examples": [{"key", "first", "again"}]}``, the examples' keys read."""
    count, found = result
    by_index = {p.index: p for p in pieces} if found else {}
    examples = [
        {"key": key_of(by_index[p], r), "first": by_index[f].shard, "again": by_index[p].shard}
        for p, r, f in found
    ]
    return {"count": count, "examples": examples}


def _rows(
    pieces: Sequence[PieceSummary], hashes_of: Callable[[PieceSummary], np.ndarray]
) -> Iterator[np.ndarray]:
    # the record files read many at a time (pipelines.job.inflight), in order
    for p, h in inflight.ordered(hashes_of, [p for p in pieces if p.records]):
        yield rows_of(p, h)


def duplicate_keys(
    pieces: Sequence[PieceSummary],
    config: Optional[StoreConfig] = None,
    hashes_of: Optional[Callable[[PieceSummary], np.ndarray]] = None,
    key_of: Optional[Callable[[PieceSummary, int], str]] = None,
    per_bucket: int = external.BUCKET_ROWS,
    found: Optional[Tuple[int, List[Found]]] = None,
) -> Dict[str, Any]:
    """``{"count", "examples": [{"key", "first", "again"}]}`` over the pieces' summaries;
    ``hashes_of`` / ``key_of``: a piece's key hashes / one of its keys (default: its
    record file).  ``found``: the merged result of a driver that scanned the buckets
    itself (the Beam graph); else they are scanned here."""
    key_of = key_of or (lambda p, r: piecefiles.load(p, config).key(r))
    if found is None:
        found = scan_here(pieces, config, hashes_of, per_bucket)
    return report(found, pieces, key_of)


def scan_here(
    pieces: Sequence[PieceSummary],
    config: Optional[StoreConfig] = None,
    hashes_of: Optional[Callable[[PieceSummary], np.ndarray]] = None,
    per_bucket: int = external.BUCKET_ROWS,
) -> Tuple[int, List[Found]]:
    """Every bucket scanned on this worker, merged: the rows in local bucket files."""
    hashes_of = hashes_of or (lambda p: piecefiles.member(p, "hashes", config))
    pieces = sorted(pieces, key=lambda p: p.index)
    total = sum(p.records for p in pieces)
    buckets = external.buckets(_rows(pieces, hashes_of), ROW, total, per_bucket)
    return merge([scan(rows) for rows in buckets])
