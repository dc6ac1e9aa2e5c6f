"""Finalization: write final shards from pieces, atomically, and the manifest.

Why this shape: every input shard is converted into one *piece* (a TFRecord file), its
record file (``pipelines.job.piecefiles``: framed record sizes, keys, rejects) and a JSON
*sidecar* holding its summary.  Pieces are named by input shard index, so what a worker
wrote never depends on bundling or worker count.  The plan (``pipelines.job.plan``) packs
the records of all pieces, in input order, into final shards with the greedy rule of
:func:`transforms.tfrecord.pack`; since TFRecord files concatenate byte-wise, writing a
final shard is a copy of byte ranges -- no record is parsed or re-framed.  Each final
shard is written under a temporary name and renamed when complete (:class:`ShardFile`).
``pipelines.local.stream`` applies the same rule while the pieces arrive.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

# the names this module once defined, for its importers
from pipelines.job.names import (  # noqa: F401
    companion,
    existing_outputs,
    output_pattern,
    shard_names,
    stale_temporaries,
)
from transforms.record_types import Reject
from transforms.stores import (
    Store,
    StoreConfig,
    get_store,
    split_url,
)

log = logging.getLogger("tar2tf")


def has_files(store: Store, prefix: str) -> bool:
    """Whether anything is stored under the directory ``prefix`` (a job's work directory)."""
    return next(iter(store.list(prefix.rstrip("/") + "/")), None) is not None


def delete_tree(store: Store, prefix: str) -> None:
    """Remove a work directory (and its parent, when that is left empty)."""
    if split_url(prefix)[0] == "":
        store.delete(prefix)
        parent = os.path.dirname(prefix.rstrip(os.sep))
        if os.path.isdir(parent) and not os.listdir(parent):
            os.rmdir(parent)
        return
    for url in list(store.list(prefix.rstrip("/") + "/")):
        store.delete(url)


# -- manifest ---------------------------------------------------------------------------


def reject_counts(info: Dict[str, Any]) -> List[Tuple[str, str, int]]:
    """``(stage, kind, count)`` of a piece's rejects: its summary's ``reject_counts`` (a
    TFRecord piece), or counted from its ``rejects`` (a PCR unit's info)."""
    if "reject_counts" in info:
        return [tuple(x) for x in info["reject_counts"]]
    by: Dict[Tuple[str, str], int] = {}
    for r in info["rejects"]:
        k = (r["stage"], Reject.from_dict(r).kind)
        by[k] = by.get(k, 0) + 1
    return [(st, kind, n) for (st, kind), n in sorted(by.items())]


def piece_counts(info: Dict[str, Any]) -> Dict[str, int]:
    """What one converted input shard (its piece summary) adds to the job's counts:
    the Beam counters of the ``tar2tf`` namespace, ``reject:<stage>:<kind>`` included."""
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
        for r in info["rejects"]:
            c["records_rejected" if r.get("record", True) else "shards_rejected"] += 1
    for stage, kind, n in reject_counts(info):
        name = "reject:" + stage + ":" + kind
        # a counter name is UTF-8 text: a member name's undecodable bytes stay escaped
        name = name.encode("utf-8", "backslashreplace").decode("utf-8")
        c[name] = c.get(name, 0) + n
    return c


_PIECE_TOTALS = (
    "shards_read",
    "records_read",
    "records_written",
    "records_rejected",
    "records_filtered",
    "shards_rejected",
    "members_skipped",
    "members_duplicate",
)


def totals_of(
    pieces: Sequence[Dict[str, Any]],
    list_rejects: Sequence[Reject],
    shards: Sequence[Dict[str, Any]],
) -> Dict[str, int]:
    """The manifest totals: the pieces' counts (:func:`piece_counts`), the listing's
    rejected shards, and the bytes and number of the final shards."""
    t = dict.fromkeys(_PIECE_TOTALS, 0)
    t.update(
        shards_rejected=len(list_rejects),
        bytes_written=sum(s["bytes"] for s in shards),
        shards=len(shards),
    )
    for p in pieces:
        c = piece_counts(p)
        for k in _PIECE_TOTALS:
            t[k] += c[k]
    return t


def all_rejects(
    pieces: Sequence[Dict[str, Any]], list_rejects: Sequence[Reject]
) -> List[Dict[str, Any]]:
    out = [r.to_dict() for r in list_rejects]
    for p in sorted(pieces, key=lambda p: p["index"]):
        out.extend(p["rejects"])
    return out


def exit_code(totals: Dict[str, int], rejected: int, max_rejects: int) -> int:
    """3 when rejects exceed ``max_rejects``, or when the job wrote nothing because
    everything it read was rejected (within ``max_rejects`` or not): an empty output is no
    success.  Else 0."""
    if rejected > max_rejects:
        return 3
    return 3 if rejected and not totals.get("records_written", 0) else 0


def reasons_of(
    pieces: Sequence[Dict[str, Any]], list_rejects: Sequence[Reject]
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


def rejects_by_reason(rejects: Sequence[Dict[str, Any]]) -> Dict[str, int]:
    """``"<stage>: <kind>" -> count`` over reject dicts, sorted by reason (the manifest's)."""
    out: Dict[str, int] = {}
    for r in rejects:
        k = f"{r['stage']}: {Reject.from_dict(r).kind}"
        out[k] = out.get(k, 0) + 1
    return dict(sorted(out.items()))


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
