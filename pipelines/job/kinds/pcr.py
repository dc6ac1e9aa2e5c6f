"""The PCR kind of job (``pipelines.job.lifecycle``): Progressive Compressed Records.

Units are tar shards or slices of an ImageFolder tree (:func:`list_units`).  A unit's
work (``transforms.pcr.convert``) reads its images, makes each a lossless progressive
JPEG with jpegtran and splits it into its scans; the scans go to the unit's blob in the
work directory, each image's description (key, label, sizes, offset) and the unit's
rejects to its sidecar beside it (``pipelines.job.workfiles``).  What crosses the job's
global steps is the unit's summary: counts and its scan maps, never one entry per image.
The plan streams the units' images from their sidecars, in input order or sorted by
``sha256(seed, unit index, key)`` (the TFRecord shuffle's key), into record tasks of
``images_per_record`` images (the last one partial); the writer gathers a record's scans
from the blobs into ``PCR_<i>.db``; the finish writes ``PCR_index.pb`` (each record once),
the manifest and the rejects.  Output depends only on the inputs, the options and the
seed, never on bundling or worker count.

A custom jpegtran scan script (``scans``) is read and checked before the job starts; its
text is part of the options, so it reaches every worker and the work directory's
fingerprint.  The work directory holds ``job.json`` (inputs, options, version;
``pipelines.job.record``): ``resume`` with other options than an interrupted run of the
same inputs is refused, naming them.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import logging
from operator import itemgetter
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

import transforms
from pipelines.job import external, names, output_lock, overlap, replace, workfiles
from pipelines.job import manifest as job_manifest
from pipelines.job import record as job_record
from pipelines.job.element_coding import Pickled
from pipelines.job.lifecycle import ConvertResult, Job, Kind, job_of
from pipelines.job.piecefiles import sort_key
from pipelines.job.refused import OVERWRITE, RESUME, OutputsExist, ResumeConflict
from transforms.pcr import convert as pc
from transforms.pcr import format as fmt
from transforms.pcr import scan_script as pcr_scan_script
from transforms.pcr.image import DEFAULT_QUALITY, jpegtran_path
from transforms.pcr.jpeg_scans import SCAN_GROUPS, ScanGroupMap
from transforms.records import Reject
from transforms.stores import StoreConfig, get_store, join
from transforms.tar.sources import resolve

log = logging.getLogger("tar2tf")
MANIFEST_STEM = "PCR"  # -> PCR.manifest.json, PCR.rejects.jsonl inside the output directory
# sidecars of units kept while the seeded plan fills its records (each draws from anywhere)
UNITS_CACHED = 256


@dataclasses.dataclass
class PcrConfig:
    sources: Union[str, Sequence[str]]
    output: str  # a directory (local, gs://bucket/dir, ais://bucket/dir)
    images_per_record: int = 1024
    seed: Optional[int] = None  # None: input order; an int: seeded shuffle
    input_format: str = "auto"  # auto | imagefolder | tar
    label_field: str = "cls"
    image_field: Optional[str] = None  # default: the record's first image extension
    quality: int = DEFAULT_QUALITY  # for non-JPEG inputs (and un-rotatable JPEGs)
    scans: Optional[str] = None  # a jpegtran -scans file for 3-component images (local/gs/ais)
    scan_script: Optional[str] = None  # or the script's text (what the job carries to workers)
    files_per_unit: int = 64  # ImageFolder files per work unit
    base: Optional[str] = None
    max_rejects: int = 0
    overwrite: bool = False
    resume: bool = False  # reuse verified unit blobs of an interrupted run
    progress: Optional[bool] = None  # None: a bar when stderr is a terminal (local runs)
    store: StoreConfig = dataclasses.field(default_factory=StoreConfig)

    # the job's identity (pipelines.job.lifecycle.job_of) leaves the output out: the work
    # directory is inside it
    output_in_identity = False

    def work_root(self) -> str:
        return join(self.output, ".tar2tf-work")

    def describe(self) -> Dict[str, Any]:
        return {
            "images_per_record": self.images_per_record,
            "seed": self.seed,
            "shuffle": self.seed is not None,
            "input_format": self.input_format,
            "label_field": self.label_field,
            "image_field": self.image_field,
            "quality": self.quality,
            "scan_groups": SCAN_GROUPS,
            "max_rejects": self.max_rejects,
            "scan_script": self.scan_script,
        }


@dataclasses.dataclass
class PcrResult(ConvertResult):
    """A conversion's result (record files as ``paths``) plus the index it wrote."""

    index_path: str = ""


def manifest_path(output: str) -> str:
    return names.companion(join(output, MANIFEST_STEM), ".manifest.json")


