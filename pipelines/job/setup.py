"""The TFRecord job both drivers run: its set-up and its end, written once.

Set-up (:func:`prepare`): the options checked, the inputs resolved (templates -> shard URLs,
``list`` rejects), the outputs checked against ``overwrite`` / ``resume``, and the job's work
directory chosen and recorded.  End (:func:`finish_job`, the graph's last step): stale
outputs of an earlier run removed, the manifest and rejects written; then, in the launching
process once the job has finished (:func:`result_of`), the work directory deleted and what
the caller gets back.  The work directory outlives the last step because a cluster may run
a step again after it (Flink re-runs the tasks whose results a lost worker held), and a
``WriteShard`` run again needs its pieces.  The Beam graph (``pipelines.beam.convert``)
and the in-process driver (``pipelines.local.driver``) differ only in between: how the
pieces are converted and the final shards written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import logging
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

import transforms
from pipelines.job import cleanup, finalize, output_lock, overlap, piecefiles, replace
from pipelines.job import journal as shard_journal
from pipelines.job import plan as job_plan
from pipelines.job import record as job_record
from pipelines.job.config import ConvertConfig, OutputExistsError
from pipelines.job.duplicates import duplicate_keys
from pipelines.job.element_coding import Pickled
from pipelines.job.shard import without_sizes
from transforms.record_types import Reject
from transforms.redact import redact_obj
from transforms.sizes import parse_size
from transforms.stores import dirname, get_store, join
from transforms.tar.sources import resolve
from transforms.tfrecord import schema as exs

log = logging.getLogger("tar2tf")
# files written beside the shards (what overlap.check_convert holds against the inputs)
COMPANIONS = (".manifest.json", ".rejects.jsonl", replace.LEDGER_SUFFIX)


@dataclasses.dataclass
class Job:
    """A job after set-up: its inputs, the listing's rejects and its work directory."""

    cfg: ConvertConfig
    urls: List[str]
    list_rejects: List[Reject]
    work: str
    started: float
    lock: Optional[output_lock.OutputLock] = None  # released by result_of / cleaned_on_failure


def prepare(cfg: ConvertConfig, flag_names: Tuple[str, str] = ("--overwrite", "--resume")) -> Job:
    """Check the options, resolve the inputs, check the outputs and choose the work
    directory.  Raises ``ValueError`` for bad options and :class:`OutputExistsError`,
    whose message names the overwrite / resume options as ``flag_names`` spell them (the
    CLI's flags, or ``overwrite=True`` from the Python API).  Nothing is written yet."""
    t0 = time.time()
    if cfg.output.count("{}") > 1:
        raise ValueError("output may contain '{}' only once")
    parse_size(cfg.max_shard_size), parse_size(cfg.max_member_size), parse_size(cfg.spool_limit)
    if cfg.records_per_shard is not None and cfg.records_per_shard <= 0:
        raise ValueError("records_per_shard must be positive")
    urls, list_rejects = resolve(cfg.sources, cfg.base, cfg.store)
    work = work_dir_for(cfg, urls)
    lock_url = output_lock.lock_url_for(cfg.output)  # before the outputs are looked at
    lock = output_lock.acquire(lock_url, cfg.store, output=cfg.output, command="convert")
    try:
        check_outputs(cfg, work, *flag_names, inputs=urls)
        overlap.check_convert(
            cfg.output, urls, work, [finalize.companion(cfg.output, x) for x in COMPANIONS]
        )
    except BaseException:
        lock.release()
        raise
    return Job(cfg, urls, list_rejects, work, t0, lock)


@contextlib.contextmanager
def cleaned_on_failure(job: Job) -> Iterator[None]:
    """A failed job leaves only verified work (``pipelines.job.cleanup``)."""
    try:
        yield
    except BaseException as e:
        try:
            cleanup.after_failure(e, job.work, job.cfg.output, job.cfg.store)
        finally:
            if job.lock is not None:
                job.lock.release()
        raise


