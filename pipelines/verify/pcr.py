"""A PCR dataset (manifest ``kind: pcr``) as ``tar2tf verify`` checks it: the record files
against the manifest's rows, the index against the manifest's sha256, and the files
against the index by ``transforms.pcr.verify``."""

from __future__ import annotations

import hashlib
from typing import Any, Dict

from pipelines.verify.hashing import HashingReader
from pipelines.verify.manifest import locate
from pipelines.verify.report import Problem, VerifyReport
from transforms.stores import StoreConfig, dirname, get_store


def check_file(row: Dict[str, Any], path: str, report: VerifyReport, config: StoreConfig) -> None:
    """Existence, size and digest of a file the manifest lists (PCR record files)."""
    store = get_store(path, config)
    if not store.exists(path):
        report.problems.append(Problem("file", "file is missing", path))
        return
    with store.open_read(path) as raw:
        f = HashingReader(raw, row)
        f.drain()
    report.shards_checked += 1
    report.bytes_checked += f.n
    if "bytes" in row and f.n != row["bytes"]:
        report.problems.append(Problem("size", f"{f.n} bytes, manifest says {row['bytes']}", path))
    differs = f.mismatch(row)
    if differs:
        report.problems.append(Problem(f.kind, differs, path))


def check_pcr(
    m: Dict[str, Any], manifest_path: str, recorded: str, report: VerifyReport, config: StoreConfig
) -> None:
    """``recorded``: where the manifest was written (files beside it are looked for beside
    ``manifest_path`` now, :func:`pipelines.verify.manifest.locate`)."""
    from transforms.pcr.verify import verify_pcr

    directory = dirname(manifest_path) or "."
    index = m.get("index") or {}
    if index.get("sha256"):
        index_path = locate(index.get("path", ""), manifest_path, recorded)
        store = get_store(index_path, config)
        if store.exists(index_path):
            data = store.read_bytes(index_path)
            if hashlib.sha256(data).hexdigest() != index["sha256"]:
                report.problems.append(
                    Problem(
                        "index",
                        "PCR index's sha256 differs from the manifest's "
                        f"({len(data)} bytes, manifest says "
                        f"{index.get('bytes')})",
                        index_path,
                    )
                )
    counts: Dict[str, int] = {}
    try:
        found = verify_pcr(directory, config=config, counts=counts)
    except Exception as e:
        report.problems.append(Problem("pcr", f"verify_pcr failed: {type(e).__name__}: {e}"))
        return
    report.records_checked += counts.get("images", 0)
    for p in found:
        report.problems.append(Problem("pcr", str(p)))
