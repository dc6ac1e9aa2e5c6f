"""The tar -> TFRecord Beam pipeline and its ``convert()`` entry point.

Graph (every step is a thin shell over a plain function in ``transforms``)::

    Create(shard tasks) -> spread (names, not bytes) -> ConvertShard (fetch, tar, ops,
    encode; one piece + sidecar per input shard) -> gather sidecars -> plan final shards
    -> spread -> WriteShard (copy byte ranges, atomic rename) -> manifest + rejects

On the local runner with a ``{}`` output template, the pieces also go to a shard stream in
this process (``pipelines.shard_stream``) that fills the final shards while later pieces
convert, and the graph ends at ``ConvertShard``: when the pipeline has run, ``convert()``
closes the last shard and writes the manifest from the pieces the stream got
(:func:`finish_streamed`).  The same bytes, without a copy stage after the last
conversion, and without the gather stage, which on the local runner cost 0.07-0.16 s
between the last conversion and the manifest (docs/benchmarks.md).  With local worker
processes (``pipelines.shard_pool``) and a local output, the workers write their frames
into the final shards at the offsets the stream assigns: no piece files.  Such a pool
converts every task itself, in input order, so the graph then has no spread step.

With ``shuffle=True`` the plan is made over a seeded permutation of all records, and the
records travel through a GroupByKey keyed by final shard (Beam's shuffle moves the
records once; ordering inside a shard comes from the seeded sort key, so it is
deterministic).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from operator import itemgetter
import sys
import time
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

import transforms
from pipelines import beam_sampler, finalize, interrupts, job_record, options as opts, progress as prog, shard_journal, shard_pool, shard_stream
from pipelines import cleanup, overlap, replace
from pipelines.distribute import gather, spread
from pipelines.shard_convert import ConvertConfig, OutputExistsError, convert_shard, load_verified_piece  # noqa: F401
from transforms import example_schema as exs
from transforms.records import Reject
from transforms.sizes import parse_size
from transforms.sources import resolve
from transforms.stores import dirname, get_store, join, split_url

log = logging.getLogger("tar2tf")
NS = "tar2tf"
# files written beside the shards (what overlap.check_convert holds against the inputs)
COMPANIONS = (".manifest.json", ".rejects.jsonl", replace.LEDGER_SUFFIX)


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


class ConvertShardFn(beam.DoFn):
    def __init__(self, cfg: ConvertConfig, work: str, job: str):
        self.cfg, self.work, self.job = cfg, work, job
        self.c = {n: Metrics.counter(NS, n) for n in (
            "shards_read", "shards_resumed", "records_read", "records_written", "records_rejected",
            "records_filtered", "shards_rejected", "bytes_written", "member_bytes_read", "members_skipped")}

    def setup(self):
        self.stages = self.cfg.stages()

    def process(self, task: Tuple[int, str]):
        index, url = task
        pool = shard_pool.get(self.job)  # only where convert() started one (local runs)
        # a pool whose workers write into the final shards converts every task itself, in
        # order (see convert()); other jobs reuse an interrupted run's pieces on resume
        reuse = self.cfg.resume and (pool is None or not pool.places)
        info = load_verified_piece(index, self.work, self.cfg.store) if reuse else None
        if info is not None:
            self.c["shards_resumed"].inc()
            piece_done(info, shard_stream.get(self.job), prog.get(self.job))
        elif pool is not None:
            info = pool.convert(index, url)  # the pool reports each piece itself (piece_done)
        else:
            info = convert_shard(index, url, self.work, self.cfg, self.stages)
            piece_done(info, shard_stream.get(self.job), prog.get(self.job))
        self._count(info)
        yield info

    def _count(self, info):
        for name, n in finalize.piece_counts(info).items():
            if n:
                (self.c[name] if name in self.c else Metrics.counter(NS, name)).inc(n)


def piece_done(info: Dict[str, Any], feed: Optional[shard_stream.PieceFeed],
               bar: Optional[prog.Progress]) -> None:
    """A finished piece, to the job's shard stream and progress bar where this process has
    them (local runs): from the DoFn that converted it, or from the worker pool as soon as
    a worker finishes it (Beam's threads ask for the shards in their bundles' order, which
    is not the order they finish in)."""
    if feed is not None:
        feed.offer(info)
    if bar is not None:
        bar.shard_done(len(info["sizes"]), info["member_bytes"])


def plan_shards(pieces, cfg: ConvertConfig):
    """Final shard tasks for all pieces (used by the Beam graph and the in-process driver)."""
    return finalize.make_plan(pieces, cfg.output, parse_size(cfg.max_shard_size), cfg.records_per_shard)


def streams(cfg: ConvertConfig) -> bool:
    """Whether the job's final shards can be written while it converts (``{}`` template,
    no shuffle): see ``pipelines.shard_stream``."""
    return not cfg.shuffle and shard_stream.can_stream(cfg.output)


def new_stream(cfg: ConvertConfig, work: Optional[str] = None,
               resume: Optional[shard_journal.ResumePoint] = None) -> Optional[shard_stream.ShardStream]:
    """A shard stream for the job when its output names allow one (:func:`streams`), else
    None; ``work``: the work directory its journal goes to; ``resume``: the journal of an
    interrupted run to continue (see ``pipelines.shard_journal``)."""
    if not streams(cfg):
        return None
    return shard_stream.ShardStream(cfg.output, parse_size(cfg.max_shard_size), cfg.records_per_shard,
                                    cfg.store, cfg.dali_index, journal=work, resume=resume,
                                    spool_limit=parse_size(cfg.spool_limit))


def start_stream(job: str, cfg: ConvertConfig, expect: Optional[int] = None, work: Optional[str] = None,
                 resume: Optional[shard_journal.ResumePoint] = None) -> Optional[shard_stream.PieceFeed]:
    """The job's stream behind a :class:`~pipelines.shard_stream.PieceFeed` that the
    DoFns running in this process offer their pieces to (see :func:`finish_streamed`);
    ``expect``: the job's piece count (the feed closes the last shard when all are in)."""
    stream = new_stream(cfg, work, resume)
    if stream is None:
        return None
    first = resume.next_piece if resume else 0
    return shard_stream.start(job, shard_stream.PieceFeed(stream, expect, first))


