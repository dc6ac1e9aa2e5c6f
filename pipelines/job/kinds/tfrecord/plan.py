"""The plan of a job's final TFRecord shards, streamed from the pieces' record files.

The greedy rule (:class:`transforms.tfrecord.framing.Packer`) packs the written records of
all pieces, in input order, into final shards.  Here it runs over one piece's sizes at a
time (``pipelines.job.kinds.tfrecord.piecefiles``), never over all records at once, and finds each
shard's start with a search over the piece's cumulative sizes instead of a step per
record, so the plan costs O(pieces + shards) Python steps and one piece's sizes of
memory.  The record files are read many at a time, ahead of the rule, and each once:
shard names of the ``-NNNNN-of-NNNNN`` kind, which need the shard count, keep the cut
points of a first pass instead of reading the sizes again.  Each task is emitted as its
shard closes.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from pipelines.job import inflight, names
from pipelines.job.kinds.tfrecord import piecefiles
from pipelines.job.kinds.tfrecord.summary import PieceSummary
from transforms.stores import StoreConfig

log = logging.getLogger("tar2tf")


@dataclasses.dataclass
class ShardTask:
    """One final shard to write (``Kind.write``): its records are byte ranges of pieces, in
    plan order.  Small and picklable: a Beam element, handed from the plan to a writer."""

    index: int
    path: str
    ranges: List[Tuple[str, int, int]]  # (piece url, offset, length) of whole frames
    records: int = 0
    bytes: int = 0
    # each record's framed size, kept only for a DALI index (``dali_index``)
    sizes: Optional[np.ndarray] = None
    # piece url -> its summary's {crc32c, bytes, records}, for pieces with a piece file:
    # the writer's copy needs their CRC-32C, and a request per piece for its sidecar
    # would be a chain of requests per shard (and the sidecar may describe another
    # attempt of the unit: pipelines.job.workfiles)
    pieces: Dict[str, Dict[str, Any]] = dataclasses.field(default_factory=dict)


class Packing:
    """The greedy rule's state between pieces: the open shard's record count and bytes."""

    def __init__(self, max_bytes: Optional[int], max_records: Optional[int]):
        self.max_bytes, self.max_records = max_bytes, max_records
        self.count = self.acc = 0

    def starts(self, sizes: np.ndarray) -> List[int]:
        """The records of ``sizes`` (the next ones in input order) that open a shard, as
        :meth:`Packer.starts_shard <transforms.tfrecord.framing.Packer.starts_shard>` says
        record by record."""
        n = len(sizes)
        out: List[int] = []
        if not n:
            return out
        cs = np.cumsum(sizes, dtype=np.int64)  # cs[j]: bytes of records 0..j
        i = 0
        while i < n:
            if self.count == 0:  # nothing open (the job's first record)
                out.append(i)
                self.count, self.acc = 1, int(sizes[i])
                i += 1
                continue
            base = int(cs[i - 1]) if i else 0
            stop = n
            if self.max_bytes is not None:
                # the first record j >= i for which acc + sizes[i..j] > max_bytes
                stop = int(np.searchsorted(cs, self.max_bytes - self.acc + base, side="right"))
                stop = max(stop, i)
            if self.max_records is not None:
                stop = min(stop, i + max(self.max_records - self.count, 0))
            if stop >= n:
                self.count += n - i
                self.acc += int(cs[n - 1]) - base
                break
            out.append(stop)
            self.count, self.acc = 1, int(sizes[stop])
            i = stop + 1
        return out


class Oversized:
    """The records larger than the max shard size, each of which sits alone in its shard:
    counted as the shards are cut and said in one warning (:meth:`say`) with the first
    as the example -- a job with ``--max-shard-size 1`` has one per record, and a line
    each would bury everything else the job says."""

    def __init__(self, max_bytes: Optional[int]):
        self.max_bytes = max_bytes
        self.count = 0
        self.first: Optional[Tuple[int, str]] = None  # (framed bytes, shard path)

    def note(self, size: int, path: str) -> None:
        if self.max_bytes is not None and size > self.max_bytes:
            self.count += 1
            if self.first is None:
                self.first = (int(size), path)

    def say(self) -> None:
        if self.first is None:
            return
        size, path = self.first
        if self.count == 1:
            log.warning(
                "record of %d bytes exceeds max shard size %d: it sits alone in %s",
                size,
                self.max_bytes,
                path,
            )
        else:
            log.warning(
                "%d records exceed max shard size %d: each sits alone in its shard "
                "(the first, of %d bytes, in %s)",
                self.count,
                self.max_bytes,
                size,
                path,
            )


def _cuts(
    pieces: Sequence[PieceSummary],
    packing: Packing,
    sizes_of: Callable[[PieceSummary], np.ndarray],
    keep_sizes: bool,
) -> Iterator[Tuple[PieceSummary, Dict[int, int], Optional[np.ndarray]]]:
    """For each piece with records, in order: where shards open in it, as ``{record:
    byte offset}``, and its sizes when ``keep_sizes``.  The record files are read
    ``inflight.REQUESTS`` at a time, ahead of the greedy rule, which goes in order."""
    with_records = (p for p in pieces if p.records)
    for p, sizes in inflight.ordered(sizes_of, with_records):
        sizes = np.asarray(sizes, dtype=np.int64)
        ends = np.cumsum(sizes, dtype=np.int64)
        if len(sizes) != p.records or (len(ends) and int(ends[-1]) != p.bytes):
            raise IOError(
                f"the record file of {p.piece} disagrees with its summary "
                f"({len(sizes)} records of {int(ends[-1]) if len(ends) else 0} bytes, "
                f"not {p.records} of {p.bytes})"
            )
        opens = {a: int(ends[a - 1]) if a else 0 for a in packing.starts(sizes)}
        yield p, opens, (sizes if keep_sizes else None)


def stream_plan(
    pieces: Sequence[PieceSummary],
    output: str,
    max_bytes: Optional[int],
    max_records: Optional[int],
    config: Optional[StoreConfig] = None,
    dali_index: bool = False,
    sizes_of: Optional[Callable[[PieceSummary], np.ndarray]] = None,
) -> Iterator[ShardTask]:
    """The final shards' tasks, in order, each when its shard closes (with their records'
    ``sizes`` only for ``dali_index``).  ``pieces``: summaries (their ``records`` and
    ``bytes``); ``sizes_of``: a piece's sizes (default: its record file).

    Each record file is read once.  Shard names of the ``-NNNNN-of-NNNNN`` kind need the
    shard count before the first task: the cut points are then kept (a few integers per
    final shard) and the tasks made from them and the summaries, without a second read --
    but for ``dali_index``, whose tasks carry every record's size."""
    sizes_of = sizes_of or (lambda p: piecefiles.sizes(p, config))
    pieces = sorted(pieces, key=lambda p: p.index)
    cuts = _cuts(pieces, Packing(max_bytes, max_records), sizes_of, dali_index)
    total = None
    if not names.streams_names(output):
        # only pieces where a shard opens: at most one entry per final shard
        kept = {p.index: opens for p, opens, _ in cuts if opens}
        total = sum(len(opens) for opens in kept.values())
        if dali_index:  # the sizes again, for the index
            cuts = _cuts(pieces, Packing(max_bytes, max_records), sizes_of, True)
        else:
            cuts = ((p, kept.get(p.index, {}), None) for p in pieces if p.records)
    cur: Optional[ShardTask] = None
    parts: List[np.ndarray] = []  # the open shard's sizes, piece by piece (dali_index)
    n = 0

    oversized = Oversized(max_bytes)

    def closed(task: ShardTask) -> ShardTask:
        if task.records == 1:
            oversized.note(task.bytes, task.path)
        if dali_index:
            task.sizes = np.concatenate(parts)
            parts.clear()
        return task

    for p, opens, sizes in cuts:
        at = {0: 0, **opens, p.records: p.bytes}  # record -> its byte offset in the piece
        points = sorted(set(opens) | {0})
        for k, a in enumerate(points):
            b = points[k + 1] if k + 1 < len(points) else p.records
            if a in opens:
                if cur is not None:
                    yield closed(cur)
                cur = ShardTask(n, names.shard_name(output, n, total), [])
                n += 1
            if b > a:
                length = at[b] - at[a]
                cur.ranges.append((p.piece, at[a], length))
                cur.records += b - a
                cur.bytes += length
                if p.crc32c is not None:
                    cur.pieces[p.piece] = {
                        "crc32c": p.crc32c,
                        "bytes": p.bytes,
                        "records": p.records,
                    }
                if dali_index:
                    parts.append(sizes[a:b])
    if cur is not None:
        yield closed(cur)
    oversized.say()  # once the plan is whole: one line for every such record