def result_of(
    job: Job, counters: Dict[str, int], manifest: Optional[Dict[str, Any]] = None
) -> "ConvertResult":
    """The finished job's result, from its manifest (``manifest``: what :func:`finish`
    returned in this process; else read back, as a Beam job's last step wrote it on a
    worker); its work directory deleted."""
    cfg = job.cfg
    cleanup.remove_work(job.work, cfg.store)
    if job.lock is not None:
        job.lock.release()
        job.lock.check()  # another job took the output over while this one ran: fail
    manifest_path = finalize.companion(cfg.output, ".manifest.json")
    if manifest is None:
        manifest = json.loads(get_store(manifest_path, cfg.store).read_bytes(manifest_path))
    rejected = manifest["rejects"]["count"]
    return ConvertResult(
        paths=[s["path"] for s in manifest["shards"]],
        manifest=manifest,
        manifest_path=manifest_path,
        rejects_path=finalize.companion(cfg.output, ".rejects.jsonl"),
        totals=manifest["totals"],
        counters=counters,
        seconds=time.time() - job.started,
        exit_code=finalize.exit_code(manifest["totals"], rejected, cfg.max_rejects),
    )


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
        "of the first record that has each (as --type-map %s); values that do not fit are rejected",
        added,
    )
    return dataclasses.replace(cfg, type_map=types, overwrite=True, resume=False)


@dataclasses.dataclass
class ConvertResult:
    paths: List[str]
    manifest: Dict[str, Any]
    manifest_path: str
    rejects_path: str
    totals: Dict[str, int]
    counters: Dict[str, int]
    seconds: float
    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def plan_shards(pieces, cfg: ConvertConfig):
    """Final shard tasks for all pieces, once every piece is done (the Beam graph, and the
    in-process driver when output names need the shard count), streamed from the pieces'
    record files (``pipelines.job.plan``)."""
    return job_plan.stream_plan(
        pieces,
        cfg.output,
        parse_size(cfg.max_shard_size),
        cfg.records_per_shard,
        cfg.store,
        cfg.dali_index,
    )


def finish_job(shards, pieces, cfg: ConvertConfig, list_rejects: List[Reject], inputs: List[str]):
    """:func:`finish` as the Beam graph's last step (a FlatMap): yields the manifest."""
    yield Pickled(finish(shards, pieces, cfg, list_rejects, inputs))


def finish(
    shards, pieces, cfg: ConvertConfig, list_rejects: List[Reject], inputs: List[str]
) -> Dict[str, Any]:
    """Stale outputs removed, manifest + rejects written; returns the manifest.  Run again,
    it writes the same manifest (the work directory is deleted by :func:`result_of`).
    ``pieces``: their summaries; the rejects and keys are read from their record files."""
    # (a copy only of a piece that still carries its sizes: the caller's stays whole)
    pieces = [without_sizes(dict(p)) if "sizes" in p or "frames" in p else p for p in pieces]
    shards = sorted(shards, key=lambda s: s["path"])
    order = {p: i for i, p in enumerate(finalize.shard_names(cfg.output, len(shards)))}
    shards.sort(key=lambda s: order.get(s["path"], 0))
    schema: Dict[str, Any] = {}
    for p in sorted(pieces, key=lambda p: p["index"]):
        if p["schema"]:
            schema = exs.merge_schema(schema, p["schema"]) if schema else p["schema"]
    for name, t in exs.first_types(schema, pieces).items():
        schema[name]["first_dtype"] = t  # the driver runs the job again with it in the type map
    unmatched = exs.unmatched_types(exs.parse_type_map(cfg.type_map), schema) if schema else []
    if unmatched:
        log.warning(
            "type map names %s, which no written feature has (features: %s): they typed nothing",
            ", ".join(unmatched),
            ", ".join(sorted(schema)),
        )
    totals = finalize.totals_of(pieces, list_rejects, shards)
    rejected, by_reason = finalize.reasons_of(pieces, list_rejects)
    dups = duplicate_keys(pieces, cfg.store)
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
    manifest = {
        "tool": "tar2tf",
        "version": transforms.__version__,
        "kind": "tfrecord",
        "inputs": inputs,
        "output": cfg.output,
        "options": cfg.describe(),
        "schema": schema,
        "shards": shards,
        "totals": totals,
        "duplicate_keys": dups,
        "rejects": {
            "count": rejected,
            "by_reason": by_reason,
            "path": finalize.companion(cfg.output, ".rejects.jsonl"),
        },
    }
    # stale shards of an earlier run (overwrite was checked before the job started): only
    # those an earlier manifest named (pipelines.job.replace), never an input
    keep = {s["path"] for s in shards}
    store = get_store(cfg.output, cfg.store)
    mpath = finalize.companion(cfg.output, ".manifest.json")
    existing = finalize.existing_outputs(cfg.output, cfg.store)
    replace.remove_stale(existing, keep, mpath, inputs, cfg.store, extra=lambda u: [u + ".idx"])
    for kept in keep if not cfg.dali_index else ():
        if store.exists(kept + ".idx"):  # an earlier run's DALI index: not this shard's offsets
            store.delete(kept + ".idx")
    for tmp in finalize.stale_temporaries(cfg.output, cfg.store):  # left by a killed run
        store.delete(tmp)
    rejects = itertools.chain(
        (r.to_dict() for r in list_rejects), piecefiles.rejects_of(pieces, cfg.store)
    )
    finalize.write_manifest(cfg.output, manifest, rejects, cfg.store)  # the commit point
    replace.end(mpath, cfg.store)
    # the manifest as the file holds it (redacted, JSON types), for a caller in this process
    return json.loads(json.dumps(redact_obj(manifest)))