class PcrKind(Kind):
    name = "pcr"
    steps = {
        "units": "Units",
        "spread_units": "SpreadUnits",
        "convert": "ConvertUnit",
        "gather_units": "GatherUnits",
        "plan": "PlanRecords",
        "spread_writes": "SpreadRecords",
        "write": "WriteRecord",
        "gather_rows": "GatherRecords",
        "finish": "Finish",
    }
    index_at = 1  # ("tar" | "files", index, shard, what)

    def checked(self, cfg: PcrConfig) -> PcrConfig:
        return checked(cfg)

    def units(self, cfg: PcrConfig):
        units, list_rejects, inputs, classes = list_units(cfg)
        return units, list_rejects, inputs, {"classes": classes}

    def lock_url(self, cfg: PcrConfig) -> str:
        return output_lock.pcr_lock_url(cfg.output)

    def check_outputs(self, cfg: PcrConfig, work: str, inputs: List[str]) -> None:
        check_outputs(cfg, work, inputs)

    def begin(self, job: Job) -> None:
        out = job.cfg.output
        replace.begin(manifest_path(out), job.cfg.store, also_delete=[join(out, fmt.INDEX_NAME)])

    def convert_unit(self, cfg: PcrConfig, work: str, unit, stages):
        blob = pc.unit_blob(work, unit)
        info = workfiles.load_verified(blob, cfg.store) if cfg.resume else None
        if info is not None and info.get("unit") != pc.unit_id(unit):
            info = None  # the blob of another unit: the input changed since that run
        reused = info is not None
        if not reused:
            info = pc.convert_unit(
                unit,
                work,
                cfg.store,
                cfg.quality,
                cfg.image_field,
                cfg.label_field,
                cfg.scan_script,
            )
            workfiles.write_sidecar(blob, info, cfg.store)
        return summary_of(info), reused

    def counts(self, summary: Dict[str, Any]) -> Dict[str, int]:
        return job_manifest.piece_counts(summary)

    def plan(self, summaries, cfg: PcrConfig):
        return plan_records(summaries, cfg)

    def write(self, task: Dict[str, Any], cfg: PcrConfig) -> Dict[str, Any]:
        return write_record_task(task, cfg.store)

    def finish(self, rows, summaries, cfg, list_rejects, inputs, extras):
        return finish(rows, summaries, cfg, list_rejects, inputs, extras["classes"])

    def manifest_path(self, cfg: PcrConfig) -> str:
        return manifest_path(cfg.output)

    def result(self, job: Job, **common) -> "PcrResult":
        return PcrResult(index_path=common["manifest"]["index"]["path"], **common)


PCR = PcrKind()


def summary_of(info: Dict[str, Any]) -> Dict[str, Any]:
    """What the job's global steps learn of a converted unit (its sidecar's ``info``):
    counts and scan maps; its images and rejects stay in its sidecar."""
    rejected = {"records_rejected": 0, "shards_rejected": 0}
    for r in info["rejects"]:
        rejected["records_rejected" if r.get("record", True) else "shards_rejected"] += 1
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


def _unit_info(unit: Dict[str, Any], cfg: PcrConfig) -> Dict[str, Any]:
    """A unit's sidecar (its images and rejects), read back from the work directory."""
    blob = unit["blob"]
    return json.loads(get_store(blob, cfg.store).read_bytes(workfiles.sidecar_of(blob)))


def _images(unit: Dict[str, Any], cfg: PcrConfig) -> List[Dict[str, Any]]:
    return [
        dict(im, blob=unit["blob"], unit=unit["index"]) for im in _unit_info(unit, cfg)["images"]
    ]


# the seeded plan's order of all images: (sort key, unit index, image) -- ties in input order
_ROW = np.dtype([("k0", ">u8"), ("k1", ">u4"), ("u", "<i4"), ("i", "<i4")])


def _shuffled(units: List[Dict[str, Any]], cfg: PcrConfig) -> Iterator[Dict[str, Any]]:
    """The images of ``units`` in the seeded order, sorted in buckets of bounded size
    (``pipelines.job.external``); an image's description is read from its unit's sidecar
    (the last :data:`UNITS_CACHED` units' kept)."""
    by_index = {u["index"]: u for u in units}

    def rows():
        for u in units:
            if not u["records"]:
                continue
            keys = b"".join(sort_key(cfg.seed, u["index"], im["key"]) for im in _images(u, cfg))
            k = np.frombuffer(keys, dtype=[("k0", ">u8"), ("k1", ">u4")])
            r = np.empty(len(k), dtype=_ROW)
            r["k0"], r["k1"], r["u"], r["i"] = k["k0"], k["k1"], u["index"], np.arange(len(k))
            yield r

    images_of = functools.lru_cache(maxsize=UNITS_CACHED)(lambda i: _images(by_index[i], cfg))
    total = sum(u["records"] for u in units)
    for bucket in external.buckets(rows(), _ROW, total):
        bucket = bucket[np.lexsort((bucket["i"], bucket["u"], bucket["k1"], bucket["k0"]))]
        for u, i in zip(bucket["u"].tolist(), bucket["i"].tolist()):
            yield images_of(u)[i]


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


def _shown(key: str, value: Any) -> str:
    if key == "scan_script":
        return (
            "jpegtran's standard script"
            if value is None
            else f"script sha256 {pcr_scan_script.digest(value)[:12]}"
        )
    return json.dumps(value)


