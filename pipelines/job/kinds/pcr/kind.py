"""The PCR kind of job (``pipelines.job.lifecycle``): Progressive Compressed Records.

This module is the job's config (:class:`PcrConfig`), its units (:func:`list_units`:
tar shards or slices of an ImageFolder tree), its checks before it starts, and the kind
that ties them to the record files (``pipelines.job.kinds.pcr.records``: the unit's
summary, the plan, the writer, the index and manifest).  A unit's work
(``transforms.pcr.convert``) reads its images, makes each a lossless progressive JPEG
with jpegtran and splits it into its scans: the scans go to the unit's blob in the work
directory, each image's description and the unit's rejects to its sidecar
(``pipelines.job.workfiles``).

A custom jpegtran scan script (``scans``) is read and checked before the job starts; its
text is part of the options, so it reaches every worker and the work directory's
fingerprint.  The work directory holds ``job.json`` (inputs, options, version;
``pipelines.job.job_file``): ``resume`` with other options than an interrupted run of the
same inputs is refused, naming them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Dict, List, Optional

from pipelines.job import job_file, names, output_lock, overlap, progress, replace, workfiles
from pipelines.job import manifest as job_manifest
from pipelines.job.kinds.pcr import records
from pipelines.job.kinds.pcr.config import PcrConfig
from pipelines.job.kinds.pcr.records import MANIFEST_STEM, manifest_path
from pipelines.job.lifecycle import Converted, ConvertResult, Ended, Job, Kind, job_of
from pipelines.job.refused import OVERWRITE, RESUME, OutputExistsError, ResumeConflict
from transforms.pcr import convert as pc
from transforms.pcr import format as fmt
from transforms.pcr import scan_script as pcr_scan_script
from transforms.pcr.image import jpegtran_path
from transforms.stores import get_store, join
from transforms.tar.sources import resolve

log = logging.getLogger("tar2tf")


@dataclasses.dataclass
class PcrResult(ConvertResult):
    """A conversion's result (record files as ``paths``) plus the index it wrote."""

    index_path: str = ""


class PcrKind(Kind):
    name = "pcr"

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

    def unit_index(self, unit) -> int:
        return unit[1]  # ("tar" | "files", index, shard, what)

    def reuse(self, cfg: PcrConfig, work: str, unit) -> Optional[Dict[str, Any]]:
        stem = workfiles.unit_stem(pc.unit_blob(work, unit))
        info = workfiles.load_verified(stem, "blob", cfg.store)
        if info is None or info.get("unit") != pc.unit_id(unit):
            return None  # none, or the blob of another unit: the input changed since that run
        return records.summary_of(info)

    def convert(self, cfg: PcrConfig, work: str, unit, stages, hold: int = 0) -> Converted:
        stem = workfiles.unit_stem(pc.unit_blob(work, unit))
        info = pc.convert_unit(
            unit,
            work,
            cfg.store,
            cfg.quality,
            cfg.image_field,
            cfg.label_field,
            cfg.scan_script,
            blob=workfiles.attempt_url(stem, ".bin"),
        )
        # the attempt's own description first, for the plan (records.unit_info); then
        # the unit's sidecar, for a resume
        records.write_unit_info(info, cfg.store)
        workfiles.write_sidecar(info["blob"], info, cfg.store)
        return Converted(records.summary_of(info))

    def counts(self, summary: Dict[str, Any]) -> Dict[str, int]:
        return job_manifest.piece_counts(summary)

    def plan(self, summaries, cfg: PcrConfig):
        return records.plan_records(summaries, cfg)

    def write(self, task: Dict[str, Any], cfg: PcrConfig) -> Dict[str, Any]:
        return records.write_record_task(task, cfg.store)

    def finish(self, cfg: PcrConfig, ended: Ended) -> Dict[str, Any]:
        return records.finish(
            ended.rows,
            ended.summaries,
            cfg,
            ended.list_rejects,
            ended.inputs,
            ended.extras["classes"],
        )

    def manifest_path(self, cfg: PcrConfig) -> str:
        return manifest_path(cfg.output)

    def result(self, job: Job, **common) -> "PcrResult":
        return PcrResult(index_path=common["manifest"]["index"]["path"], **common)


PCR = PcrKind()


def _shown(key: str, value: Any) -> str:
    if key == "scan_script":
        return (
            "jpegtran's standard script"
            if value is None
            else f"script sha256 {pcr_scan_script.digest(value)[:12]}"
        )
    return json.dumps(value)


def _holds_dataset(cfg: PcrConfig) -> bool:
    """The output directory holds an index, and its manifest does not say it is empty.  A
    run that wrote no record (every input missing or rejected) leaves an index and a
    manifest of nothing; refusing its rerun for them would only ask for --overwrite to
    replace nothing."""
    store = get_store(cfg.output, cfg.store)
    if not store.exists(join(cfg.output, fmt.INDEX_NAME)):
        return False
    try:
        m = json.loads(store.read_bytes(manifest_path(cfg.output)))
        return bool(m["shards"]) or m["totals"]["records_written"] > 0
    except Exception:  # no manifest, or not one of ours: the index alone is kept
        return True


def check_outputs(cfg: PcrConfig, work: str, inputs: List[str]) -> None:
    """The output directory held against the inputs (``pipelines.job.overlap``); a
    refusal (``pipelines.job.refused``) when it holds a PCR dataset that neither
    ``overwrite`` nor this job's ``resume`` may replace, or when ``resume`` finds an
    interrupted run of the same inputs with other options instead of its own work."""
    existing = records.existing_records(cfg)
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
        found = job_file.find_conflict(
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
    if cfg.overwrite or not (existing or _holds_dataset(cfg)):
        return
    # resume continues this job (its work directory is there), never replaces another's
    if not cfg.resume:
        raise OutputExistsError(
            f"{cfg.output} already holds a PCR dataset; pass ", OVERWRITE, " to replace it"
        )
    if not has_work:
        raise OutputExistsError(
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
        root = names.resolved(root)  # the work directory's key: however it is spelt
        units, classes, skipped = pc.list_image_folder(root, cfg.store, cfg.files_per_unit)
        if skipped:
            log.warning(
                "%d file(s) directly under %s belong to no class and were skipped", skipped, root
            )
        return units, [], [root], classes
    if fmt_ != "tar":
        raise ValueError(f"unknown input format {cfg.input_format!r} (auto, imagefolder, tar)")
    urls, list_rejects = resolve(cfg.sources, cfg.base, cfg.store)
    urls = names.resolved_all(urls)
    return [("tar", i, u, u) for i, u in enumerate(urls)], list_rejects, urls, None


def checked(cfg: PcrConfig) -> PcrConfig:
    """The config with its scan script read and checked; ValueError / RuntimeError for
    what makes the job impossible before it touches anything."""
    if cfg.images_per_record <= 0:
        raise ValueError("images_per_record must be positive")
    if not 1 <= cfg.quality <= 100:
        raise ValueError("quality must be in 1..100")
    progress.checked_every(cfg.progress_every)
    if jpegtran_path() is None:
        raise RuntimeError(
            "jpegtran not found: install libjpeg-turbo-progs (bash launch/setup.d/20-apt.sh)"
        )
    # one output however it is spelt (pipelines.job.names.resolved)
    cfg.output = names.resolved(cfg.output.rstrip("/") or "/")
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
