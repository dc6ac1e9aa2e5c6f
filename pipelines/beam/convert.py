"""The tar -> TFRecord Beam graph and its ``convert()`` entry point.

The graph is the same on every runner (Beam's local runner, Flink, Dataflow), and its DoFns
do the work themselves; nothing in it reaches back to the launching process::

    Shards:        Create[(index, url)]                 one element per input shard
    SpreadShards:  (index, url) by index                names, not bytes, cross the shuffle
    ConvertShard:  (index, url) -> piece summary        fetch, tar, ops, encode; the piece's
                                                        frames, record file and sidecar in
                                                        the work directory
    GatherPieces:  [piece summary]                      counts, never one entry per record
    Plan:          [piece summary] -> shard tasks       greedy packing, streamed over each
                                                        piece's sizes (pipelines.job.plan)
    SpreadWrites:  shard task by index
    WriteShard:    shard task -> shard row              copy byte ranges, atomic rename
    GatherShards + Manifest                             stale outputs gone, manifest + rejects

A worker that dies has its bundle run again: a piece is rewritten whole under the same
name (its sidecar last), and a final shard is renamed into place only when complete, so a
retry changes no byte.  With ``shuffle=True`` the records travel through a GroupByKey
keyed by final shard instead (``pipelines.beam.shuffle``).
"""

from __future__ import annotations

import logging
from operator import itemgetter
from typing import Dict, List, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

from pipelines.beam import options as opts
from pipelines.beam import worker_logs
from pipelines.beam.distribute import gather, spread
from pipelines.job import arrayrecordfile, finalize, progress
from pipelines.job.config import ConvertConfig, OutputExistsError
from pipelines.job.element_coding import Pickled
from pipelines.job.setup import (
    ConvertResult,
    cleaned_on_failure,
    finish_job,
    plan_shards,
    prepare,
    record_job,
    result_of,
    retyped,
)
from pipelines.job.shard import convert_shard, load_verified_piece, without_sizes
from transforms.record_types import Reject

__all__ = ["ConvertConfig", "ConvertResult", "OutputExistsError", "build", "convert", "counters_of"]

log = logging.getLogger("tar2tf")
NS = "tar2tf"
COUNTERS = (
    "shards_read",
    "shards_resumed",
    "records_read",
    "records_written",
    "records_rejected",
    "records_filtered",
    "shards_rejected",
    "bytes_written",
    "member_bytes_read",
    "members_skipped",
)


class ConvertShardFn(beam.DoFn):
    """One input shard -> its piece (``pipelines.job.shard.convert_shard``), or, with
    ``resume``, the verified piece an interrupted run left."""

    def __init__(self, cfg: ConvertConfig, work: str):
        self.cfg, self.work = cfg, work
        self.c = {n: Metrics.counter(NS, n) for n in COUNTERS}

    def setup(self):
        self.stages = self.cfg.stages()

    def process(self, task: Tuple[int, str]):
        index, url = task
        info = load_verified_piece(index, self.work, self.cfg.store) if self.cfg.resume else None
        if info is not None:
            self.c["shards_resumed"].inc()
        else:
            info = convert_shard(index, url, self.work, self.cfg, self.stages)
        for name, n in finalize.piece_counts(info).items():
            if n:
                (self.c[name] if name in self.c else Metrics.counter(NS, name)).inc(n)
        # its summary only (the sizes stay in its record file); its shard URL may hold
        # surrogate-escaped bytes (pipelines.job.element_coding)
        yield Pickled(without_sizes(info))


def build(
    p: beam.Pipeline, cfg: ConvertConfig, urls: List[str], list_rejects: List[Reject], work: str
):
    """The job's graph (see the module docstring); its last step writes the manifest."""
    tasks = spread(
        p | "Shards" >> beam.Create(list(enumerate(urls)), reshuffle=False),
        "SpreadShards",
        itemgetter(0),
    )
    pieces = tasks | "ConvertShard" >> beam.ParDo(ConvertShardFn(cfg, work))
    all_pieces = gather(pieces, "GatherPieces")
    if cfg.shuffle:
        from pipelines.beam.shuffle import shuffled_shards

        shards = shuffled_shards(pieces, all_pieces, cfg)
    else:
        plan = all_pieces | "Plan" >> beam.FlatMap(plan_shards, cfg)
        shards = spread(plan, "SpreadWrites", itemgetter("index")) | "WriteShard" >> beam.Map(
            arrayrecordfile.shard_writer(cfg.format), cfg.store, cfg.dali_index
        )
    return gather(shards, "GatherShards") | "Manifest" >> beam.FlatMap(
        finish_job, beam.pvalue.AsSingleton(all_pieces), cfg, list_rejects, urls
    )


def counters_of(result) -> Dict[str, int]:
    """The ``tar2tf`` Beam counters of a finished pipeline result, by name."""
    out: Dict[str, int] = {}
    try:
        for c in result.metrics().query(MetricsFilter().with_namespace(NS))["counters"]:
            val = c.committed if c.committed is not None else c.attempted
            out[c.key.metric.name] = out.get(c.key.metric.name, 0) + int(val or 0)
    except Exception as e:
        log.warning("runner reported no metrics: %s", e)
    return out


def convert(
    cfg: ConvertConfig,
    beam_args: Optional[Sequence[str]] = None,
    flag_names: Tuple[str, str] = ("--overwrite", "--resume"),
) -> ConvertResult:
    """Run the conversion as a Beam job (see the module docstring); ``beam_args`` choose
    the runner (default: Beam's local runner, one worker process per core,
    ``pipelines.beam.options``).  Raises ``OutputExistsError``, whose message names the
    overwrite / resume options as ``flag_names`` spell them."""
    job = prepare(cfg, flag_names)
    try:
        args = opts.effective_args(beam_args, workers=cfg.processes)
        # built before the job's record is written: ops that cannot be pickled stop the
        # job before it leaves anything in its work directory
        worker_logs.install()
        p = opts.make_pipeline(args)
        build(p, cfg, job.urls, job.list_rejects, job.work)
        record_job(cfg, job.urls, job.work)
    except BaseException:
        # nothing ran yet, so there is nothing to clean up, but the output's lock is held
        # since prepare(): left to the garbage collector, it would refuse the next job
        # of a long-lived process (a notebook) until the process ends
        if job.lock is not None:
            job.lock.release()
        raise
    with (
        cleaned_on_failure(job),
        progress.watch(job.work, cfg.store, len(job.urls), cfg.progress) as bar,
    ):
        result = p.run()
        result.wait_until_finish()
        counters = counters_of(result)
        counters["shards_rejected"] = counters.get("shards_rejected", 0) + len(job.list_rejects)
        res = result_of(job, counters)
        if bar is not None:
            bar.complete(res.totals["records_read"], counters.get("member_bytes_read", 0))
    again = retyped(cfg, res.manifest)
    return res if again is None else convert(again, beam_args, flag_names)
