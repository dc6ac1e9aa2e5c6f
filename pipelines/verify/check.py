"""``verify(target)``: the whole of ``tar2tf verify`` on one dataset.  It reads the
manifest, refuses JSON no tar2tf job wrote (:class:`NotAManifest`), and checks each row's
file by its format, then the files the output template makes that the manifest does not
list, then the manifest's totals."""

from __future__ import annotations

import json
from typing import Optional

from pipelines.job import names
from pipelines.verify.arrayrecord import verify_array_record_shard
from pipelines.verify.manifest import (
    KINDS,
    check_rows,
    check_totals,
    json_type,
    locate,
    manifest_path_for,
)
from pipelines.verify.pcr import check_file, check_pcr
from pipelines.verify.report import NotAManifest, Problem, VerifyReport, guarded
from pipelines.verify.tfrecord import verify_shard
from transforms.stores import StoreConfig, get_store


def verify(
    target: str, decode_images: bool = False, config: Optional[StoreConfig] = None
) -> VerifyReport:
    """Verify the dataset whose manifest is ``target`` (or belongs to output template ``target``)."""
    config = config or StoreConfig()
    mpath = manifest_path_for(target)
    m = json.loads(get_store(mpath, config).read_bytes(mpath))
    if not isinstance(m, dict):
        report = VerifyReport(manifest=mpath, kind="?")
        report.problems.append(
            Problem("manifest", f"the manifest is a JSON {json_type(m)}, not an object")
        )
        return report
    if m.get("tool") != "tar2tf" or m.get("kind") not in KINDS:
        said = ", ".join(f"{k} {m.get(k)!r}" for k in ("tool", "kind") if k in m)
        raise NotAManifest(f"not a tar2tf manifest ({said or 'no tool, no kind'})")
    report = VerifyReport(manifest=mpath, kind=m["kind"])
    rows = check_rows(m, report)
    if not isinstance(m.get("output", ""), str):
        report.problems.append(Problem("manifest", "output is not a string"))
        m = dict(m, output="")
    if report.kind == "pcr":
        recorded = names.companion(m.get("output", "") + "/PCR", ".manifest.json")
        for row in rows:
            path = locate(row["path"], mpath, recorded)
            guarded(report, path, check_file, row, path, report, config)
        check_pcr(m, mpath, recorded, report, config)
        return report
    schema = m.get("schema", {})
    if not isinstance(schema, dict) or not all(isinstance(v, dict) for v in schema.values()):
        report.problems.append(Problem("schema", "the manifest's schema is not an object"))
        schema = {}
    for name, spec in sorted(schema.items()):
        if spec.get("dtype") == "mixed":  # a reader's one parser cannot take every record
            report.problems.append(
                Problem(
                    "schema",
                    f"feature {name!r} has mixed types across records "
                    "(schema dtype 'mixed'): no parser reads them all",
                )
            )
    options = m.get("options", {})
    dali = isinstance(options, dict) and bool(options.get("dali_index"))
    array_record = isinstance(options, dict) and options.get("format") == "array_record"
    if array_record:
        report.kind = "array_record"
    recorded = names.companion(m.get("output", ""), ".manifest.json")
    listed = {  # unreadable rows too: their files are not strays
        locate(r["path"], mpath, recorded)
        for r in (m["shards"] if isinstance(m.get("shards"), list) else [])
        if isinstance(r, dict) and isinstance(r.get("path"), str)
    }
    for row in rows:
        path = locate(row["path"], mpath, recorded)
        listed.add(path)
        # an ArrayRecord shard has no DALI index
        check, extra = (verify_array_record_shard, ()) if array_record else (verify_shard, (dali,))
        guarded(report, path, check, row, path, schema, report, config, decode_images, *extra)
    output = m.get("output", "")
    if output and output != "<generator>":
        # a shard name the output template makes that the manifest does not list: a stale
        # file of another run, or a shard copied in; a reader globbing the names would take it
        for extra in names.existing_outputs(locate(output, mpath, recorded), config):
            if extra not in listed:
                report.problems.append(
                    Problem("file", "matches the output template but is not in the manifest", extra)
                )
    check_totals(m, report, config, mpath, rows)
    return report
