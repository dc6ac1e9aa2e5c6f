"""Replacing an earlier output (``--overwrite``, ``--resume``) so that, at any moment, a
manifest on disk describes exactly the files on disk, or there is no manifest.

The protocol, in order:

1. :func:`begin`, before the job writes its first final file: the names the earlier
   manifest gives as its outputs are saved in a *ledger* beside it
   (``<output>.replacing.json``, written atomically), then the manifest is deleted (for a
   PCR dataset, its index as well).  From here on the directory holds no manifest: a
   reader (``tar2tf verify``, ``Dataset``) finds no dataset instead of one that mixes old
   and new shards.  A ledger left by an interrupted replacement is merged, never lost, and
   so are the final shards journaled by interrupted runs of the same output.
2. The job writes its final files (each atomically, under a temporary name first).
3. :func:`remove_stale`, when all are written: files of the earlier outputs that the new
   output does not reuse are deleted -- only names the ledger holds, and never an input.
   A file that only matches the output's naming pattern is left in place, with a warning.
4. The new manifest is written (an atomic rename): the commit point.  :func:`end` then
   deletes the ledger.

A kill at any point leaves either the earlier manifest with all its files (before 1), or
no manifest (between 1 and 4), or the new manifest with exactly its files (after 4); a
rerun with ``--overwrite`` (or ``--resume`` of the same job) finishes the replacement.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set

from pipelines.job import job_file, names, overlap
from transforms.redact import redact
from transforms.stores import Store, StoreConfig, basename, dirname, get_store, join

log = logging.getLogger("tar2tf")
LEDGER_SUFFIX = ".replacing.json"


def ledger_of(manifest_url: str) -> str:
    """``out/t.record.manifest.json`` -> ``out/t.record.replacing.json``."""
    stem = (
        manifest_url[: -len(".manifest.json")]
        if manifest_url.endswith(".manifest.json")
        else manifest_url
    )
    return stem + LEDGER_SUFFIX


def _read_json(store: Store, url: str) -> Optional[Any]:
    try:
        return json.loads(store.read_bytes(url))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # there, but unreadable: it names nothing, and is replaced all the same


def previous_outputs(manifest_url: str, config: Optional[StoreConfig] = None) -> Set[str]:
    """The names the ledger holds (empty when there is none)."""
    store = get_store(manifest_url, config)
    found = _read_json(store, ledger_of(manifest_url))
    return set(found.get("outputs", [])) if isinstance(found, dict) else set()


def _beside(manifest_url: str, manifest: Dict[str, Any], path: str) -> str:
    """Where a file the earlier manifest names is now, as ``tar2tf verify`` locates it
    (``pipelines.verify.manifest.locate``): one written beside that manifest is beside it
    now -- the output may have been spelt another way (a relative path, another working
    directory), or copied or moved since -- anything else at its recorded path."""
    recorded = manifest.get("output")
    if not isinstance(recorded, str):
        return path
    if manifest.get("kind") == "pcr":
        recorded_manifest = names.companion(recorded + "/PCR", ".manifest.json")
    else:
        recorded_manifest = names.companion(recorded, ".manifest.json")
    if dirname(path) == dirname(recorded_manifest):
        return join(dirname(manifest_url), basename(path))
    return path


def _journaled(work: str, output: str, config: Optional[StoreConfig]) -> Set[str]:
    """Final shards that interrupted runs of this output journaled in their work
    directories (siblings of ``work``): they were written under the output's names but no
    manifest names them yet."""
    store = get_store(work, config)
    root = work.rstrip("/").rpartition("/")[0]
    out: Set[str] = set()
    try:
        urls = sorted(store.list(root + "/"))
    except (FileNotFoundError, OSError):
        return out
    mine: Dict[str, bool] = {}
    for url in urls:
        d, _, name = url.rpartition("/")
        if not name.startswith("journal-"):
            continue
        if d not in mine:
            rec = _read_json(store, join(d, job_file.JOB_FILE))
            mine[d] = isinstance(rec, dict) and rec.get("output") == redact(output)
        if mine[d]:
            entry = _read_json(store, url)
            row = entry.get("row") if isinstance(entry, dict) else None
            if isinstance(row, dict) and isinstance(row.get("path"), str):
                out.add(row["path"])
    return out


def begin(
    manifest_url: str,
    config: Optional[StoreConfig] = None,
    *,
    also_delete: Sequence[str] = (),
    output: Optional[str] = None,
    work: Optional[str] = None,
) -> None:
    """Step 1 of the protocol (module docstring): the earlier manifest's outputs into the
    ledger, then the manifest (and ``also_delete``: a PCR index) deleted.  ``output`` +
    ``work``: a TFRecord job, whose interrupted runs' journals are read as well."""
    store = get_store(manifest_url, config)
    ledger = ledger_of(manifest_url)
    outputs = previous_outputs(manifest_url, config)
    manifest = _read_json(store, manifest_url)
    if manifest is not None:
        shards = manifest.get("shards") if isinstance(manifest, dict) else None
        for s in shards if isinstance(shards, list) else []:
            if isinstance(s, dict) and isinstance(s.get("path"), str):
                outputs.add(_beside(manifest_url, manifest, s["path"]))
    if output is not None and work is not None:
        outputs |= _journaled(work, output, config)
    if manifest is None and not outputs:
        return
    if outputs != previous_outputs(manifest_url, config):
        store.write_bytes(ledger, json.dumps({"outputs": sorted(outputs)}, indent=1).encode())
    if manifest is not None:
        store.delete(manifest_url)
    for url in also_delete:
        if store.exists(url):
            store.delete(url)


def remove_stale(
    existing: Iterable[str],
    keep: Set[str],
    manifest_url: str,
    inputs: Sequence[str],
    config: Optional[StoreConfig] = None,
    extra: Callable[[str], List[str]] = lambda url: [],
) -> List[str]:
    """Step 3: delete the ``existing`` files under the output's names that the new output
    does not ``keep`` and the ledger holds (with ``extra(url)``: a shard's DALI index);
    returns what was deleted.  Never an input, whatever the ledger says."""
    store = get_store(manifest_url, config)
    previous = previous_outputs(manifest_url, config)
    stale = [u for u in existing if u not in keep]
    guarded = set(overlap.inputs_named(inputs, stale))
    deleted, unknown = [], []
    for url in stale:
        if url in previous and url not in guarded:
            for u in [url] + extra(url):
                store.delete(u)
            deleted.append(url)
        else:
            unknown.append(url)
    if unknown:
        log.warning(
            "%d file(s) under the output's names are not outputs of an earlier run that a "
            "manifest names: left in place (e.g. %s)",
            len(unknown),
            unknown[0],
        )
    return deleted


def end(manifest_url: str, config: Optional[StoreConfig] = None) -> None:
    """Step 4, after the new manifest is written: the ledger is no longer needed."""
    store = get_store(manifest_url, config)
    ledger = ledger_of(manifest_url)
    if store.exists(ledger):
        store.delete(ledger)
