"""Global, seeded shuffle of records across output shards (``--shuffle --seed S``).

Each record gets a sort key ``sha256(seed, input shard index, record key)`` (computed as
its piece is converted, kept in the piece's record file: ``pipelines.job.kinds.tfrecord.piecefiles``);
the order of all records by that key (ties: input order) is the output order, packed
into shards by the same greedy size rule as the unshuffled path.  Records then move
through Beam's shuffle exactly once: every piece is read by one worker, each record is
keyed by its final shard, a GroupByKey brings a shard's records together, and the writer
orders them.  The result depends only on the inputs, the options and the seed.

The plan never holds every record: the sort keys of all pieces are grouped by their
leading bits in buckets (``pipelines.job.external``) -- bucket order is key order, since
the keys are hashes -- and each bucket, sorted, feeds the packing rule.  What the plan
passes on is each final shard's first record in that order (its sort key, piece and
record): a list as long as the shard count, the side input of every worker, which finds
a record's shard by bisection.

Cost: every record crosses the shuffle once (the unshuffled path copies byte ranges
instead), and one final shard's records are held by one worker while it is written, so
``--max-shard-size`` bounds that memory.
"""

from __future__ import annotations

import bisect
from typing import Any, Dict, Iterator, List, Tuple

import apache_beam as beam
import numpy as np

from pipelines.job import external, names
from pipelines.job.kinds.tfrecord import piecefiles
from pipelines.job.kinds.tfrecord.plan import Packing
from pipelines.job.kinds.tfrecord.shardfile import ShardFile
from pipelines.job.kinds.tfrecord.summary import PieceSummary
from transforms.sizes import parse_size
from transforms.stores import get_store
from transforms.tfrecord.framing import frame, iter_frames

ROW = np.dtype([("k0", ">u8"), ("k1", ">u4"), ("p", "<i4"), ("r", "<i4"), ("s", "<i8")])
Position = Tuple[bytes, int, int]  # (sort key, piece index, record): a record's place


def _rows(pieces: List[PieceSummary], config) -> Iterator[np.ndarray]:
    for p in pieces:
        if not p.records:
            continue
        sort, sizes = piecefiles.member(p, "sort", config), piecefiles.member(p, "sizes", config)
        rows = np.empty(len(sizes), dtype=ROW)
        rows["k0"], rows["k1"] = sort["k0"], sort["k1"]
        rows["p"], rows["r"], rows["s"] = p.index, np.arange(len(sizes)), sizes
        yield rows


def _position(row) -> Position:
    key = int(row["k0"]).to_bytes(8, "big") + int(row["k1"]).to_bytes(4, "big")
    return key, int(row["p"]), int(row["r"])


def assignment(pieces: List[PieceSummary], cfg) -> Dict[str, Any]:
    """Final shard names and the position of each shard's first record."""
    pieces = sorted(pieces, key=lambda p: p.index)
    total = sum(p.records for p in pieces)
    packing = Packing(parse_size(cfg.max_shard_size), cfg.records_per_shard)
    firsts: List[Position] = []
    for rows in external.buckets(_rows(pieces, cfg.store), ROW, total):
        rows = rows[np.lexsort((rows["r"], rows["p"], rows["k1"], rows["k0"]))]
        firsts.extend(_position(rows[i]) for i in packing.starts(rows["s"]))
    return {"names": names.shard_names(cfg.output, len(firsts)), "firsts": firsts}


def _scatter(piece: PieceSummary, plan: Dict[str, Any], cfg):
    if not piece.records:
        return
    sort = piecefiles.member(piece, "sort", cfg.store).tobytes()
    firsts = plan["firsts"]
    with get_store(piece.piece, cfg.store).open_read(piece.piece) as f:
        for r, (_, payload) in enumerate(iter_frames(f)):
            at = (sort[12 * r : 12 * r + 12], piece.index, r)
            yield bisect.bisect_right(firsts, at) - 1, (at, payload)


def _write(item, plan: Dict[str, Any], cfg):
    shard, placed = item
    shard = ShardFile(plan["names"][shard], cfg.store, cfg.dali_index)
    try:
        for _, p in sorted(placed, key=lambda ap: ap[0]):
            fr = frame(p)
            shard.write((fr,), (len(fr),))
    except BaseException as e:
        shard.abort(e)
        raise
    return shard.close()


def shuffled_shards(pieces, all_pieces, cfg):
    plan = all_pieces | "ShufflePlan" >> beam.Map(assignment, cfg)
    side = beam.pvalue.AsSingleton(plan)
    return (
        pieces
        | "Scatter" >> beam.FlatMap(_scatter, side, cfg)
        | "GroupByShard" >> beam.GroupByKey()
        | "WriteShuffled" >> beam.Map(_write, side, cfg)
    )
