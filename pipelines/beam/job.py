"""The lifecycle's Beam driver (``pipelines.job.lifecycle``): one composite transform per
job, and the run of a job on any runner.

:class:`ConvertJob` is the graph, the same for both formats; its steps are named by the
job's kind (:data:`STEPS`; TFRecord's names in brackets)::

    units [Shards]:          Create(chunks) + read        one element per unit, read from
                                                          the files the job staged
    spread_units [SpreadShards]                           names, not bytes, cross the shuffle
    convert [ConvertShard]:  unit -> summary              the unit's work files written in
                                                          the work directory
    gather_units [GatherPieces]: [summary]                counts, never one entry per record
    plan [Plan]:             [summary] -> write tasks     streamed, each when it is complete
    spread_writes [SpreadWrites]
    write [WriteShard]:      task -> row                  one output file, atomically
    gather_rows [GatherShards] + finish [Manifest]        stale outputs gone, manifest last

A format's transform may replace the plan and write steps (:meth:`ConvertJob.plan_and_write`:
the TFRecord shuffle).  Every step does its work itself and looks up nothing in the
launching process; the graph holds no list that grows with the input: the units, inputs
and listing rejects are staged as files in the work directory (``pipelines.job.staging``),
and the ``Create`` names only their chunks.  A worker that dies has its bundle run again,
and a runner may run a bundle twice: each attempt of a unit writes work files of its own
(``pipelines.job.workfiles``), the later steps read those its committed summary names, and
an output file is renamed into place only when complete, so a retry changes no byte.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Callable, Dict, List, Optional, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from pipelines.beam import options as opts
from pipelines.beam import worker_logs
from pipelines.beam.distribute import gather, spread
from pipelines.job import lifecycle, progress, staging
from pipelines.job.counts import COUNTERS
from pipelines.job.element_coding import Pickled, carried
from pipelines.job.lifecycle import ConvertResult, Job, Kind

log = logging.getLogger("tar2tf")
NS = "tar2tf"

# the names of the graph's steps by kind (``Kind.name``), for a job's logs and a runner's
# UI: a runner detail, so they live here and not in the kinds
STEPS: Dict[str, Dict[str, str]] = {
    "convert": {
        "units": "Shards",
        "spread_units": "SpreadShards",
        "convert": "ConvertShard",
        "gather_units": "GatherPieces",
        "plan": "Plan",
        "spread_writes": "SpreadWrites",
        "write": "WriteShard",
        "gather_rows": "GatherShards",
        "finish": "Manifest",
    },
    "pcr": {
        "units": "Units",
        "spread_units": "SpreadUnits",
        "convert": "ConvertUnit",
        "gather_units": "GatherUnits",
        "plan": "PlanRecords",
        "spread_writes": "SpreadRecords",
        "write": "WriteRecord",
        "gather_rows": "GatherRecords",
        "finish": "Finish",
    },
}


class ConvertUnitFn(beam.DoFn):
    """One unit -> its summary (``lifecycle.convert_unit``), counted in the ``tar2tf`` counters.

    A unit's requests follow one another (its shard's GET, then its work files' PUTs), so
    over a bucket a worker converting one unit at a time has one request in flight.  Units
    that read or write a bucket are converted :data:`AT_ONCE` at a time on threads (their
    summaries leave in the order they finish); units of local files stay on the bundle's
    thread, as CPU-bound work gains nothing from threads.  The counters are counted on
    the bundle's thread, where Beam's metrics live."""

    AT_ONCE = 8

    def __init__(self, kind: Kind, cfg, work: str):
        self.kind, self.cfg, self.work = kind, cfg, work
        self.c = {n: Metrics.counter(NS, n) for n in COUNTERS}

    def setup(self):
        self.stages = self.kind.stages(self.cfg)
        self.pool = None

    def start_bundle(self):
        self.pending: List[Future] = []

    def _convert(self, unit):
        return lifecycle.convert_unit(self.kind, self.cfg, self.work, unit, self.stages)

    def process(self, unit):
        if not lifecycle.reaches_bucket(unit, self.work):
            yield self._counted(*self._convert(unit))
            return
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.AT_ONCE, thread_name_prefix="tar2tf-unit")
        self.pending.append(self.pool.submit(self._convert, unit))
        if len(self.pending) >= self.AT_ONCE:
            done, _ = wait(self.pending, return_when=FIRST_COMPLETED)
            for f in done:
                self.pending.remove(f)
                yield self._counted(*f.result())

    def finish_bundle(self):
        pending, self.pending = self.pending, []
        for f in pending:
            yield WindowedValue(self._counted(*f.result()), MIN_TIMESTAMP, [GlobalWindow()])

    def teardown(self):
        if getattr(self, "pool", None) is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def _counted(self, info, reused):
        if reused:
            self.c["shards_resumed"].inc()
        for name, n in self.kind.counts(info).items():
            if n:
                (self.c[name] if name in self.c else Metrics.counter(NS, name)).inc(n)
        # its keys may be surrogate-escaped bytes (pipelines.job.element_coding)
        return carried(info)


def _plan(summaries, kind: Kind, cfg, held=None):
    # the output's lock read again before the first final shard is written
    lifecycle.check_held(held, cfg.store)
    return kind.plan(summaries, cfg)


def _write(task, kind: Kind, cfg, held=None):
    # the output's lock read again before each final shard is renamed into place: a job
    # that lost it (its launcher gone, its lock taken over) writes nothing final
    lifecycle.check_held(held, cfg.store)
    return kind.write(task, cfg)


def _units(chunk: int, work: str, store):
    return staging.read_units(work, chunk, store)


def _finish(rows, summaries, kind: Kind, cfg, work: str, extras, held, **computed):
    """``Kind.finish`` as the graph's last step, once the output's lock is read again
    (``lifecycle.finish_on``): yields the manifest.  ``computed``: what earlier steps of
    the format's graph worked out for it (:meth:`ConvertJob.finish_inputs`), added to
    its extras."""
    ended = lifecycle.Ended(
        rows,
        summaries,
        staging.read_list_rejects(work, cfg.store),
        staging.read_inputs(work, cfg.store),
        {**extras, **computed},
    )
    yield Pickled(lifecycle.finish_on(held, kind, cfg, ended))


class ConvertJob(beam.PTransform):
    """A job's whole graph (the module docstring), applied to the pipeline's start."""

    def __init__(self, job: Job):
        super().__init__()
        self.kind, self.cfg, self.work = job.kind, staging.for_workers(job.cfg), job.work
        self.chunks = staging.chunk_count(len(job.units))
        self.extras = job.extras
        self.held = job.held  # (lock URL, token): checked by the last step, on a worker

    def step(self, name: str) -> str:
        return STEPS[self.kind.name][name]

    def expand(self, pbegin):
        units = (
            pbegin
            | self.step("units") >> beam.Create(range(self.chunks), reshuffle=False)
            | f"{self.step('units')}Read" >> beam.FlatMap(_units, self.work, self.cfg.store)
        )
        units = spread(units, self.step("spread_units"), self.kind.unit_index)
        summaries = units | self.step("convert") >> beam.ParDo(
            ConvertUnitFn(self.kind, self.cfg, self.work)
        )
        all_summaries = gather(summaries, self.step("gather_units"))
        rows = self.plan_and_write(summaries, all_summaries)
        return gather(rows, self.step("gather_rows")) | self.step("finish") >> beam.FlatMap(
            _finish,
            beam.pvalue.AsSingleton(all_summaries),
            self.kind,
            self.cfg,
            self.work,
            self.extras,
            self.held,
            **{
                name: beam.pvalue.AsSingleton(pcoll)
                for name, pcoll in self.finish_inputs(summaries).items()
            },
        )

    def finish_inputs(self, summaries) -> Dict[str, beam.PCollection]:
        """One-element PCollections the finish step gets by name in its extras (the
        TFRecord graph's duplicate-key scan); none here."""
        return {}

    def plan_and_write(self, summaries, all_summaries):
        """The rows of the written output files: the plan on one worker, the writes spread."""
        plan = all_summaries | self.step("plan") >> beam.FlatMap(
            _plan, self.kind, self.cfg, self.held
        )
        return spread(plan, self.step("spread_writes"), self.kind.task_index) | self.step(
            "write"
        ) >> beam.Map(_write, self.kind, self.cfg, self.held)


def counters_of(result) -> Dict[str, int]:
    """The ``tar2tf`` Beam counters of a finished pipeline result, by name."""
    for attempt in range(3):
        out: Dict[str, int] = {}
        try:
            for c in result.metrics().query(MetricsFilter().with_namespace(NS))["counters"]:
                val = c.committed if c.committed is not None else c.attempted
                out[c.key.metric.name] = out.get(c.key.metric.name, 0) + int(val or 0)
            return out
        except Exception as e:
            # a job service's answer can fail once on a loaded machine (the job has ended
            # and the service is winding down); the report's cross-check needs the counters
            if attempt == 2:
                log.warning("runner reported no metrics: %s", e)
            else:
                time.sleep(1)
    return {}


def _wait(result) -> None:
    """The runner's job waited for; if this process is stopped meanwhile (Ctrl-C, SIGTERM:
    ``launch.cli``) or the wait fails, the job is cancelled first, so that it does not
    write on once the output's lock is released."""
    try:
        result.wait_until_finish()
    except BaseException:
        try:
            result.cancel()
        except Exception as e:  # a job already ended, a runner that cannot cancel
            log.debug("could not cancel the runner's job: %s", e)
        raise


class BeamDriver(lifecycle.Driver):
    """The lifecycle's Beam driver: ``transform(job)`` as the job's graph, on the runner
    ``beam_args`` choose (default: Beam's local runner, one worker process per core,
    ``pipelines.beam.options``)."""

    def __init__(
        self, beam_args: Optional[Sequence[str]], transform: Callable[[Job], beam.PTransform]
    ):
        self.beam_args, self.transform = beam_args, transform

    def build(self, job: Job) -> None:
        # never more worker processes than units: one more only starts and waits
        workers = job.cfg.processes or os.cpu_count() or 1
        args = opts.effective_args(self.beam_args, workers=max(1, min(workers, len(job.units))))
        # built before the job starts: ops that cannot be pickled stop the job before it
        # leaves anything in its work directory
        worker_logs.install()
        self.pipeline = opts.make_pipeline(args)
        _ = self.pipeline | self.transform(job)

    def execute(self, job: Job):
        cfg = job.cfg
        # the graph names only the staged files' chunks (pipelines.job.staging)
        staging.stage(job.work, job.units, job.inputs, job.list_rejects, cfg.store)
        with progress.watch(
            job.work, cfg.store, len(job.units), cfg.progress, every=cfg.progress_every
        ) as bar:
            result = self.pipeline.run()
            _wait(result)
            counters = counters_of(result)
            counters["shards_rejected"] = counters.get("shards_rejected", 0) + len(job.list_rejects)
            if bar is not None:
                bar.complete(counters.get("records_read", 0), counters.get("member_bytes_read", 0))
        return counters, None


def run(
    kind: Kind,
    cfg,
    beam_args: Optional[Sequence[str]],
    transform: Callable[[Job], beam.PTransform],
) -> ConvertResult:
    """The job's lifecycle (``lifecycle.run``) with ``transform(job)`` as its graph, on
    the runner ``beam_args`` choose."""
    return lifecycle.run(kind, cfg, BeamDriver(beam_args, transform))
