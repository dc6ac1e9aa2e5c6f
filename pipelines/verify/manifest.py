"""The manifest side of ``tar2tf verify``: where a dataset's manifest is, which of its rows
can be checked, where the files it names are now, and its totals against the shards.

A damaged manifest is a problem too (a JSON list, a row whose ``bytes`` is not a number):
the rows that can be checked still are.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from pipelines.job import names
from pipelines.verify.report import Problem, VerifyReport
from transforms.stores import StoreConfig, basename, dirname, get_store, join

KINDS = ("tfrecord", "pcr")


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _row_problem(row: Any) -> Optional[str]:
    """Why a manifest row cannot be checked, or None."""
    if not isinstance(row, dict):
        return f"is a JSON {json_type(row)}, not an object"
    if not isinstance(row.get("path"), str) or not row["path"]:
        return "has no path"
    for name in ("bytes", "records"):
        if not is_int(row.get(name)) or row[name] < 0:
            return f"{name} is {row.get(name)!r}, not a count"
    return None


def json_type(v: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean"}.get(
        type(v), "number" if isinstance(v, (int, float)) else "null"
    )


def check_rows(m: Dict[str, Any], report: VerifyReport) -> List[Dict[str, Any]]:
    """The manifest's shard rows that can be checked; a problem listed for each other."""
    shards = m.get("shards", [])
    if not isinstance(shards, list):
        report.problems.append(
            Problem("manifest", f"shards is a JSON {json_type(shards)}, not a list")
        )
        return []
    good = []
    for i, row in enumerate(shards):
        why = _row_problem(row)
        if why is None:
            good.append(row)
        else:
            report.problems.append(Problem("manifest", f"shard row {i} {why}"))
    return good


def manifest_path_for(target: str) -> str:
    """The manifest for ``target``: a ``*.manifest.json`` as given; a directory holding
    ``PCR.manifest.json`` (a PCR dataset) or exactly one manifest; else the manifest of an
    output template (``out/train-{}.record`` -> ``out/train.record.manifest.json``)."""
    if target.endswith(".manifest.json"):
        return target
    if os.path.isdir(target):
        if os.path.exists(os.path.join(target, "PCR.manifest.json")):
            return os.path.join(target, "PCR.manifest.json")
        found = sorted(n for n in os.listdir(target) if n.endswith(".manifest.json"))
        if len(found) == 1:
            return os.path.join(target, found[0])
    return names.companion(target, ".manifest.json")


def locate(path: str, manifest_path: str, recorded_manifest: str) -> str:
    """Where to read a file the manifest names: a file written beside the manifest is
    looked for beside it now (so a copied or moved dataset is checked where it is),
    anything else at its recorded path."""
    if dirname(path) == dirname(recorded_manifest):
        return join(dirname(manifest_path), basename(path))
    return path


def check_totals(
    m: Dict[str, Any],
    report: VerifyReport,
    config: StoreConfig,
    manifest_path: str,
    shards: List[Dict[str, Any]],
) -> None:
    t = m.get("totals", {})
    if not isinstance(t, dict):
        report.problems.append(Problem("totals", f"totals is a JSON {json_type(t)}"))
        t = {}

    def want(name, actual):
        if name in t and t[name] != actual:
            report.problems.append(
                Problem("totals", f"{name} is {t[name]} but the shards give {actual}")
            )

    listed = m.get("shards")
    if isinstance(listed, list) and len(listed) == len(shards):
        # (with unreadable rows, their problems are listed already: no sums to compare)
        want("shards", len(shards))
        want("records_written", sum(s["records"] for s in shards))
        want("bytes_written", sum(s["bytes"] for s in shards))
    if all(
        is_int(t.get(k))
        for k in ("records_read", "records_written", "records_rejected", "records_filtered")
    ):
        if (
            t["records_read"]
            != t["records_written"] + t["records_rejected"] + t["records_filtered"]
        ):
            report.problems.append(
                Problem("totals", "records read != written + rejected + filtered")
            )
    rej = m.get("rejects", {})
    rpath = rej.get("path") if isinstance(rej, dict) else None
    if isinstance(rpath, str) and rpath:
        rpath = locate(rpath, manifest_path, names.companion(m.get("output", ""), ".manifest.json"))
        store = get_store(rpath, config)
        if not store.exists(rpath):
            report.problems.append(Problem("rejects", f"rejects file {rpath} is missing"))
            return
        count = rej.get("count")
        stop = count + 1 if is_int(count) and count >= 0 else None
        try:
            with store.open_read(rpath) as f:
                n = count_lines(f, stop)
        except (Exception, MemoryError) as e:  # a device, a FIFO, gone, unreadable
            what = str(e) if isinstance(e, OSError) and str(e) else f"{type(e).__name__}: {e}"
            report.problems.append(
                Problem("rejects", f"rejects file {rpath} cannot be read: {what[:300]}")
            )
            return
        if "count" in rej and not (is_int(count) and count >= 0):
            report.problems.append(Problem("rejects", f"rejects count is {count!r}, not a count"))
        elif is_int(count) and n != count:
            said = f"more than {count}" if n == stop else str(n)
            report.problems.append(
                Problem("rejects", f"rejects file has {said} lines, manifest says {count}")
            )


#: bytes of the rejects file read at a time: its lines are counted, never held together
_CHUNK = 1 << 20


def count_lines(f, stop: Optional[int] = None) -> int:
    """The lines of ``f`` that hold more than whitespace, read a chunk at a time (a rejects
    file of millions of lines is counted in constant memory); ``stop``: return as soon as
    that many are counted, so no more is read than the manifest's count says is there."""
    n, blank = 0, True  # blank: the line being read holds only whitespace so far
    while stop is None or n < stop:
        chunk = f.read(_CHUNK)
        if not chunk:
            break
        lines = chunk.split(b"\n")
        for i, part in enumerate(lines):
            blank = blank and not part.strip()
            if i < len(lines) - 1:  # a newline ends this line
                n += not blank
                blank = True
    n += not blank  # a last line without a newline
    return n if stop is None else min(n, stop)
