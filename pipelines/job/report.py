"""The end-of-job report (text + JSON), built from the runner's Beam counters and checked
against the manifest totals.

Every runner (local, Flink, Dataflow) reports the ``tar2tf`` counters the ConvertShard
step increments; the manifest totals are computed independently from the piece sidecars
at finalization.  The report carries both and lists any disagreement -- on a healthy run
there is none (tested), so a mismatch points at a runner that lost or double-counted work.
A runner that reports no metrics at all gives ``counters_reported: false``, not a mismatch.
"""

from __future__ import annotations

from typing import Any, Dict, List

from pipelines.job.counts import COMPARED
from transforms.tar.sources import MISSING


def mismatches(
    counters: Dict[str, int], totals: Dict[str, int], fmt: str = "tfrecord"
) -> List[str]:
    if not counters:
        return []
    return [
        f"{k}: counters say {counters.get(k, 0)}, manifest says {totals[k]}"
        for k in COMPARED
        # the counters count the pieces' TFRecord bytes; ArrayRecord files hold other bytes
        if k in totals
        and counters.get(k, 0) != totals[k]
        and not (k == "bytes_written" and fmt != "tfrecord")
    ]


def build(res) -> Dict[str, Any]:
    """JSON-able report of a :class:`pipelines.job.lifecycle.ConvertResult`."""
    t, c = res.totals, dict(res.counters)
    secs = max(res.seconds, 1e-9)
    return {
        "exit_code": res.exit_code,
        "seconds": round(res.seconds, 3),
        "paths": res.paths,
        "manifest": res.manifest_path,
        "rejects_path": res.rejects_path,
        "totals": t,
        "counters": c,
        "counters_reported": bool(c),
        "counter_mismatches": mismatches(
            c, t, (res.manifest.get("options") or {}).get("format", "tfrecord")
        ),
        "shards_resumed": c.get("shards_resumed", 0),
        "rejects": {
            k: res.manifest["rejects"][k]
            for k in ("count", "by_reason", "first_missing")
            if k in res.manifest["rejects"]
        },
        "duplicate_keys": res.manifest.get("duplicate_keys", {"count": 0, "examples": []}),
        "rates": {
            "records_per_s": round(t["records_written"] / secs, 2),
            "mb_written_per_s": round(t["bytes_written"] / 1e6 / secs, 3),
            "mb_read_per_s": round(c.get("member_bytes_read", 0) / 1e6 / secs, 3),
        },
    }


def reason_lines(rejects: Dict[str, Any]) -> List[str]:
    """A line per reject reason with its count; the missing sources' line names the first
    of them (a manifest's ``rejects.first_missing``), so that a typo in a template shows on
    the screen, not only in the rejects file."""
    first = rejects.get("first_missing")
    return [
        f"  {n:6d}  {reason}"
        + (f" (first: {first})" if first is not None and reason == f"list: {MISSING}" else "")
        for reason, n in rejects["by_reason"].items()
    ]


def text(report: Dict[str, Any]) -> str:
    t, r = report["totals"], report["rates"]
    lines = [
        f"records: {t['records_read']} read, {t['records_written']} written, "
        f"{t['records_rejected']} rejected, {t['records_filtered']} filtered"
        f" ({t.get('members_skipped', 0)} non-file/extensionless members skipped"
        + (f", {t['members_duplicate']} duplicate members" if t.get("members_duplicate") else "")
        + ")",
        f"shards:  {t['shards_read']} input ({t['shards_rejected']} rejected"
        + (f", {report['shards_resumed']} resumed" if report["shards_resumed"] else "")
        + f") -> {t['shards']} output, {t['bytes_written']} bytes ({r['mb_written_per_s']:.1f} MB/s)",
        f"time:    {report['seconds']:.1f} s ({r['records_per_s']:.1f} records/s, {r['mb_read_per_s']:.1f} MB/s read)",
        f"rejects: {report['rejects']['count']} -> {report['rejects_path']}",
    ]
    lines += reason_lines(report["rejects"])
    if not report["counters_reported"]:
        lines.append("counters: the runner reported no metrics (totals are from the manifest)")
    dups = report.get("duplicate_keys") or {}
    if dups.get("count"):
        e = dups["examples"][0]
        lines.append(
            f"WARNING {dups['count']} records have a key an earlier input shard had "
            f"(e.g. {e['key']!r} in {e['again']}, first in {e['first']}); both are written"
        )
    for m in report["counter_mismatches"]:
        lines.append(f"WARNING counters disagree with the manifest: {m}")
    lines.append(f"manifest: {report['manifest']}")
    return "\n".join(lines)
