"""The names of a job's counts: one list for the manifest's totals, the Beam counters and
the report's cross-check, so that a count added in one place is not missed in another.

Every count is conserved: records read = records written + rejected + filtered.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable

# summed from the units' summaries into the manifest's ``totals``, in this order
TOTALS = (
    "shards_read",
    "records_read",
    "records_written",
    "records_rejected",
    "records_filtered",
    "shards_rejected",
    "members_skipped",
    "members_duplicate",
)
# counted by the Beam graph's workers besides the totals (a rerun's reused units, bytes)
WORKER_ONLY = ("shards_resumed", "bytes_written", "member_bytes_read")
COUNTERS = TOTALS + WORKER_ONLY
# what the job report checks between the runner's counters and the manifest
COMPARED = TOTALS[:6] + ("bytes_written",) + TOTALS[6:]


def rejected(rejects: Iterable[Dict[str, Any]]) -> Dict[str, int]:
    """``records_rejected`` and ``shards_rejected`` of a unit's rejects (a reject with
    ``record: false`` stands for its whole input shard)."""
    out = {"records_rejected": 0, "shards_rejected": 0}
    for r in rejects:
        out["records_rejected" if r.get("record", True) else "shards_rejected"] += 1
    return out
