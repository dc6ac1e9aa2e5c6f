"""Global, seeded shuffle of records across output shards (``--shuffle --seed S``).

Each record gets a sort key ``sha256(seed, input shard index, record key)``; the order of all
records by that key is the output order, packed into shards by the same greedy size rule
as the unshuffled path.  Records then move through Beam's shuffle exactly once: every
piece is read by one worker, each record is keyed by its final shard, a GroupByKey brings
a shard's records together, and the writer orders them by rank.  The result depends only
on the inputs, the options and the seed.

Cost: every record crosses the shuffle once (the unshuffled path copies byte ranges
instead), and one final shard's records are held by one worker while it is written, so
``--max-shard-size`` bounds that memory.
"""

from __future__ import annotations

import hashlib
from typing import Any, Dict, List, Tuple

import apache_beam as beam

from pipelines.job import finalize
from transforms.sizes import parse_size
from transforms.stores import get_store
from transforms.tfrecord.framing import iter_frames, pack


def sort_key(seed: int, shard: int, key: str) -> bytes:
    # the key's own bytes, also where they are no UTF-8 (pipelines.job.element_coding)
    return hashlib.sha256(f"{seed}\0{shard}\0{key}".encode("utf-8", "surrogateescape")).digest()[
        :12
    ]


def assignment(pieces: List[Dict[str, Any]], cfg) -> Dict[str, Any]:
    """Final shard names and, per piece, (shard index, rank) for each of its records."""
    pieces = sorted(pieces, key=lambda p: p["index"])
    order: List[Tuple[bytes, int, int, int]] = []
    for pi, p in enumerate(pieces):
        for ri, (k, size) in enumerate(zip(p["keys"], p["sizes"])):
            order.append((sort_key(cfg.seed, p["index"], k), pi, ri, size))
    order.sort()
    spans = pack([o[3] for o in order], parse_size(cfg.max_shard_size), cfg.records_per_shard)
    names = finalize.shard_names(cfg.output, len(spans))
    where: Dict[str, List[Tuple[int, int]]] = {p["piece"]: [None] * len(p["sizes"]) for p in pieces}
    for si, (a, b) in enumerate(spans):
        for rank, (_, pi, ri, _) in enumerate(order[a:b]):
            where[pieces[pi]["piece"]][ri] = (si, rank)
    return {"names": names, "where": where}


def _scatter(piece: Dict[str, Any], plan: Dict[str, Any], cfg):
    slots = plan["where"][piece["piece"]]
    if not slots:
        return
    with get_store(piece["piece"], cfg.store).open_read(piece["piece"]) as f:
        for (shard, rank), (_, payload) in zip(slots, iter_frames(f)):
            yield shard, (rank, payload)


def _write(item, plan: Dict[str, Any], cfg):
    shard, ranked = item
    ranked = sorted(ranked, key=lambda rp: rp[0])
    path = plan["names"][shard]
    from transforms.tfrecord.framing import frame

    shard = finalize.ShardFile(path, cfg.store, cfg.dali_index)
    try:
        for _, p in ranked:
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