def resume_point(cfg: ConvertConfig, work: str) -> shard_journal.ResumePoint:
    """Where a streamed job continues: the journal of an interrupted run when ``resume``
    asks for it, else the start.  A job that starts over clears any journal first."""
    if cfg.resume and streams(cfg):
        point = shard_journal.load(work, cfg.store)
        if point is not None:
            log.info("resumed: %d final shard(s) of an interrupted run kept; converting from input shard %d",
                     point.shards, point.next_piece)
            return point
    else:
        shard_journal.clear(work, cfg.store)
    return shard_journal.ResumePoint()


def finish_streamed(job: str, cfg: ConvertConfig, list_rejects: List[Reject], inputs: List[str],
                    work: str, resume: Optional[shard_journal.ResumePoint] = None) -> Dict[str, Any]:
    """The manifest of a job whose DoFns offered their pieces to this process's stream:
    the last shard closed, then manifest + rejects written (:func:`finish_job`).
    ``resume``: the journal the job continued from (its shards and pieces come first).

    Pieces that never reached the stream (a DoFn that ran elsewhere after all) are read
    back from their sidecars in the work directory, and the stream continues from its
    journal with them, one after another."""
    feed = shard_stream.get(job)
    try:
        shards = feed.finish(len(inputs))
        pieces = (resume.pieces if resume else []) + feed.pieces()
    except shard_stream.MissingPieces as e:
        log.info("%s: writing the remaining final shards after the conversion", e)
        # what the stream finished (its journal)
        point = shard_journal.load(work, cfg.store) or shard_journal.ResumePoint()
        rest = [_piece_from_work(i, inputs[i], work, cfg) for i in range(point.next_piece, len(inputs))]
        stream = new_stream(cfg, work, point)
        try:
            for piece in rest:
                stream.add(dict(piece))
        except BaseException as err:
            stream.abort(err)
            raise
        shards = stream.finish()
        pieces = point.pieces + rest
    return next(finish_job(shards, pieces, cfg, list_rejects, inputs, work))


def _piece_from_work(index: int, url: str, work: str, cfg: ConvertConfig) -> Dict[str, Any]:
    info = load_verified_piece(index, work, cfg.store)
    if info is None:
        raise RuntimeError(f"the piece of input shard {index} ({url}) is missing or damaged in {work}")
    return info