def check_outputs(
    cfg: ConvertConfig, work: str, overwrite: str, resume: str, *, inputs: List[str]
) -> None:
    """Raise :class:`OutputExistsError` if outputs exist and neither ``overwrite`` nor
    ``resume`` was asked for (the flags' names as the caller spells them).  ``resume``
    accepts them only if an interrupted run of this very job (same inputs, options and
    output: the same work directory) left its work behind: it would replace them, and
    they may be another job's finished output.  When an interrupted run of the same
    inputs and output with other options left its work beside ``work``, the refusal
    names those options (``pipelines.job.record``)."""
    existing = finalize.existing_outputs(cfg.output, cfg.store)
    if cfg.overwrite:
        return
    msg = (
        f"{len(existing)} output file(s) already match {cfg.output} (e.g. {existing[0]})"
        if existing
        else ""
    )
    if cfg.resume:
        if finalize.has_files(get_store(work, cfg.store), work):
            return
        # nothing of this job to continue: an interrupted run of these inputs and this
        # output with other options is refused, naming them -- also before any output
        # exists (planned shards are written at the end), as by `tar2tf pcr --resume`,
        # rather than left behind while the job starts afresh
        found = job_record.find_conflict(
            work, job_of(cfg, inputs), cfg.store, same=("inputs", "output")
        )
        if found is not None and not existing:
            raise ValueError(
                f"{resume}: the interrupted run of these inputs and this output in {found.work} had "
                f"other options ({found.describe()}); rerun with its options to resume it, or "
                f"without {resume} to start afresh"
            )
        if found is not None:
            raise OutputExistsError(
                f"{msg}, but the interrupted run of these inputs and this output in "
                f"{found.work} had other options ({found.describe()}); rerun with its "
                f"options to resume it, or pass {overwrite} to replace them"
            )
        if existing:
            raise OutputExistsError(
                f"{msg}, but no interrupted run of this job (same inputs, options and "
                f"output) left work to resume in {work}; pass {overwrite} to replace them"
            )
    if not existing:
        return
    # a journal exists only where the in-process driver streamed final shards
    if get_store(work, cfg.store).exists(shard_journal.entry_url(work, 1)):
        raise OutputExistsError(
            f"{msg}: an interrupted run of this job left them; pass {resume} to "
            f"continue it, or {overwrite} to start over"
        )
    raise OutputExistsError(f"{msg}; pass {overwrite} to replace them")


def job_of(cfg, inputs: List[str]) -> Dict[str, Any]:
    """What the job is, for either format: its work directory's fingerprint and record
    (``pipelines.job.record``).  A TFRecord job's names its output; a PCR job's does not
    (``PcrConfig.output_in_identity``: its work directory is inside its output)."""
    job = {"inputs": inputs, "options": cfg.describe(), "v": transforms.__version__}
    if getattr(cfg, "output_in_identity", True):
        job["output"] = cfg.output
    return job


def record_job(cfg: ConvertConfig, inputs: List[str], work: str) -> None:
    """The job starts writing: its record into its work directory (for a refused resume),
    and an earlier run's manifest replaced by the ledger of its shards (the new manifest is
    the commit point: ``pipelines.job.replace``)."""
    job_record.write(work, job_of(cfg, inputs), cfg.store)
    replace.begin(
        finalize.companion(cfg.output, ".manifest.json"), cfg.store, output=cfg.output, work=work
    )


def work_dir_for(cfg, inputs: List[str]) -> str:
    """Same job (:func:`job_of`) -> same work dir, which is what makes ``resume`` find
    pieces or unit blobs (and only this job's: another output's journal lists other
    shards).  Under ``cfg.work_root()`` where the config has one (PCR: inside its output
    directory), else ``cfg.work_dir`` or ``.tar2tf-work`` beside the output."""
    key = json.dumps(job_of(cfg, inputs), sort_keys=True)
    fp = hashlib.sha256(key.encode()).hexdigest()[:16]
    if hasattr(cfg, "work_root"):
        root = cfg.work_root()
    else:
        root = cfg.work_dir or join(dirname(cfg.output), ".tar2tf-work")
    return join(root, fp)
