"""The Progressive Compressed Records Beam pipeline and its ``convert_pcr()`` entry point.

Graph (thin shells over ``transforms.pcr.convert`` / ``transforms.pcr.format``)::

    Create(units) -> spread -> ConvertUnit (read, jpegtran, split scans; one work blob
    + info per unit) -> gather infos -> plan records (input order or seeded shuffle,
    N images each, the last one partial) -> spread -> WriteRecord (PCR_<i>.db,
    atomic) -> gather index entries -> PCR_index.pb (each record once) + manifest + rejects

Units are tar shards or slices of an ImageFolder tree.  The record plan depends only on
the unit infos (ordered by unit index) and the seed, never on bundling or worker count,
so output is byte-identical across runs and runners.  The shuffle sorts images by
``sha256(seed, unit index, key)`` (the TFRecord shuffle's key).

A custom jpegtran scan script (``scans``) is read and checked before the job starts; its
text is part of the options, so it reaches every worker and the work directory's
fingerprint.  The work directory holds ``job.json`` (inputs, options, version;
``pipelines.job.record``): ``resume`` with other options than an interrupted run of the
same inputs is refused, naming them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from operator import itemgetter
from typing import Any, Dict, List, Optional, Sequence, Union

import apache_beam as beam
from apache_beam.metrics import Metrics

import transforms
from pipelines.beam import options as opts
from pipelines.beam import worker_logs
from pipelines.beam.convert import ConvertResult, OutputExistsError, counters_of
from pipelines.beam.distribute import gather, spread
from pipelines.job import cleanup, finalize, output_lock, overlap, replace, workfiles
from pipelines.job import progress as prog
from pipelines.job import record as job_record
from pipelines.job.element_coding import Pickled
from pipelines.job.piecefiles import sort_key
from pipelines.job.setup import job_of, work_dir_for
from transforms.pcr import convert as pc
from transforms.pcr import format as fmt
from transforms.pcr import scan_script as pcr_scan_script
from transforms.pcr.image import DEFAULT_QUALITY, jpegtran_path
from transforms.pcr.jpeg_scans import SCAN_GROUPS, ScanGroupMap
from transforms.record_types import Reject
from transforms.stores import StoreConfig, get_store, join
from transforms.tar.sources import resolve

log = logging.getLogger("tar2tf")
NS = "tar2tf"
MANIFEST_STEM = "PCR"  # -> PCR.manifest.json, PCR.rejects.jsonl inside the output directory


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

    # the job's identity (pipelines.job.setup.job_of) leaves the output out: the work
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
    return finalize.companion(join(output, MANIFEST_STEM), ".manifest.json")


# -- Beam shells ----------------------------------------------------------------------------


class ConvertUnitFn(beam.DoFn):
    def __init__(self, cfg: PcrConfig, work: str):
        self.cfg, self.work = cfg, work
        self.c = {
            n: Metrics.counter(NS, n)
            for n in (
                "shards_read",
                "shards_resumed",
                "records_read",
                "records_written",
                "records_rejected",
                "shards_rejected",
            )
        }

    def process(self, unit):
        cfg = self.cfg
        blob = pc.unit_blob(self.work, unit)
        info = workfiles.load_verified(blob, cfg.store) if cfg.resume else None
        if info is not None and info.get("unit") != pc.unit_id(unit):
            info = None  # the blob of another unit: the input changed since that run
        if info is not None:
            self.c["shards_resumed"].inc()
        else:
            info = pc.convert_unit(
                unit,
                self.work,
                cfg.store,
                cfg.quality,
                cfg.image_field,
                cfg.label_field,
                cfg.scan_script,
            )
            workfiles.write_sidecar(blob, info, cfg.store)
        self.c["shards_read"].inc()
        self.c["records_read"].inc(info["records_read"])
        self.c["records_written"].inc(len(info["images"]))
        for r in info["rejects"]:
            self.c["records_rejected" if r.get("record", True) else "shards_rejected"].inc()
            name = "reject:" + r["stage"] + ":" + Reject.from_dict(r).kind
            Metrics.counter(NS, name.encode("utf-8", "backslashreplace").decode("utf-8")).inc()
        yield Pickled(
            info
        )  # its keys may be surrogate-escaped bytes (pipelines.job.element_coding)


def plan_records(infos: List[Dict[str, Any]], cfg: PcrConfig) -> List[Dict[str, Any]]:
    """Record tasks ``{index, path, images: [image info + blob]}``; the last may be partial."""
    flat = []
    for info in sorted(infos, key=lambda i: i["index"]):
        for im in info["images"]:
            flat.append(dict(im, blob=info["blob"], unit=info["index"]))
    if cfg.seed is not None:
        flat.sort(key=lambda im: sort_key(cfg.seed, im["unit"], im["key"]))
    n = cfg.images_per_record
    return [
        Pickled(
            {"index": r, "path": join(cfg.output, fmt.record_name(r)), "images": flat[a : a + n]}
        )
        for r, a in enumerate(range(0, len(flat), n))
    ]


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


def _finish(
    records,
    infos,
    cfg: PcrConfig,
    list_rejects: List[Reject],
    inputs: List[str],
    classes: Optional[List[str]],
):
    """The index, manifest and rejects; the launcher deletes the work directory once the job
    has finished (a cluster may run WriteRecord again after this step: see
    ``pipelines.job.setup``)."""
    from transforms.pcr import pcr_pb2

    records = sorted(records, key=lambda r: r["index"])
    entries = [pcr_pb2.RecordOffsetsIndex.FromString(r["entry"]) for r in records]
    maps: Dict[str, Any] = {}
    for info in infos:
        maps.update(info["maps"])
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
    rejects = finalize.all_rejects(infos, list_rejects)
    totals = finalize.totals_of(infos, list_rejects, shards)
    by_reason = finalize.rejects_by_reason(rejects)
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
            "count": len(rejects),
            "by_reason": by_reason,
            "path": finalize.companion(stem, ".rejects.jsonl"),
        },
    }
    finalize.write_manifest(stem, manifest, rejects, cfg.store)
    replace.end(manifest_path(cfg.output), cfg.store)
    yield Pickled(manifest)


def _existing_records(cfg: PcrConfig) -> List[str]:
    store = get_store(cfg.output, cfg.store)
    prefix = join(cfg.output, "PCR_")
    return [
        u
        for u in store.list(prefix)
        if fmt.RECORD_RE.match(u.rpartition("/")[2])
        and u.rpartition("/")[0].rstrip("/") == cfg.output.rstrip("/")
    ]


def build(
    p: beam.Pipeline,
    cfg: PcrConfig,
    units: List,
    list_rejects: List[Reject],
    inputs: List[str],
    classes: Optional[List[str]],
    work: str,
):
    infos = spread(
        p | "Units" >> beam.Create(units, reshuffle=False), "SpreadUnits", itemgetter(1)
    ) | "ConvertUnit" >> beam.ParDo(ConvertUnitFn(cfg, work))
    all_infos = gather(infos, "GatherUnits")
    plan = all_infos | "PlanRecords" >> beam.FlatMap(plan_records, cfg)
    records = spread(plan, "SpreadRecords", itemgetter("index")) | "WriteRecord" >> beam.Map(
        write_record_task, cfg.store
    )
    return gather(records, "GatherRecords") | "Finish" >> beam.FlatMap(
        _finish, beam.pvalue.AsSingleton(all_infos), cfg, list_rejects, inputs, classes
    )


def list_units(cfg: PcrConfig):
    """(units, list rejects, input names, classes or None)."""
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


def resume_conflict(cfg: PcrConfig, inputs: List[str], work: str) -> Optional[str]:
    """Why ``resume`` cannot continue when ``work`` is empty: another work directory beside it
    holds an interrupted run of the same inputs with other options (or tar2tf version)."""
    # "output" too: a PCR record has none, so a TFRecord job's record (`tar2tf convert` into
    # the PCR output directory shares its work root) is not taken for a PCR run
    found = job_record.find_conflict(
        work, job_of(cfg, inputs), cfg.store, same=("inputs", "output"), shown=_shown
    )
    if found is None:
        return None
    return (
        f"--resume: the interrupted run of these inputs in {found.work} had other options "
        f"({found.describe()}); rerun with its options to resume it, or without --resume to start afresh"
    )


def convert_pcr(cfg: PcrConfig, beam_args: Optional[Sequence[str]] = None) -> PcrResult:
    """Run the conversion; raises OutputExistsError, ValueError, RuntimeError (no jpegtran).
    The output's lock is held from before its files are looked at to the end of the job
    (``pipelines.job.output_lock``)."""
    # usage errors first: the lock lives in the output directory, so taking it creates
    # that directory, and a refused command must leave nothing behind
    cfg = _checked(cfg)
    lock = output_lock.acquire(
        output_lock.pcr_lock_url(cfg.output), cfg.store, output=cfg.output, command="pcr"
    )
    try:
        res = _convert_pcr(cfg, beam_args)
    finally:
        lock.release()
    lock.check()
    return res


def _checked(cfg: PcrConfig) -> PcrConfig:
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


def _convert_pcr(cfg: PcrConfig, beam_args: Optional[Sequence[str]] = None) -> PcrResult:
    t0 = time.time()
    existing = _existing_records(cfg)
    units, list_rejects, inputs, classes = list_units(cfg)
    work = work_dir_for(cfg, inputs)
    overlap.check_pcr(
        cfg.output,
        inputs,
        work,
        [
            manifest_path(cfg.output),
            join(cfg.output, fmt.INDEX_NAME),
            finalize.companion(join(cfg.output, MANIFEST_STEM), ".rejects.jsonl"),
            replace.ledger_of(manifest_path(cfg.output)),
        ],
        fmt.RECORD_RE,
    )
    if cfg.resume and not finalize.has_files(get_store(work, cfg.store), work):
        conflict = resume_conflict(cfg, inputs, work)
        if conflict:
            raise ValueError(conflict)
    if (
        existing or get_store(cfg.output, cfg.store).exists(join(cfg.output, fmt.INDEX_NAME))
    ) and not cfg.overwrite:
        # --resume continues this job (its work directory is there), never replaces another's
        if not cfg.resume:
            raise OutputExistsError(
                f"{cfg.output} already holds a PCR dataset; pass --overwrite to replace it"
            )
        if not finalize.has_files(get_store(work, cfg.store), work):
            raise OutputExistsError(
                f"{cfg.output} already holds a PCR dataset, but no interrupted run of this "
                f"job (same inputs and options) left work to resume in {work}; pass "
                f"--overwrite to replace it"
            )
    job_record.write(work, job_of(cfg, inputs), cfg.store)
    replace.begin(
        manifest_path(cfg.output), cfg.store, also_delete=[join(cfg.output, fmt.INDEX_NAME)]
    )
    args = opts.effective_args(beam_args)
    worker_logs.install()
    p = opts.make_pipeline(args)
    build(p, cfg, units, list_rejects, inputs, classes, work)
    try:
        with prog.watch(work, cfg.store, len(units), cfg.progress):
            result = p.run()
            result.wait_until_finish()
    except BaseException as e:  # failed: only verified work stays (pipelines.job.cleanup)
        cleanup.after_failure(e, work, None, cfg.store)
        raise
    cleanup.remove_work(work, cfg.store)
    mpath = manifest_path(cfg.output)
    manifest = json.loads(get_store(mpath, cfg.store).read_bytes(mpath))
    counters = counters_of(result)
    rejected = manifest["rejects"]["count"]
    return PcrResult(
        paths=[s["path"] for s in manifest["shards"]],
        index_path=manifest["index"]["path"],
        manifest=manifest,
        manifest_path=mpath,
        rejects_path=manifest["rejects"]["path"],
        totals=manifest["totals"],
        counters=counters,
        seconds=time.time() - t0,
        exit_code=finalize.exit_code(manifest["totals"], rejected, cfg.max_rejects),
    )