def finish_job(shards, pieces, cfg: ConvertConfig, list_rejects: List[Reject], inputs: List[str], work: str):
    """Stale outputs removed, manifest + rejects written, work dir deleted; yields the manifest."""
    shards = sorted(shards, key=lambda s: s["path"])
    order = {p: i for i, p in enumerate(finalize.shard_names(cfg.output, len(shards)))}
    shards.sort(key=lambda s: order.get(s["path"], 0))
    schema: Dict[str, Any] = {}
    for p in sorted(pieces, key=lambda p: p["index"]):
        if p["schema"]:
            schema = exs.merge_schema(schema, p["schema"]) if schema else p["schema"]
    unmatched = exs.unmatched_types(exs.parse_type_map(cfg.type_map), schema) if schema else []
    if unmatched:
        log.warning("type map names %s, which no written feature has (features: %s): they typed nothing",
                    ", ".join(unmatched), ", ".join(sorted(schema)))
    rejects = finalize.all_rejects(pieces, list_rejects)
    totals = finalize.totals_of(pieces, list_rejects, shards)
    by_reason = finalize.rejects_by_reason(rejects)
    manifest = {"tool": "tar2tf", "version": transforms.__version__, "kind": "tfrecord",
                "inputs": inputs, "output": cfg.output, "options": cfg.describe(), "schema": schema,
                "shards": shards, "totals": totals,
                "rejects": {"count": len(rejects), "by_reason": by_reason,
                            "path": finalize.companion(cfg.output, ".rejects.jsonl")}}
    # stale shards of an earlier run (overwrite was checked before the job started): only
    # those an earlier manifest named (pipelines.replace), never an input
    keep = {s["path"] for s in shards}
    store = get_store(cfg.output, cfg.store)
    mpath = finalize.companion(cfg.output, ".manifest.json")
    existing = finalize.existing_outputs(cfg.output, cfg.store)
    replace.remove_stale(existing, keep, mpath, inputs, cfg.store, extra=lambda u: [u + ".idx"])
    for kept in keep if not cfg.dali_index else ():
        if store.exists(kept + ".idx"):
            store.delete(kept + ".idx")  # an earlier run's DALI index: its offsets are not this shard's
    for tmp in finalize.stale_temporaries(cfg.output, cfg.store):  # left by a killed run
        store.delete(tmp)
    finalize.write_manifest(cfg.output, manifest, rejects, cfg.store)
    replace.end(mpath, cfg.store)
    cleanup.remove_work(work, cfg.store)
    yield manifest


def check_outputs(cfg: ConvertConfig, work: str, overwrite: str, resume: str, *, inputs: List[str]) -> None:
    """Raise :class:`OutputExistsError` if outputs exist and neither ``overwrite`` nor
    ``resume`` was asked for (the flags' names as the caller spells them).  ``resume``
    accepts them only if an interrupted run of this very job (same inputs, options and
    output: the same work directory) left its work behind: it would replace them, and
    they may be another job's finished output.  When an interrupted run of the same
    inputs and output with other options left its work beside ``work``, the refusal
    names those options (``pipelines.job_record``)."""
    existing = finalize.existing_outputs(cfg.output, cfg.store)
    if cfg.overwrite:
        return
    msg = f"{len(existing)} output file(s) already match {cfg.output} (e.g. {existing[0]})" if existing else ""
    if cfg.resume:
        if finalize.has_files(get_store(work, cfg.store), work):
            return
        # nothing of this job to continue: an interrupted run of these inputs and this
        # output with other options is refused, naming them -- also before any output
        # exists (planned shards are written at the end), as by `tar2tf pcr --resume`,
        # rather than left behind while the job starts afresh
        found = job_record.find_conflict(work, job_of(cfg, inputs), cfg.store, same=("inputs", "output"))
        if found is not None and not existing:
            raise ValueError(f"{resume}: the interrupted run of these inputs and this output in {found.work} had "
                             f"other options ({found.describe()}); rerun with its options to resume it, or "
                             f"without {resume} to start afresh")
        if found is not None:
            raise OutputExistsError(f"{msg}, but the interrupted run of these inputs and this output in "
                                    f"{found.work} had other options ({found.describe()}); rerun with its "
                                    f"options to resume it, or pass {overwrite} to replace them")
        if existing:
            raise OutputExistsError(f"{msg}, but no interrupted run of this job (same inputs, options and "
                                    f"output) left work to resume in {work}; pass {overwrite} to replace them")
    if not existing:
        return
    if streams(cfg) and get_store(work, cfg.store).exists(shard_journal.entry_url(work, 1)):
        raise OutputExistsError(f"{msg}: an interrupted run of this job left them; pass {resume} to "
                                f"continue it, or {overwrite} to start over")
    raise OutputExistsError(f"{msg}; pass {overwrite} to replace them")