def check_outputs(cfg: PcrConfig, work: str, inputs: List[str]) -> None:
    """The output directory held against the inputs (``pipelines.job.overlap``); a
    refusal (``pipelines.job.refused``) when it holds a PCR dataset that neither
    ``overwrite`` nor this job's ``resume`` may replace, or when ``resume`` finds an
    interrupted run of the same inputs with other options instead of its own work."""
    existing = _existing_records(cfg)
    overlap.check_pcr(
        cfg.output,
        inputs,
        work,
        [
            manifest_path(cfg.output),
            join(cfg.output, fmt.INDEX_NAME),
            names.companion(join(cfg.output, MANIFEST_STEM), ".rejects.jsonl"),
            replace.ledger_of(manifest_path(cfg.output)),
        ],
        fmt.RECORD_RE,
    )
    has_work = workfiles.has_files(get_store(work, cfg.store), work)
    if cfg.resume and not has_work:
        # "output" too: a PCR record has none, so a TFRecord job's record (`tar2tf
        # convert` into the PCR output directory shares its work root) is not taken for a
        # PCR run
        found = job_record.find_conflict(
            work, job_of(cfg, inputs), cfg.store, same=("inputs", "output"), shown=_shown
        )
        if found is not None:
            raise ResumeConflict(
                RESUME,
                f": the interrupted run of these inputs in {found.work} had other options "
                f"({found.describe()}); rerun with its options to resume it, or without ",
                RESUME,
                " to start afresh",
            )
    if cfg.overwrite or not (
        existing or get_store(cfg.output, cfg.store).exists(join(cfg.output, fmt.INDEX_NAME))
    ):
        return
    # resume continues this job (its work directory is there), never replaces another's
    if not cfg.resume:
        raise OutputsExist(
            f"{cfg.output} already holds a PCR dataset; pass ", OVERWRITE, " to replace it"
        )
    if not has_work:
        raise OutputsExist(
            f"{cfg.output} already holds a PCR dataset, but no interrupted run of this "
            f"job (same inputs and options) left work to resume in {work}; pass ",
            OVERWRITE,
            " to replace it",
        )


def list_units(cfg: PcrConfig):
    """(units, list rejects, input names, classes or None): tar shards, or slices of an
    ImageFolder tree (``transforms.pcr.convert``)."""
    fmt_ = cfg.input_format
    if fmt_ == "auto":
        fmt_ = "imagefolder" if pc.is_image_folder(cfg.sources) else "tar"
    if fmt_ == "imagefolder":
        root = cfg.sources if isinstance(cfg.sources, str) else cfg.sources[0]
        units, classes, skipped = pc.list_image_folder(root, cfg.store, cfg.files_per_unit)
        if skipped:
            log.warning(
                "%d file(s) directly under %s belong to no class and were skipped", skipped, root
            )
        return units, [], [root], classes
    if fmt_ != "tar":
        raise ValueError(f"unknown input format {cfg.input_format!r} (auto, imagefolder, tar)")
    urls, list_rejects = resolve(cfg.sources, cfg.base, cfg.store)
    return [("tar", i, u, u) for i, u in enumerate(urls)], list_rejects, urls, None


def _shown(key: str, value: Any) -> str:
    if key == "scan_script":
        return (
            "jpegtran's standard script"
            if value is None
            else f"script sha256 {pcr_scan_script.digest(value)[:12]}"
        )
    return json.dumps(value)


def checked(cfg: PcrConfig) -> PcrConfig:
    """The config with its scan script read and checked; ValueError / RuntimeError for
    what makes the job impossible before it touches anything."""
    if cfg.images_per_record <= 0:
        raise ValueError("images_per_record must be positive")
    if not 1 <= cfg.quality <= 100:
        raise ValueError("quality must be in 1..100")
    if jpegtran_path() is None:
        raise RuntimeError(
            "jpegtran not found: install libjpeg-turbo-progs (bash launch/setup.d/20-apt.sh)"
        )
    cfg.output = cfg.output.rstrip("/")
    if cfg.scans is not None:  # the job gets the text (the caller's config keeps what it gave)
        text = pcr_scan_script.read(cfg.scans, cfg.store)
        if cfg.scan_script is not None and cfg.scan_script != text:
            raise ValueError(
                f"scan_script differs from the text of scans={cfg.scans!r}: give one of them"
            )
        cfg = dataclasses.replace(cfg, scan_script=text)
    if cfg.scan_script is not None:
        pcr_scan_script.check(cfg.scan_script, cfg.scans or "scan_script")
    return cfg


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
        _existing_records(cfg),
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
            "path": names.companion(stem, ".rejects.jsonl"),
        },
    }
    job_manifest.write_manifest(stem, manifest, rejects, cfg.store)
    replace.end(manifest_path(cfg.output), cfg.store)
    return manifest


def _existing_records(cfg: PcrConfig) -> List[str]:
    store = get_store(cfg.output, cfg.store)
    prefix = join(cfg.output, "PCR_")
    return [
        u
        for u in store.list(prefix)
        if fmt.RECORD_RE.match(u.rpartition("/")[2])
        and u.rpartition("/")[0].rstrip("/") == cfg.output.rstrip("/")
    ]
