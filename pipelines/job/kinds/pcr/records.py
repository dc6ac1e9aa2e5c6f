"""The PCR job's record files (``pipelines.job.kinds.pcr.kind``): what its global steps see of
a unit, the plan of records, their writer, and the index and manifest.

What crosses the job's global steps is a unit's summary (:func:`summary_of`): counts and
its scan maps, never one entry per image.  The plan streams the units' images from their
sidecars, in input order or sorted by ``sha256(seed, unit index, key)`` (the TFRecord
shuffle's key) in buckets of bounded size, into record tasks of ``images_per_record``
images (the last one partial); the writer gathers a record's scans from the blobs into
``PCR_<i>.db``; the finish writes ``PCR_index.pb`` (each record once), the rejects
(streamed from the sidecars) and the manifest.  Output depends only on the inputs, the
options and the seed, never on bundling or worker count.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import pickle
import tempfile
from operator import itemgetter
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np

import transforms
from pipelines.job import counts, external, names, replace
from pipelines.job import manifest as job_manifest
from pipelines.job.element_coding import Pickled
from pipelines.job.kinds.pcr.config import PcrConfig
from pipelines.job.kinds.tfrecord.piecefiles import sort_key
from transforms.pcr import format as fmt
from transforms.pcr.jpeg_scans import SCAN_GROUPS, ScanGroupMap
from transforms.record_types import Reject
from transforms.stores import StoreConfig, get_store, join

MANIFEST_STEM = "PCR"  # -> PCR.manifest.json, PCR.rejects.jsonl inside the output directory


def manifest_path(output: str) -> str:
    return names.companion(join(output, MANIFEST_STEM), ".manifest.json")


def existing_records(cfg: PcrConfig) -> List[str]:
    store = get_store(cfg.output, cfg.store)
    prefix = join(cfg.output, "PCR_")
    return [
        u
        for u in store.list(prefix)
        if fmt.RECORD_RE.match(u.rpartition("/")[2])
        and u.rpartition("/")[0].rstrip("/") == cfg.output.rstrip("/")
    ]


def summary_of(info: Dict[str, Any]) -> Dict[str, Any]:
    """What the job's global steps learn of a converted unit (its sidecar's ``info``):
    counts and scan maps; its images and rejects stay in its sidecar."""
    rejected = counts.rejected(info["rejects"])
    return {
        "index": info["index"],
        "shard": info["shard"],
        "blob": info["blob"],
        "records": len(info["images"]),
        "records_read": info["records_read"],
        "filtered": info["filtered"],
        **rejected,
        "reject_counts": [list(x) for x in job_manifest.reject_counts(info)],
        "maps": info["maps"],
    }


def unit_info_url(blob: str) -> str:
    """Where the attempt that wrote ``blob`` keeps its description, beside it (the unit's
    sidecar describes whichever attempt finished last: ``pipelines.job.workfiles``)."""
    return blob + ".info.json"


def write_unit_info(info: Dict[str, Any], config=None) -> None:
    blob = info["blob"]
    get_store(blob, config).write_bytes(
        unit_info_url(blob), json.dumps(info, sort_keys=True).encode()
    )


def _unit_info(unit: Dict[str, Any], cfg: PcrConfig) -> Dict[str, Any]:
    """A unit's description (its images and rejects), as the attempt whose summary the
    job holds wrote it."""
    url = unit_info_url(unit["blob"])
    return json.loads(get_store(url, cfg.store).read_bytes(url))


def _images(unit: Dict[str, Any], cfg: PcrConfig) -> List[Dict[str, Any]]:
    return [
        dict(im, blob=unit["blob"], unit=unit["index"]) for im in _unit_info(unit, cfg)["images"]
    ]


# the seeded plan's order of all images: (sort key, where the image's description is in
# the spill file, its length); the spill place is in input order, which breaks key ties
_ROW = np.dtype([("k0", ">u8"), ("k1", ">u4"), ("at", "<u8"), ("n", "<u4")])


def _shuffled(units: List[Dict[str, Any]], cfg: PcrConfig) -> Iterator[Dict[str, Any]]:
    """The images of ``units`` in the seeded order, sorted in buckets of bounded size
    (``pipelines.job.external``).  Each unit's sidecar is read once: its images'
    descriptions are pickled into a local temporary file as they pass, and the sorted rows
    say where.  (Reading an image's description back from its unit's sidecar would read a
    sidecar once per image at scale: a sorted bucket draws from every unit.)  Disk: one
    copy of the descriptions; memory: one unit's, and one bucket's rows."""
    total = sum(u["records"] for u in units)
    with tempfile.TemporaryFile(prefix="tar2tf-pcr-images-") as spill:

        def rows():
            at = 0
            for u in units:
                if not u["records"]:
                    continue
                # as _images gives them, but the unit's blob URL, the same for all of its
                # images, is added back as they come out instead of being copied per image
                images = _unit_info(u, cfg)["images"]
                keys = b"".join(sort_key(cfg.seed, u["index"], im["key"]) for im in images)
                k = np.frombuffer(keys, dtype=[("k0", ">u8"), ("k1", ">u4")])
                blobs = [
                    pickle.dumps(dict(im, unit=u["index"]), protocol=pickle.HIGHEST_PROTOCOL)
                    for im in images
                ]
                n = np.fromiter(map(len, blobs), dtype=np.uint64, count=len(blobs))
                spill.write(b"".join(blobs))
                r = np.empty(len(k), dtype=_ROW)
                r["k0"], r["k1"], r["at"], r["n"] = k["k0"], k["k1"], at + np.cumsum(n) - n, n
                at += int(n.sum())
                yield r

        blob_of = {u["index"]: u["blob"] for u in units}
        for bucket in external.buckets(rows(), _ROW, total):
            spill.flush()  # every row is written before the first bucket comes back
            bucket = bucket[np.lexsort((bucket["at"], bucket["k1"], bucket["k0"]))]
            fd = spill.fileno()
            for at, n in zip(bucket["at"].tolist(), bucket["n"].tolist()):
                im = pickle.loads(os.pread(fd, n, at))
                yield dict(im, blob=blob_of[im["unit"]])


def plan_records(units: Sequence[Dict[str, Any]], cfg: PcrConfig) -> Iterator[Dict[str, Any]]:
    """Record tasks ``{index, path, images: [image info + blob]}``, each as it fills; the
    last may be partial.  ``units``: their summaries; their images are streamed from
    their sidecars."""
    units = sorted(units, key=itemgetter("index"))
    if cfg.seed is None:
        images = (im for u in units if u["records"] for im in _images(u, cfg))
    else:
        images = _shuffled(units, cfg)
    n, r, batch = cfg.images_per_record, 0, []
    for im in images:
        batch.append(im)
        if len(batch) == n:
            yield _record_task(r, batch, cfg)
            r, batch = r + 1, []
    if batch:
        yield _record_task(r, batch, cfg)


def _record_task(r: int, images: List[Dict[str, Any]], cfg: PcrConfig) -> Dict[str, Any]:
    # its keys may be surrogate-escaped bytes (pipelines.job.element_coding)
    return Pickled({"index": r, "path": join(cfg.output, fmt.record_name(r)), "images": images})


def write_record_task(task: Dict[str, Any], config: Optional[StoreConfig] = None) -> Dict[str, Any]:
    images = []
    handles: Dict[str, Any] = {}
    try:
        for im in task["images"]:
            f = handles.get(im["blob"])
            if f is None:
                f = handles[im["blob"]] = get_store(im["blob"], config).open_read(im["blob"])
            f.seek(im["offset"])
            pieces = []
            for size in im["piece_sizes"]:
                pieces.append(f.read(size))
                if len(pieces[-1]) != size:
                    raise IOError(f"work blob {im['blob']} is shorter than its info says")
            images.append(
                fmt.PcrImage(
                    im["key"],
                    im["label"],
                    pieces,
                    im["scan_map"],
                    im["orientation"],
                    im["lossless"],
                    im["source_format"],
                    im["width"],
                    im["height"],
                    im["components"],
                )
            )
    finally:
        for f in handles.values():
            f.close()
    entry = fmt.write_record(task["path"], images, config)
    return {
        "index": task["index"],
        "path": task["path"],
        "entry": entry.SerializeToString(deterministic=True),
        "records": len(images),
        "bytes": sum(entry.offsets64),
        "sha256": entry.sha256,
    }


def finish(
    records,
    units,
    cfg: PcrConfig,
    list_rejects: List[Reject],
    inputs: List[str],
    classes: Optional[List[str]],
) -> Dict[str, Any]:
    """The index, manifest and rejects (streamed from the units' sidecars); returns the
    manifest.  The launcher deletes the work directory once the job has finished (a
    cluster may run WriteRecord again after this step: ``pipelines.job.lifecycle``)."""
    from transforms.pcr import pcr_pb2

    records = sorted(records, key=lambda r: r["index"])
    entries = [pcr_pb2.RecordOffsetsIndex.FromString(r["entry"]) for r in records]
    maps: Dict[str, Any] = {}
    for unit in units:
        maps.update(unit["maps"])
    smaps = [
        ScanGroupMap(name, comps, tuple(groups), desc)
        for name, (_, comps, groups, desc) in sorted(maps.items())
    ]
    index_path = join(cfg.output, fmt.INDEX_NAME)
    index_bytes = fmt.build_index(
        entries, SCAN_GROUPS, smaps, transforms.__version__, cfg.scan_script or ""
    )
    store = get_store(index_path, cfg.store)
    # only records an earlier manifest named (pipelines.job.replace), never an input
    replace.remove_stale(
        existing_records(cfg),
        {r["path"] for r in records},
        manifest_path(cfg.output),
        inputs,
        cfg.store,
    )
    store.write_bytes(index_path, index_bytes)
    shards = [
        {"path": r["path"], "records": r["records"], "bytes": r["bytes"], "sha256": r["sha256"]}
        for r in records
    ]
    totals = job_manifest.totals_of(units, list_rejects, shards)
    rejected, by_reason = job_manifest.reasons_of(units, list_rejects)
    rejects = itertools.chain(
        (r.to_dict() for r in list_rejects),
        (r for u in sorted(units, key=itemgetter("index")) for r in _unit_info(u, cfg)["rejects"]),
    )
    stem = join(cfg.output, MANIFEST_STEM)
    manifest = {
        "tool": "tar2tf",
        "version": transforms.__version__,
        "kind": "pcr",
        "inputs": inputs,
        "output": cfg.output,
        "directory": cfg.output,
        "options": dict(cfg.describe(), scans=cfg.scans),
        "classes": classes,
        "index": {
            "path": index_path,
            "bytes": len(index_bytes),
            "sha256": hashlib.sha256(index_bytes).hexdigest(),
        },
        "scan_maps": {
            m.name: {
                "components": m.components,
                "group_of_scan": list(m.group_of_scan),
                "description": m.description,
            }
            for m in smaps
        },
        "shards": shards,
        "totals": totals,
        "rejects": {
            "count": rejected,
            "by_reason": by_reason,
            **job_manifest.first_missing(list_rejects),
            "path": names.companion(stem, ".rejects.jsonl"),
        },
    }
    job_manifest.write_manifest(stem, manifest, rejects, cfg.store)
    replace.end(manifest_path(cfg.output), cfg.store)
    return manifest
