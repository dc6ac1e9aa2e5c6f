"""The TFRecord kind of job (``pipelines.job.lifecycle``): input shards in, pieces, final
shards cut by the greedy size rule, a manifest with the written schema.

Units are ``(index, url)``: one input shard each, converted into one piece
(``pipelines.job.kinds.tfrecord.piece``).  The plan packs the records of all pieces, in input order,
into final shards (``pipelines.job.kinds.tfrecord.plan``), and the adapter of the job's file
format writes each (``pipelines.job.kinds.tfrecord.file_formats``: a TFRecord shard copies the
byte ranges, an ArrayRecord shard holds the same Examples): the same records, cut at the
same places.  The manifest adds the schema, the duplicate keys across input shards, and
the options' first types (a job whose features had several types is run again with them:
:func:`retyped`).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import logging
from typing import Any, Dict, List, Optional

import transforms
from pipelines.job import (
    inflight,
    job_file,
    names,
    output_lock,
    overlap,
    progress,
    replace,
    workfiles,
)
from pipelines.job import manifest as job_manifest
from pipelines.job.kinds.tfrecord import duplicates, file_formats, piecefiles
from pipelines.job.kinds.tfrecord import plan as job_plan
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from pipelines.job.kinds.tfrecord.piece import convert_to_piece, load_verified_piece
from pipelines.job.kinds.tfrecord.plan import ShardTask
from pipelines.job.kinds.tfrecord.summary import PieceSummary
from pipelines.job.lifecycle import (
    ConvertResult,
    Ended,
    InProcessPlan,
    Job,
    Kind,
    StreamSpec,
    job_of,
)
from pipelines.job.refused import OVERWRITE, RESUME, OutputExistsError, ResumeConflict
from transforms.ops import codec_choice
from transforms.record_types import Reject
from transforms.redact import redact_obj
from transforms.sizes import parse_size
from transforms.stores import get_store
from transforms.tar.sources import resolve
from transforms.tfrecord import schema as exs

log = logging.getLogger("tar2tf")
# files written beside the shards (what overlap.check_convert holds against the inputs)
COMPANIONS = (".manifest.json", ".rejects.jsonl", replace.LEDGER_SUFFIX)


class TFRecordKind(Kind):
    name = "convert"

    def checked(self, cfg: ConvertConfig) -> ConvertConfig:
        names.check_template(cfg.output)
        parse_size(cfg.max_shard_size), parse_size(cfg.max_member_size)
        parse_size(cfg.spool_limit)
        codec_choice.checked(cfg.image_codec)
        progress.checked_every(cfg.progress_every)
        if cfg.records_per_shard is not None and cfg.records_per_shard <= 0:
            raise ValueError("records_per_shard must be positive")
        # local paths resolved once, here: the lock, the work directory's key, the manifest
        # and the stale shards of an --overwrite then see one output however it is spelt
        return dataclasses.replace(
            cfg, output=names.resolved(cfg.output), work_dir=names.resolved(cfg.work_dir)
        )

    def units(self, cfg: ConvertConfig):
        urls, list_rejects = resolve(cfg.sources, cfg.base, cfg.store)
        urls = names.resolved_all(urls)  # the work directory's key: however they are spelt
        return list(enumerate(urls)), list_rejects, urls, {}

    def lock_url(self, cfg: ConvertConfig) -> str:
        return output_lock.lock_url_for(cfg.output)

    def check_outputs(self, cfg: ConvertConfig, work: str, inputs: List[str]) -> None:
        check_outputs(cfg, work, inputs)

    def begin(self, job: Job) -> None:
        cfg = job.cfg
        # before a shard is replaced: TFDS metadata beside the output no longer names this
        # split (written again by a --tfds job that succeeds)
        from pipelines.export import tfds  # no TensorFlow import: the metadata is JSON

        with tfds.retracted(cfg.output):
            replace.begin(self.manifest_path(cfg), cfg.store, output=cfg.output, work=job.work)

    def in_process(self, cfg: ConvertConfig) -> InProcessPlan:
        return InProcessPlan(
            refused=(
                "a shuffled job needs the Beam graph, not the in-process driver: run it on a "
                "Beam runner"
                if cfg.shuffle
                else None
            ),
            stream=_stream_spec(cfg),
            processes=True,
            heavy=cfg.has_heavy_ops(),
        )

    def stages(self, cfg: ConvertConfig):
        return cfg.stages()

    def reuse(self, cfg: ConvertConfig, work: str, unit) -> Optional[PieceSummary]:
        return load_verified_piece(unit[0], work, cfg.store)

    def convert(self, cfg: ConvertConfig, work: str, unit, stages, hold: int = 0):
        index, url = unit
        return convert_to_piece(index, url, work, cfg, stages, hold)

    def counts(self, summary: PieceSummary) -> Dict[str, int]:
        return job_manifest.piece_counts(summary)

    def plan(self, summaries, cfg: ConvertConfig):
        return plan_shards(summaries, cfg)

    def task_index(self, task: ShardTask) -> int:
        return task.index

    def write(self, task: ShardTask, cfg: ConvertConfig) -> Dict[str, Any]:
        # a TFRecord file, or an ArrayRecord file of the same Examples (``format``)
        return file_formats.of(cfg.format).write(task, cfg.store, cfg.dali_index)

    def finish(self, cfg: ConvertConfig, ended: Ended) -> Dict[str, Any]:
        # "duplicates": the buckets' scans of a driver that spread them (the Beam graph)
        scans = ended.extras.get("duplicates")
        found = duplicates.merge(scans) if scans is not None else None
        return finish(ended.rows, ended.summaries, cfg, ended.list_rejects, ended.inputs, found)

    def manifest_path(self, cfg: ConvertConfig) -> str:
        return names.companion(cfg.output, ".manifest.json")

    def failed_output(self, cfg: ConvertConfig) -> Optional[str]:
        return cfg.output

    def result(self, job: Job, **common) -> ConvertResult:
        # the paths as the caller spelt the output (the manifest's are resolved, and its
        # rejects path redacted): load(path="out/t.record") gives "out/t-….record" back
        given = job.given_output or job.cfg.output
        paths = [names.respelt(p, job.cfg.output, given) for p in common["paths"]]
        rejects = names.companion(given, ".rejects.jsonl")
        return ConvertResult(**dict(common, paths=paths, rejects_path=rejects))

    def again(self, cfg: ConvertConfig, manifest: Dict[str, Any]) -> Optional[ConvertConfig]:
        return retyped(cfg, manifest)


TFRECORD = TFRecordKind()


def _stream_spec(cfg: ConvertConfig) -> Optional[StreamSpec]:
    """The shards a job may write as its pieces convert: shard names that need no count
    (a ``{}`` template) and a file format the stream writes (``file_formats``: TFRecord
    framing, whose packing is the plan's); a shuffle needs every record first."""
    if cfg.shuffle or not file_formats.of(cfg.format).streams or not names.is_template(cfg.output):
        return None
    return StreamSpec(
        cfg.output,
        parse_size(cfg.max_shard_size),
        cfg.records_per_shard,
        cfg.dali_index,
        parse_size(cfg.spool_limit),
    )


def plan_shards(pieces, cfg: ConvertConfig):
    """Final shard tasks for all pieces, once every piece is done (the Beam graph, and the
    in-process driver when output names need the shard count), streamed from the pieces'
    record files (``pipelines.job.kinds.tfrecord.plan``)."""
    return job_plan.stream_plan(
        pieces,
        cfg.output,
        parse_size(cfg.max_shard_size),
        cfg.records_per_shard,
        cfg.store,
        cfg.dali_index,
    )


def finish(
    shards,
    pieces: List[PieceSummary],
    cfg: ConvertConfig,
    list_rejects: List[Reject],
    inputs: List[str],
    found=None,
) -> Dict[str, Any]:
    """Stale outputs removed, manifest + rejects written; returns the manifest.  Run again,
    it writes the same manifest (the work directory is deleted by ``lifecycle.result_of``).
    ``pieces``: their summaries; the rejects and keys are read from their record files;
    ``found``: the duplicate keys a driver's buckets found (else read here)."""
    shards = _in_name_order(shards, cfg.output)
    schema = _written_schema(pieces, cfg)
    dups = duplicates.duplicate_keys(pieces, cfg.store, found=found)
    _say_duplicates(dups)
    manifest = _manifest(cfg, inputs, schema, shards, pieces, list_rejects, dups)
    _remove_stale(cfg, shards, inputs)
    rejects = itertools.chain(
        (r.to_dict() for r in list_rejects), piecefiles.rejects_of(pieces, cfg.store)
    )
    job_manifest.write_manifest(cfg.output, manifest, rejects, cfg.store)  # the commit point
    replace.end(names.companion(cfg.output, ".manifest.json"), cfg.store)
    # the manifest as the file holds it (redacted, JSON types), for a caller in this process
    return json.loads(json.dumps(redact_obj(manifest)))


def _in_name_order(shards, output: str) -> List[Dict[str, Any]]:
    """The written shards' rows in the order of their names (the plan's order)."""
    shards = sorted(shards, key=lambda s: s["path"])
    order = {p: i for i, p in enumerate(names.shard_names(output, len(shards)))}
    return sorted(shards, key=lambda s: order.get(s["path"], 0))


def _written_schema(pieces: List[PieceSummary], cfg: ConvertConfig) -> Dict[str, Any]:
    """The pieces' schemas merged in input order, each feature with the type of the first
    record that has it (``first_dtype``: what a second run types it as, :func:`retyped`);
    a warning for type-map names that typed nothing."""
    schema: Dict[str, Any] = {}
    in_order = sorted(pieces, key=lambda p: p.index)
    merged = None  # pieces mostly share one schema object (summary.py): merged once
    for p in in_order:
        if p.schema and p.schema is not merged:
            # a copy: the pieces' schemas are shared, and the manifest's is changed below
            schema = exs.merge_schema(schema, p.schema) if schema else copy.deepcopy(p.schema)
            merged = p.schema
    for name, t in exs.first_types(schema, [p.first_types for p in in_order]).items():
        schema[name]["first_dtype"] = t
    unmatched = exs.unmatched_types(exs.parse_type_map(cfg.type_map), schema) if schema else []
    if unmatched:
        log.warning(
            "type map names %s, which no written feature has (features: %s): they typed nothing",
            ", ".join(unmatched),
            ", ".join(sorted(schema)),
        )
    return schema


def _say_duplicates(dups: Dict[str, Any]) -> None:
    if dups["count"]:
        e = dups["examples"][0]
        log.warning(
            "%d records have a key that an earlier input shard had (e.g. %r in %s, first in %s); "
            "both are written",
            dups["count"],
            e["key"],
            e["again"],
            e["first"],
        )


def _manifest(cfg, inputs, schema, shards, pieces, list_rejects, dups) -> Dict[str, Any]:
    rejected, by_reason = job_manifest.reasons_of(pieces, list_rejects)
    return {
        "tool": "tar2tf",
        "version": transforms.__version__,
        "kind": "tfrecord",
        "inputs": inputs,
        "output": cfg.output,
        "options": cfg.describe(),
        "schema": schema,
        "shards": shards,
        "totals": job_manifest.totals_of(pieces, list_rejects, shards),
        "duplicate_keys": dups,
        "rejects": {
            "count": rejected,
            "by_reason": by_reason,
            **job_manifest.first_missing(list_rejects),
            "path": names.companion(cfg.output, ".rejects.jsonl"),
        },
    }


def _remove_stale(cfg: ConvertConfig, shards: List[Dict[str, Any]], inputs: List[str]) -> None:
    """Stale shards of an earlier run (overwrite was checked before the job started): only
    those an earlier manifest named (``pipelines.job.replace``), never an input; an earlier
    run's DALI indexes where this job writes none; a killed run's temporaries."""
    keep = {s["path"] for s in shards}
    store = get_store(cfg.output, cfg.store)
    mpath = names.companion(cfg.output, ".manifest.json")
    existing = names.existing_outputs(cfg.output, cfg.store)
    replace.remove_stale(existing, keep, mpath, inputs, cfg.store, extra=lambda u: [u + ".idx"])
    if not cfg.dali_index:  # an earlier run's DALI index: not this shard's offsets
        inflight.each(lambda kept: store.delete(kept + ".idx"), sorted(keep))
    for tmp in names.stale_temporaries(cfg.output, cfg.store):  # left by a killed run
        store.delete(tmp)


def check_outputs(cfg: ConvertConfig, work: str, inputs: List[str]) -> None:
    """Raise a refusal (``pipelines.job.refused``) if outputs exist and neither
    ``overwrite`` nor ``resume`` was asked for.  ``resume`` accepts them only if an
    interrupted run of this very job (same inputs, options and output: the same work
    directory) left its work behind: it would replace them, and they may be another job's
    finished output.  When an interrupted run of the same inputs and output with other
    options left its work beside ``work``, the refusal names those options
    (``pipelines.job.job_file``).  Then the output is held against the inputs
    (``pipelines.job.overlap``)."""
    _check_existing(cfg, work, inputs)
    overlap.check_convert(
        cfg.output, inputs, work, [names.companion(cfg.output, x) for x in COMPANIONS]
    )


def _check_existing(cfg: ConvertConfig, work: str, inputs: List[str]) -> None:
    existing = names.existing_outputs(cfg.output, cfg.store)
    if cfg.overwrite:
        return
    msg = (
        f"{len(existing)} output file(s) already match {cfg.output} (e.g. {existing[0]})"
        if existing
        else ""
    )
    if cfg.resume:
        if workfiles.has_files(get_store(work, cfg.store), work):
            return
        # nothing of this job to continue: an interrupted run of these inputs and this
        # output with other options is refused, naming them -- also before any output
        # exists (planned shards are written at the end), as by `tar2tf pcr --resume`,
        # rather than left behind while the job starts afresh
        found = job_file.find_conflict(
            work, job_of(cfg, inputs), cfg.store, same=("inputs", "output")
        )
        if found is not None and not existing:
            raise ResumeConflict(
                RESUME,
                f": the interrupted run of these inputs and this output in {found.work} had "
                f"other options ({found.describe()}); rerun with its options to resume it, or "
                "without ",
                RESUME,
                " to start afresh",
            )
        if found is not None:
            raise OutputExistsError(
                f"{msg}, but the interrupted run of these inputs and this output in "
                f"{found.work} had other options ({found.describe()}); rerun with its "
                "options to resume it, or pass ",
                OVERWRITE,
                " to replace them",
            )
        if existing:
            raise OutputExistsError(
                f"{msg}, but no interrupted run of this job (same inputs, options and "
                f"output) left work to resume in {work}; pass ",
                OVERWRITE,
                " to replace them",
            )
    if not existing:
        return
    # a journal exists only where the in-process driver streamed final shards
    if get_store(work, cfg.store).exists(workfiles.journal_entry(work, 1)):
        raise OutputExistsError(
            f"{msg}: an interrupted run of this job left them; pass ",
            RESUME,
            " to continue it, or ",
            OVERWRITE,
            " to start over",
        )
    raise OutputExistsError(f"{msg}; pass ", OVERWRITE, " to replace them")


def retyped(cfg: ConvertConfig, manifest: Dict[str, Any]) -> Optional[ConvertConfig]:
    """A feature's records disagreed on its type: the job to run again, with the type of
    the first record in input order that has it (as if given in the type map), so that
    every record has one type and the values that do not fit it are ``encode`` rejects;
    None when every feature had one type."""
    types = exs.retype(cfg.type_map, manifest["schema"])
    if not types:
        return None
    given = exs.parse_type_map(cfg.type_map)
    added = ", ".join(f"{n}:{t}" for n, t in sorted(types.items()) if n not in given)
    log.warning(
        "features with values of several types across records; converting again with the type "
        "of the first record that has each (as if the type map gave %s); values that do not fit "
        "are rejected",
        added,
    )
    return dataclasses.replace(cfg, type_map=types, overwrite=True, resume=False)
