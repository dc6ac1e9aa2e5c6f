"""Records whose key an earlier input shard already had, found in bounded memory.

Within a shard a repeated key is a ``tar`` reject; across shards both records are
written (they may be distinct samples that share a name), and the manifest says so: the
count of records written whose key an earlier input shard (in input order, a different
shard URL) had, and the first few (in input order), each with the shard that had it first.

Keys are compared by a 128-bit hash (``pipelines.job.kinds.tfrecord.piecefiles``; the chance of two keys
sharing one among 10^9 records is about 10^-21).  The rows ``(hash, piece, record)`` of
every piece are grouped by hash in buckets (:mod:`pipelines.job.external`), and each
bucket is sorted and scanned with array operations: memory is one bucket, whatever the
record count.  Only the examples' keys are then read back as text.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import numpy as np

from pipelines.job import external, inflight
from pipelines.job.kinds.tfrecord import piecefiles
from pipelines.job.kinds.tfrecord.summary import PieceSummary
from transforms.stores import StoreConfig

EXAMPLES = 5
ROW = np.dtype([("h0", ">u8"), ("h1", ">u8"), ("p", "<i4"), ("r", "<i4")])


def _rows(
    pieces: Sequence[PieceSummary], hashes_of: Callable[[PieceSummary], np.ndarray]
) -> Iterator[np.ndarray]:
    with_records = ((pos, p) for pos, p in enumerate(pieces) if p.records)
    # the record files read many at a time (pipelines.job.inflight), in order
    for (pos, _), h in inflight.ordered(lambda pair: hashes_of(pair[1]), with_records):
        rows = np.empty(len(h), dtype=ROW)
        rows["h0"], rows["h1"] = h["h0"], h["h1"]
        rows["p"], rows["r"] = pos, np.arange(len(h))
        yield rows


def duplicate_keys(
    pieces: Sequence[PieceSummary],
    config: Optional[StoreConfig] = None,
    hashes_of: Optional[Callable[[PieceSummary], np.ndarray]] = None,
    key_of: Optional[Callable[[PieceSummary, int], str]] = None,
    per_bucket: int = external.BUCKET_ROWS,
) -> Dict[str, Any]:
    """``{"count", "examples": [{"key", "first", "again"}]}`` over the pieces' summaries;
    ``hashes_of`` / ``key_of``: a piece's key hashes / one of its keys (default: its
    record file)."""
    hashes_of = hashes_of or (lambda p: piecefiles.member(p, "hashes", config))
    key_of = key_of or (lambda p, r: piecefiles.load(p, config).key(r))
    pieces = sorted(pieces, key=lambda p: p.index)
    # pieces of one shard URL (an input listed twice) share an id: "another shard" is
    # another URL, as the manifest has always counted
    ids: Dict[str, int] = {}
    shard_id = np.array([ids.setdefault(p.shard, len(ids)) for p in pieces], dtype=np.int64)
    total = sum(p.records for p in pieces)
    count = 0
    found: List[tuple] = []  # (piece, record, first piece) of the earliest duplicates
    for rows in external.buckets(_rows(pieces, hashes_of), ROW, total, per_bucket):
        if len(rows) < 2:
            continue
        rows = rows[np.lexsort((rows["r"], rows["p"], rows["h1"], rows["h0"]))]
        new = np.ones(len(rows), dtype=bool)
        new[1:] = (rows["h0"][1:] != rows["h0"][:-1]) | (rows["h1"][1:] != rows["h1"][:-1])
        first = np.maximum.accumulate(np.where(new, np.arange(len(rows)), 0))
        dup = ~new & (shard_id[rows["p"]] != shard_id[rows["p"][first]])
        n = int(dup.sum())
        if not n:
            continue
        count += n
        at = np.nonzero(dup)[0]
        at = at[np.lexsort((rows["r"][at], rows["p"][at]))][:EXAMPLES]
        found.extend((int(rows["p"][i]), int(rows["r"][i]), int(rows["p"][first[i]])) for i in at)
    found.sort()
    examples = [
        {"key": key_of(pieces[p], r), "first": pieces[f].shard, "again": pieces[p].shard}
        for p, r, f in found[:EXAMPLES]
    ]
    return {"count": count, "examples": examples}