def job_of(cfg: ConvertConfig, inputs: List[str]) -> Dict[str, Any]:
    """What the job is: its work directory's fingerprint and record (``pipelines.job_record``)."""
    return {"inputs": inputs, "options": cfg.describe(), "output": cfg.output, "v": transforms.__version__}


def record_job(cfg: ConvertConfig, inputs: List[str], work: str) -> None:
    """Write the job's record into its work directory as it starts (for a refused resume)."""
    job_record.write(work, job_of(cfg, inputs), cfg.store)


def work_dir_for(cfg: ConvertConfig, inputs: List[str]) -> str:
    """Same inputs + options + output -> same work dir, which is what makes ``resume``
    find pieces (and only this job's: another output's journal lists other shards)."""
    key = json.dumps(job_of(cfg, inputs), sort_keys=True)
    fp = hashlib.sha256(key.encode()).hexdigest()[:16]
    root = cfg.work_dir or join(dirname(cfg.output), ".tar2tf-work")
    return join(root, fp)


def build(p: beam.Pipeline, cfg: ConvertConfig, urls: List[str], list_rejects: List[Reject],
          work: str, job: str, streamed: bool = False, first: int = 0, pooled: bool = False):
    """The job's graph; ``first``: the first input shard to convert (a streamed job
    resumed from its journal; the graph then ends at ``ConvertShard``).  ``pooled``: this
    process's worker pool converts the tasks itself, in order (``pipelines.shard_pool``),
    so the DoFns only collect its results and the tasks are not spread over Beam's
    workers: one step less for the runner (~0.05-0.1 s per job on the local runner)."""
    tasks = p | "Shards" >> beam.Create(list(enumerate(urls))[first:], reshuffle=False)
    if not pooled:
        tasks = spread(tasks, "SpreadShards", itemgetter(0))
    pieces = tasks | "ConvertShard" >> beam.ParDo(ConvertShardFn(cfg, work, job))
    if streamed:  # this process's stream writes the shards; convert() the manifest
        return pieces
    all_pieces = gather(pieces, "GatherPieces")
    if cfg.shuffle:
        from pipelines.shuffle import shuffled_shards
        shards = shuffled_shards(pieces, all_pieces, cfg)
    else:
        plan = all_pieces | "Plan" >> beam.FlatMap(plan_shards, cfg)
        shards = (spread(plan, "SpreadWrites", itemgetter("index"))
                  | "WriteShard" >> beam.Map(finalize.write_shard, cfg.store, cfg.dali_index))
    return (gather(shards, "GatherShards")
            | "Manifest" >> beam.FlatMap(finish_job, beam.pvalue.AsSingleton(all_pieces), cfg,
                                         list_rejects, urls, work))


def counters_of(result) -> Dict[str, int]:
    """The ``tar2tf`` Beam counters of a finished pipeline result, by name."""
    out: Dict[str, int] = {}
    try:
        for c in result.metrics().query(MetricsFilter().with_namespace(NS))["counters"]:
            val = c.committed if c.committed is not None else c.attempted
            out[c.key.metric.name] = out.get(c.key.metric.name, 0) + int(val or 0)
    except Exception as e:  # noqa: BLE001 - some runners do not report metrics
        log.warning("runner reported no metrics: %s", e)
    return out


