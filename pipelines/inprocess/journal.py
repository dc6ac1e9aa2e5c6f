"""The journal of a streamed job's finished final shards: where ``--resume`` continues.

A streamed job (``pipelines.inprocess.stream``) writes its final shards in input order.  Each
time one is durable under its final name, an entry ``journal-NNNNNN.json`` goes to the
job's work directory (one object per entry: object stores cannot append) holding

* ``row``: the shard's manifest row (path, records, bytes, crc32c);
* ``pieces``: the summaries (:class:`~pipelines.job.kinds.tfrecord.summary.PieceSummary`, in their
  sidecars' JSON form) of the input shards whose
  last record went into this shard, or that had none while it was open;
* ``next``: ``[piece, record]``, where the next shard starts: record ``record`` of input
  shard ``piece``.

A rerun with ``resume`` (:func:`load`) keeps the shards its entries list, once each is
found intact (size and crc32c), and converts only from ``next`` on.  The packing rule
(:class:`transforms.tfrecord.Packer`) depends only on the sizes since the last shard
boundary, so the continued stream cuts the same shards as an uninterrupted run: the
output is the same bytes (tested).  Pieces whose records all sit in journaled shards are
no longer needed, and the stream deletes them: a job's scratch space stays bounded by the
pieces in flight instead of growing to a second copy of the output.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Dict, List, Optional

from pipelines.job import names, workfiles
from pipelines.job.kinds.tfrecord.summary import PieceSummary
from transforms.stores import StoreConfig, get_store, join
from transforms.tfrecord import digests

log = logging.getLogger("tar2tf")
VERIFY_CHUNK = 4 << 20


def write(
    work: str,
    n: int,
    row: Dict[str, Any],
    pieces: List[PieceSummary],
    position: List[int],
    config: Optional[StoreConfig] = None,
) -> None:
    """The entry of final shard ``n``: its manifest ``row``, the ``pieces`` it ended and
    the ``position`` where the next shard starts (see the module docstring)."""
    entry = {"row": row, "pieces": [p.to_json() for p in pieces], "next": list(position)}
    get_store(work, config).write_bytes(
        workfiles.journal_entry(work, n), json.dumps(entry, sort_keys=True).encode()
    )


@dataclasses.dataclass
class ResumePoint:
    """What the journal of an interrupted run holds: its shards (manifest rows, in order),
    the pieces they contain, and where the next shard starts.  ``ResumePoint()``: nothing
    done yet (a job that starts from its first input shard)."""

    rows: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    pieces: List[PieceSummary] = dataclasses.field(default_factory=list)
    next_piece: int = 0
    skip: int = 0  # records of ``next_piece`` already in the journaled shards

    @property
    def shards(self) -> int:
        return len(self.rows)


def _intact(row: Dict[str, Any], config: Optional[StoreConfig]) -> bool:
    """Whether the shard has its row's size and CRC32C: the one the store keeps where it
    keeps one (GCS), else read back."""
    store = get_store(row["path"], config)
    try:
        size, kept = store.size_and_crc32c(row["path"])
        if size != row["bytes"]:
            return False
        if kept is not None:
            return kept == row["crc32c"]
        digest = digests.new("crc32c")
        with store.open_read(row["path"]) as f:
            for chunk in iter(lambda: f.read(VERIFY_CHUNK), b""):
                digest.update(chunk)
    except (FileNotFoundError, OSError):
        return False
    return digests.hexdigest(digest) == row["crc32c"]


def load(
    work: str, config: Optional[StoreConfig] = None, output: Optional[str] = None
) -> Optional[ResumePoint]:
    """The journal's consecutive entries from shard 1 whose shards are intact; None when
    there is none.  An entry that cannot be read, or whose shard is missing or damaged,
    ends the journal there: that shard and the ones after it are written again.  With the
    job's ``output`` template, entry ``n`` must name the ``n``-th shard that template makes
    (``output`` with ``{}`` -> ``n``): a journal edited to point elsewhere -- another
    file, outside the output -- is not trusted from that entry on."""
    store = get_store(work, config)
    rows: List[Dict[str, Any]] = []
    pieces: List[PieceSummary] = []
    nxt = None
    n = 1
    while True:
        url = workfiles.journal_entry(work, n)
        try:
            entry = json.loads(store.read_bytes(url))
            row, more, position = entry["row"], entry["pieces"], entry["next"]
            if not (
                isinstance(row.get("path"), str)
                and isinstance(row.get("bytes"), int)
                and isinstance(row.get("crc32c"), str)
                and isinstance(more, list)
                and len(position) == 2
            ):
                raise ValueError(url)
            int(position[0]), int(position[1])
            more = [PieceSummary.from_json(p) for p in more]
        except (FileNotFoundError, ValueError, KeyError, TypeError, AttributeError):
            break
        if output is not None and row["path"] != names.fill(output, n):
            log.warning(
                "resume: journal entry %d names %r, not this output's shard %r: ignored, "
                "that shard and the ones after it are written again",
                n,
                row["path"],
                names.fill(output, n),
            )
            break
        if not _intact(row, config):
            log.warning(
                "resume: final shard %s does not match the journal: it is written again",
                row["path"],
            )
            break
        rows.append(row)
        pieces.extend(more)
        nxt = position
        n += 1
    if not rows:
        return None
    return ResumePoint(rows, pieces, int(nxt[0]), int(nxt[1]))


def clear(work: str, config: Optional[StoreConfig] = None) -> None:
    """Remove the entries an earlier run left (a job that starts over)."""
    store = get_store(work, config)
    try:
        urls = list(store.list(join(work, "journal-")))
    except FileNotFoundError:
        return
    for url in urls:
        store.delete(url)
