"""One input shard -> one piece of TFRecord frames + its sidecar.

This is the per-shard work of the TFRecord conversion, kept free of Beam so that it can
run anywhere: in a Beam DoFn (``pipelines.beam.convert``), in the in-process driver
(``pipelines.inprocess.driver``) and in the local worker processes of ``--processes``
(``pipelines.inprocess.pool``), which then start without importing Beam.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from pipelines.job import counts, workfiles
from pipelines.job.kinds.tfrecord import piecefiles
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from pipelines.job.kinds.tfrecord.summary import PieceSummary
from transforms.ops.stages import FILTERED, Stages
from transforms.record_types import Reject, is_reject
from transforms.sizes import parse_size
from transforms.stores import StoreConfig, get_store, join
from transforms.tar.damage import ShardCorrupt
from transforms.tar.fetch import read_shard
from transforms.tar.grouping import TarStats
from transforms.tfrecord import digests
from transforms.tfrecord import schema as exs
from transforms.tfrecord.framing import frame_parts


@dataclasses.dataclass
class ConvertedPiece:
    """A piece just converted: its :class:`PieceSummary` (what the job keeps), and what
    whoever writes it next needs besides (never in its sidecar, never kept past its write):
    its records' framed ``sizes`` (None: read them from its record file) and, for a piece
    held in memory, its ``frames`` (None: they are in its piece file)."""

    summary: PieceSummary
    sizes: Optional[List[int]] = None
    frames: Optional[List[bytes]] = None


class _PieceOut:
    """Where a piece's frames go: its scratch file (what ``--resume`` reuses), or, with
    ``hold``, memory until it holds more than ``hold`` bytes, then the file."""

    def __init__(self, piece: str, store, hold: int):
        self.piece, self.store, self.hold = piece, store, hold
        self.frames: Optional[List[bytes]] = []
        self.held = 0
        self.digest = digests.new("crc32c")
        # the piece's CRC-32C after each frame written to its file (4 bytes, big-endian):
        # with them, a final shard takes any run of records of this piece without reading
        # it back (pipelines.job.kinds.tfrecord.shardfile.piece_crcs)
        self.ends: List[bytes] = []
        self._cm = self.f = None
        if not hold:
            self._spill()

    @property
    def on_disk(self) -> bool:
        return self.f is not None

    def _spill(self) -> None:
        self._cm = self.store.open_write(self.piece, durable=False)  # scratch: resume re-hashes it
        self.f = self._cm.__enter__()
        for fr in self.frames:
            self.f.write(fr)
            self.digest.update(fr)
            self.ends.append(self.digest.digest())
        self.frames = None

    def write(self, data: bytes) -> None:
        if self.f is None:
            self.frames.append(data)
            self.held += len(data)
            if self.held > self.hold:
                self._spill()
        else:
            self.f.write(data)
            self.digest.update(data)
            self.ends.append(self.digest.digest())

    def close(self) -> None:
        if self._cm is not None:
            self._cm.__exit__(None, None, None)

    def abort(self, exc: BaseException) -> None:
        if self._cm is not None:
            self._cm.__exit__(type(exc), exc, exc.__traceback__)

    def empty(self) -> None:
        """Drop everything written (a shard found corrupt after its records were read)."""
        self.digest = digests.new("crc32c")
        self.ends = []
        if self.on_disk:
            self.store.write_bytes(self.piece, b"")
        else:
            self.frames, self.held = [], 0


def piece_stem(work: str, index: int) -> str:
    """Input shard ``index``'s unit name in the work directory (``workfiles.unit_stem``)."""
    return join(work, f"piece-{index:06d}")


def convert_to_piece(
    index: int, url: str, work: str, cfg: ConvertConfig, stages: Stages, hold: int = 0
) -> ConvertedPiece:
    """Convert one input shard into a piece, ``piece-<index>~<attempt>.tfrecord``, its
    record file, and the unit's JSON sidecar ``piece-<index>.json`` (each attempt its own
    data files: ``pipelines.job.workfiles``).

    ``hold`` > 0 (the in-process driver, when the job does not ask for ``resume``): keep
    the frames in memory, in ``frames``, unless they exceed ``hold`` bytes; such a
    piece has no file and no sidecar, and its bytes are written once, into the final
    shards, instead of twice."""
    piece = workfiles.attempt_url(piece_stem(work, index), ".tfrecord")
    out = _PieceOut(piece, get_store(piece, cfg.store), hold)
    stats = TarStats()
    try:
        recs = _convert_records(_read_records(url, cfg, stats), stages, out)
    except BaseException as e:
        out.abort(e)
        raise
    out.close()
    if recs.corrupt is not None:
        _reject_corrupt_shard(recs, url, out)
    # the record file before the sidecar: a sidecar vouches for both (pipelines.job.kinds.tfrecord.piecefiles)
    recs_crc32c = _write_record_file(piece, index, cfg, recs, out)
    info = summary(index, url, piece, recs.sizes, recs.rejects, recs.read, recs.filtered, stats)
    info.update(schema=recs.schema, first_types=recs.first_types, recs_crc32c=recs_crc32c)
    if out.on_disk:
        info["crc32c"] = digests.hexdigest(out.digest)
        workfiles.write_sidecar(piece, info, cfg.store)
    # its sizes and held frames, for whoever writes it next
    return ConvertedPiece(PieceSummary.from_json(info), recs.sizes, out.frames)