def convert(cfg: ConvertConfig, beam_args: Optional[Sequence[str]] = None,
            flag_names: Tuple[str, str] = ("--overwrite", "--resume")) -> ConvertResult:
    """Run the conversion; see the module docstring.  Raises OutputExistsError, whose
    message names the overwrite / resume options as ``flag_names`` spell them (the CLI's
    flags, or ``overwrite=True`` from the Python API)."""
    t0 = time.time()
    if "{}" in cfg.output and cfg.output.count("{}") > 1:
        raise ValueError("output may contain '{}' only once")
    parse_size(cfg.max_shard_size), parse_size(cfg.max_member_size), parse_size(cfg.spool_limit)
    if cfg.records_per_shard is not None and cfg.records_per_shard <= 0:
        raise ValueError("records_per_shard must be positive")
    urls, list_rejects = resolve(cfg.sources, cfg.base, cfg.store)
    work = work_dir_for(cfg, urls)
    check_outputs(cfg, work, *flag_names, inputs=urls)
    overlap.check_convert(cfg.output, urls, work, [finalize.companion(cfg.output, x) for x in COMPANIONS])
    job = uuid.uuid4().hex
    args = opts.effective_args(beam_args, workers=cfg.processes)
    here = opts.dofns_run_here(args)
    # a journal only where a stream writes
    resumed = resume_point(cfg, work) if here else shard_journal.ResumePoint()
    procs = opts.pool_size(cfg.processes, args, len(urls) - resumed.next_piece)
    # packed before the job's record is written: ops that cannot be pickled stop the job
    # before it leaves anything in its work directory
    blob = shard_pool.pack(cfg) if procs else None
    record_job(cfg, urls, work)
    replace.begin(finalize.companion(cfg.output, ".manifest.json"), cfg.store, output=cfg.output, work=work)
    bar = prog.Progress(job, len(urls), cfg.progress) if opts.shows_progress(args) else None
    if bar is not None:
        for info in resumed.pieces:
            bar.shard_done(len(info["sizes"]), info["member_bytes"])
    try:
        feed = start_stream(job, cfg, len(urls), work, resumed) if here else None
        streamed = feed is not None
        tasks = []
        if procs:
            # local final shards: the workers write their frames into them where the
            # stream places them (each byte written once; see pipelines.shard_worker).  A
            # piece then waits for its predecessors' places, so the pool must convert
            # in input order whatever order Beam's threads ask in: it gets every task.
            # Otherwise a resumed job first checks which pieces it has: nothing to start early
            direct = streamed and split_url(cfg.output)[0] == ""
            tasks = list(enumerate(urls))[resumed.next_piece:] if direct or not cfg.resume else []
            shard_pool.start(job, cfg, work, procs, tasks=tasks,
                             on_done=functools.partial(piece_done, feed=None if direct else feed, bar=bar),
                             place=feed.place if direct else None, blob=blob)
        if here:
            beam_sampler.shorten()  # the job's bundles end without a 0-200 ms wait
        # a pool converting every task for a stream in this process: the DoFns only collect
        run_args = opts.collecting_args(args, beam_args) if streamed and tasks else args
        p = beam.Pipeline(options=opts.make_pipeline_options(run_args))
        build(p, cfg, urls, list_rejects, work, job, streamed, resumed.next_piece, pooled=bool(tasks))
        with interrupts.translated():
            result = p.run()
            result.wait_until_finish()
        if streamed:
            finish_streamed(job, cfg, list_rejects, urls, work, resumed)
    finally:
        shard_stream.stop(job)
        shard_pool.stop(job)
        if bar is not None:
            bar.close()
        if sys.exc_info()[1] is not None:  # failed: only verified work stays (pipelines.cleanup)
            cleanup.after_failure(sys.exc_info()[1], work, cfg.output, cfg.store)
    manifest_path = finalize.companion(cfg.output, ".manifest.json")
    manifest = json.loads(get_store(manifest_path, cfg.store).read_bytes(manifest_path))
    counters = counters_of(result)
    counters["shards_rejected"] = counters.get("shards_rejected", 0) + len(list_rejects)
    for info in resumed.pieces:  # converted by the interrupted run
        counters["shards_resumed"] = counters.get("shards_resumed", 0) + 1
        for name, n in finalize.piece_counts(info).items():
            counters[name] = counters.get(name, 0) + n
    totals = manifest["totals"]
    rejected = manifest["rejects"]["count"]
    return ConvertResult(paths=[s["path"] for s in manifest["shards"]], manifest=manifest,
                         manifest_path=manifest_path,
                         rejects_path=finalize.companion(cfg.output, ".rejects.jsonl"),
                         totals=totals, counters=counters, seconds=time.time() - t0,
                         exit_code=0 if rejected <= cfg.max_rejects else 3)
