"""What the job's global steps learn of a converted input shard: its :class:`PieceSummary`.

A TFRecord piece's summary crosses the job -- Beam's GatherPieces, the plan, the duplicate
check, the manifest, the shard stream's journal -- and is the piece's JSON sidecar, which
``--resume`` reads back.  It holds counts, never one entry per record: the records' sizes,
keys and rejects stay in the piece's record file (``pipelines.job.kinds.tfrecord.piecefiles``).  Its JSON
form (:meth:`PieceSummary.to_json`) is the sidecar's and the journal's, key for key.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, List, Mapping, Optional

# One object for each distinct schema, first types and reject counts: a job's pieces
# mostly share them, and at a million pieces the global steps (Beam's GatherPieces side
# input, the plan, the manifest) would otherwise hold a million copies of the same
# nested dicts -- 2.3 KB a summary, 0.5 KB with them shared.  Shared, they are never
# changed in place (the manifest's schema is a copy).  Bounded: a job whose pieces all
# differ empties it now and then, and only loses the sharing.
_SHARED: Dict[str, Any] = {}
_SHARED_MAX = 4096


def _shared(value: Any) -> Any:
    key = json.dumps(value, sort_keys=True)
    got = _SHARED.get(key)
    if got is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        got = _SHARED[key] = value
    return got


@dataclasses.dataclass(slots=True)
class PieceSummary:
    index: int  # the input shard's position in the job's inputs
    shard: str  # the input shard's URL
    piece: str  # the piece file's URL (a piece held in memory has none at that URL)
    records: int  # written
    bytes: int  # of the written records, framed
    records_read: int
    filtered: int
    records_rejected: int
    shards_rejected: int  # 1 when the whole input shard was rejected
    reject_counts: List[List[Any]]  # [stage, kind, count], sorted by (stage, kind)
    members: int
    skipped_members: int
    duplicate_members: int
    member_bytes: int
    schema: Dict[str, Any]  # the merged schema of its written records
    first_types: Dict[str, str]  # feature -> dtype of the first record that has it
    recs_crc32c: str  # its record file's CRC-32C
    crc32c: Optional[str] = None  # its piece file's; None: held in memory, no piece file

    def __post_init__(self) -> None:
        self.schema = _shared(self.schema)
        self.first_types = _shared(self.first_types)
        self.reject_counts = _shared(self.reject_counts)

    def __reduce__(self):
        # through the constructor, so that an unpickled summary (a Beam element or side
        # input) shares its schema like any other
        return (PieceSummary, tuple(getattr(self, f.name) for f in dataclasses.fields(self)))

    def to_json(self) -> Dict[str, Any]:
        """The sidecar's dict (a piece without a piece file has no ``crc32c`` key)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if self.crc32c is None:
            del out["crc32c"]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "PieceSummary":
        """A summary from its JSON form; ``ValueError`` when ``data`` is not one (a sidecar
        or journal entry of another kind or shape, which resume then does not trust)."""
        if not isinstance(data, Mapping):
            raise ValueError("a piece summary is a JSON object")
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [n for n in names[:-1] if n not in data]
        if missing:
            raise ValueError(f"a piece summary without {', '.join(missing)}")
        return cls(**{n: data[n] for n in names if n in data})