@dataclasses.dataclass
class _Records:
    """What one shard's records became: the framed ``sizes`` and ``keys`` of those written,
    the ``rejects`` (as dicts), the merged ``schema``, each feature's dtype in the first
    record that has it, the records read and filtered, and the shard's integrity failure
    found after its records were read, if any."""

    sizes: List[int]
    keys: List[str]
    rejects: List[Dict[str, Any]]
    schema: Dict[str, Any]
    first_types: Dict[str, str]
    read: int
    filtered: int
    corrupt: Optional[Reject]


def _read_records(url: str, cfg: ConvertConfig, stats: TarStats) -> Iterator[Any]:
    """The shard's records, its rejects and a final ``ShardCorrupt``, in tar order;
    ``stats`` counts its members."""
    return read_shard(
        url,
        cfg.store,
        parse_size(cfg.max_member_size),
        stats,
        max_record_size=parse_size(cfg.max_record_size),
    )


def _convert_records(items: Iterable[Any], stages: Stages, out: _PieceOut) -> _Records:
    """Each record through the stages, framed into ``out``.  The per-record loop of the
    conversion: its state stays in locals, and each record costs no call beyond its
    stages, its framing and its write."""
    sizes: List[int] = []
    keys: List[str] = []
    rejects: List[Dict[str, Any]] = []
    schema: Dict[str, Any] = {}
    first_types: Dict[str, str] = {}  # feature -> dtype of the first record that has it
    last_schema: Optional[Dict[str, Any]] = None
    read = filtered = 0
    corrupt: Optional[Reject] = None
    for item in items:
        if isinstance(item, ShardCorrupt):
            corrupt = item
            continue
        if is_reject(item):
            rejects.append(item.to_dict())
            read += item.counts_record
            continue
        read += 1
        rec, rec_schema = stages.process_with_schema(item, parts=True)
        if rec is FILTERED:
            filtered += 1
            continue
        if is_reject(rec):
            rejects.append(rec.to_dict())
            continue
        data = frame_parts(rec)
        out.write(data)
        sizes.append(len(data))
        keys.append(item["__key__"])
        # every record enters the schema, so `tar2tf verify` can hold each Example to it
        # without false alarms on features that appear late; merging is idempotent, so
        # a run of records with the same features merges once
        if rec_schema != last_schema:
            for name, spec in rec_schema.items():
                first_types.setdefault(name, spec["dtype"])
            schema = exs.merge_schema(schema, rec_schema) if schema else rec_schema
            last_schema = rec_schema
    return _Records(sizes, keys, rejects, schema, first_types, read, filtered, corrupt)


def _reject_corrupt_shard(recs: _Records, url: str, out: _PieceOut) -> None:
    """The shard failed its integrity check after its records were read: none of its
    content can be trusted, so every record it gave is rejected and the piece emptied."""
    corrupt = recs.corrupt
    recs.rejects.append(corrupt.to_dict())
    reason = f"corrupt shard: {corrupt.reason}; record content unreliable"
    recs.rejects.extend(Reject(url, k, "tar", reason).to_dict() for k in recs.keys)
    recs.sizes, recs.keys, recs.schema, recs.first_types = [], [], {}, {}
    out.empty()


def _write_record_file(
    piece: str, index: int, cfg: ConvertConfig, recs: _Records, out: _PieceOut
) -> str:
    """The piece's record file (its records' sizes, keys, sort keys, rejects and, for a
    piece on disk, its CRC-32C after each record); returns the file's CRC-32C."""
    sort = [piecefiles.sort_key(cfg.seed, index, k) for k in recs.keys] if cfg.shuffle else None
    ends = out.ends if out.on_disk else None
    return piecefiles.write(
        piece, piecefiles.encode(recs.sizes, recs.keys, recs.rejects, sort, ends), cfg.store
    )


def summary(
    index: int,
    url: str,
    piece: str,
    sizes: List[int],
    rejects: List[Dict[str, Any]],
    read: int,
    filtered: int,
    stats: TarStats,
) -> Dict[str, Any]:
    """The counts of a converted input shard's summary (``PieceSummary``'s JSON form but
    its schema, first types and digests): never one entry per record (those stay in its
    record file)."""
    by_kind: Dict[Tuple[str, str], int] = {}
    rejected = counts.rejected(rejects)
    for r in rejects:
        k = (r["stage"], Reject.from_dict(r).kind)
        by_kind[k] = by_kind.get(k, 0) + 1
    return {
        "index": index,
        "shard": url,
        "piece": piece,
        "records": len(sizes),
        "bytes": sum(sizes),
        "records_read": read,
        "filtered": filtered,
        **rejected,
        "reject_counts": [[st, kind, n] for (st, kind), n in sorted(by_kind.items())],
        "members": stats.members,
        "skipped_members": stats.skipped_members,
        "duplicate_members": stats.duplicate_members,
        "member_bytes": stats.member_bytes,
    }


def load_verified_piece(index: int, work: str, config: StoreConfig) -> Optional[PieceSummary]:
    """A finished piece from an earlier run, if its sidecar exists and the bytes of both
    the piece and its record file match it."""
    info = workfiles.load_verified(piece_stem(work, index), "piece", config)
    try:
        summary = PieceSummary.from_json(info) if info is not None else None
    except (ValueError, TypeError):
        return None
    if summary is None or not piecefiles.verified(summary, config):
        return None
    return summary
