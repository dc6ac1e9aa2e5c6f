"""A job's manifest: its counts, reasons and rejects, and how it is written.

The manifest is the commit point of a job (``pipelines.job.lifecycle``): written last,
after the rejects file, it describes exactly the outputs on disk.  Its totals come from
the units' summaries (counts, never one entry per record) and the final shards' rows.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from pipelines.job.counts import TOTALS, rejected
from pipelines.job.kinds.tfrecord.summary import PieceSummary
from pipelines.job.names import companion
from transforms.record_types import Reject
from transforms.stores import StoreConfig, get_store
from transforms.tar.sources import is_missing

Summary = Union[PieceSummary, Dict[str, Any]]  # a TFRecord piece's, or a PCR unit's dict


def _fields(info: Summary) -> Dict[str, Any]:
    """A summary's fields by name: a TFRecord piece's in its sidecar's JSON form, a PCR
    unit's dict as it is."""
    return info.to_json() if isinstance(info, PieceSummary) else info


def reject_counts(info: Summary) -> List[Tuple[str, str, int]]:
    """``(stage, kind, count)`` of a piece's rejects: its summary's ``reject_counts`` (a
    TFRecord piece, a PCR unit's summary), or counted from its ``rejects`` (a PCR unit's
    info)."""
    info = _fields(info)
    if "reject_counts" in info:
        return [tuple(x) for x in info["reject_counts"]]
    by: Dict[Tuple[str, str], int] = {}
    for r in info["rejects"]:
        k = (r["stage"], Reject.from_dict(r).kind)
        by[k] = by.get(k, 0) + 1
    return [(st, kind, n) for (st, kind), n in sorted(by.items())]


def piece_counts(info: Summary) -> Dict[str, int]:
    """What one converted input shard (its piece summary) adds to the job's counts:
    the Beam counters of the ``tar2tf`` namespace, ``reject:<stage>:<kind>`` included."""
    info = _fields(info)
    c = {
        "shards_read": 1,
        "records_read": info["records_read"],
        "records_written": info["records"] if "records" in info else len(info["sizes"]),
        "records_filtered": info["filtered"],
        "bytes_written": info.get("bytes", 0),
        "member_bytes_read": info.get("member_bytes", 0),
        "members_skipped": info.get("skipped_members", 0),
        "members_duplicate": info.get("duplicate_members", 0),
        "records_rejected": 0,
        "shards_rejected": 0,
    }
    if "reject_counts" in info:
        c["records_rejected"] = info["records_rejected"]
        c["shards_rejected"] = info["shards_rejected"]
    else:
        c.update(rejected(info["rejects"]))
    for stage, kind, n in reject_counts(info):
        name = "reject:" + stage + ":" + kind
        # a counter name is UTF-8 text: a member name's undecodable bytes stay escaped
        name = name.encode("utf-8", "backslashreplace").decode("utf-8")
        c[name] = c.get(name, 0) + n
    return c


def totals_of(
    pieces: Sequence[Summary],
    list_rejects: Sequence[Reject],
    shards: Sequence[Dict[str, Any]],
) -> Dict[str, int]:
    """The manifest totals: the pieces' counts (:func:`piece_counts`), the listing's
    rejected shards, and the bytes and number of the final shards."""
    t = dict.fromkeys(TOTALS, 0)
    t.update(
        shards_rejected=len(list_rejects),
        bytes_written=sum(s["bytes"] for s in shards),
        shards=len(shards),
    )
    for p in pieces:
        c = piece_counts(p)
        for k in TOTALS:
            t[k] += c[k]
    return t


def reasons_of(
    pieces: Sequence[Summary], list_rejects: Sequence[Reject]
) -> Tuple[int, Dict[str, int]]:
    """The number of rejects and ``"<stage>: <kind>" -> count`` (sorted by reason: the
    manifest's), from the pieces' summaries and the listing's rejects."""
    out: Dict[str, int] = {}
    count = 0
    for r in list_rejects:
        k = f"{r.stage}: {r.kind}"
        out[k] = out.get(k, 0) + 1
        count += 1
    for p in pieces:
        for stage, kind, n in reject_counts(p):
            k = f"{stage}: {kind}"
            out[k] = out.get(k, 0) + n
            count += n
    return count, dict(sorted(out.items()))


def first_missing(list_rejects: Sequence[Reject]) -> Dict[str, str]:
    """``{"first_missing": source}``, the first input the listing did not find, for the
    manifest's ``rejects`` (the summary names it); ``{}`` when none is missing."""
    found = next((r.shard for r in list_rejects if is_missing(r)), None)
    return {} if found is None else {"first_missing": found}


def write_manifest(
    output: str,
    manifest: Dict[str, Any],
    rejects: Iterable[Dict[str, Any]],
    config: Optional[StoreConfig] = None,
) -> Tuple[str, str]:
    """The rejects file (``rejects`` streamed into it, one at a time), then the manifest."""
    mpath, rpath = companion(output, ".manifest.json"), companion(output, ".rejects.jsonl")
    store = get_store(mpath, config)
    from transforms.redact import redact_obj  # no credential in a file tar2tf writes

    manifest = redact_obj(manifest)
    with store.open_write(rpath) as f:
        for r in rejects:
            f.write((json.dumps(redact_obj(r), sort_keys=True) + "\n").encode())
    store.write_bytes(mpath, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    return mpath, rpath
