"""``Dataset.load(template)`` in memory, on this machine: the shards' elements streamed
in source order into a ``tf.data.Dataset``.

The shards convert on this process's threads or, with ops that do real work per record
and more than one worker and shard, in local worker processes
(``pipelines.inprocess.pool``), whose elements cross back in chunks.  The element spec is
given (``output_signature``) or inferred from a first element
(:mod:`pipelines.tfdata.spec_inference`); every element is fitted to it
(:mod:`transforms.ops.element_spec`), and what does not fit is a reject.  Rejects are
counted in :class:`LoadStats` and logged once the stream ends, one line per reason.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, Iterator, List, Optional, Sequence

from pipelines.tfdata import datapoints as dp
from pipelines.tfdata.inmemory import ordered_stream
from pipelines.tfdata.spec_inference import inferred_spec
from pipelines.tfdata.tfquiet import tensorflow
from transforms.ops.stages import Stages
from transforms.record_types import Reject
from transforms.shard_elements import ElementStage, shard_elements
from transforms.shard_elements import describe as describe_reject
from transforms.tar.sources import resolve

log = logging.getLogger("tar2tf")

CROSSING_BATCH = 64  # elements per Python -> tf.data crossing in the streamed dataset


class LoadStats:
    """Counts of the last in-memory ``load`` (thread-safe); ``rejects`` lists the Rejects."""

    def __init__(self):
        self._lock = threading.Lock()
        self.records_read = self.records_yielded = self.records_filtered = 0
        self.rejects: List[Reject] = []

    def add(self, what: str, reject: Optional[Reject] = None):
        with self._lock:
            if reject is not None:
                self.rejects.append(reject)
            else:
                setattr(self, what, getattr(self, what) + 1)

    @property
    def records_rejected(self) -> int:
        return sum(1 for r in self.rejects if r.counts_record)


def stages(ds, spec=None) -> Stages:
    """The sample stages of a streamed load of ``ds``: its own, its conversions, and the
    element stage (fitting elements to ``spec``, strictly if its dtypes were inferred)."""
    strict = getattr(ds, "_inferred_types", False)
    return Stages(
        tuple(ds.sample_stages)
        + tuple(ds.conversions)
        + (ElementStage(ds.selections, spec, strict=strict),)
    )


def elements(
    ds, template, num_workers: int, spec, prefetch: int, stats: Optional[LoadStats], report: bool
) -> Iterator[Any]:
    """``Dataset.elements``: the datapoints of ``ds`` under ``template``, as numpy, in
    source order; rejects logged when the stream ends (or is closed) if ``report``."""
    urls, list_rejects = resolve(template, ds.base, ds.store)
    stats = stats if stats is not None else LoadStats()
    return _reporting(
        _elements(ds, urls, list_rejects, num_workers, spec, prefetch, stats), stats, report
    )


def _elements(ds, urls, list_rejects, num_workers, spec, prefetch, stats) -> Iterator[Any]:
    def note(what, reject=None):
        stats.add(what, reject)

    for r in list_rejects:
        note("", r)
    shard_stages = stages(ds, spec)
    max_member = int(ds.max_member_size)

    def produce(url):  # on this process's threads
        return shard_elements(url, ds.store, max_member, shard_stages, note)

    from pipelines.job.kinds.tfrecord.config import ConvertConfig

    cfg = ConvertConfig(
        sources=urls,
        output="",
        sample_stages=shard_stages.sample_stages,
        store=ds.store,
        max_member_size=max_member,
    )  # what a worker process gets
    from pipelines.inprocess.driver import auto_processes

    procs = auto_processes(num_workers, len(urls), cfg.has_heavy_ops())
    if procs:
        return _elements_in_workers(cfg, urls, procs, prefetch, note, produce)
    return ordered_stream(urls, produce, num_workers, prefetch)


def _elements_in_workers(cfg, urls, procs, prefetch, note, produce) -> Iterator[Any]:
    from pipelines.inprocess import pool as shard_pool

    blob = shard_pool.pack(cfg, required=False)
    if blob is None:  # an op that cannot be pickled: this process's threads convert
        yield from ordered_stream(urls, produce, procs, prefetch)
        return
    with shard_pool.Pool(blob, "", procs) as pool:
        yield from ordered_stream(
            urls, lambda url: pool.elements(url, note, CROSSING_BATCH), procs, prefetch
        )


def stream_dataset(
    ds, template, num_workers, output_types, output_shapes, output_signature, prefetch
):
    """The ``tf.data.Dataset`` of a streamed load; sets ``ds.element_spec`` and, each
    time the dataset is iterated, a new ``ds.stats``."""
    tf = tensorflow()  # its devices initialized without a driverless machine's cuInit line

    spec = output_signature
    # dtypes taken from the first element (none given): later values must fit them
    ds._inferred_types = output_signature is None and output_types is None
    if spec is None:
        probe = LoadStats()
        first = ds.elements(template, 1, None, 1, probe, report=False)
        try:
            el = next(first)
        except StopIteration:
            log_rejects(probe.rejects)
            raise ValueError(
                f"no record under {template!r} could be converted (all rejected or none "
                f"found); nothing to infer the element spec from"
            ) from None
        finally:
            first.close()
        spec = inferred_spec(el, ds.conversions, ds.selections, output_shapes, output_types)
    ds.element_spec = spec
    ds.stats = LoadStats()

    def gen():
        ds.stats = LoadStats()
        yield from ds.elements(template, num_workers, spec, prefetch, ds.stats)
        st = ds.stats
        if not st.records_yielded and st.records_rejected:
            # an empty dataset from records that exist is a mistake (an element spec the
            # data cannot fit, an op that fails on everything), not something to train on
            first = next(r for r in st.rejects if r.counts_record)
            raise ValueError(
                f"every record under {template!r} was rejected ({st.records_rejected}); "
                f"the first: {describe_reject(first)}"
            )

    if dp.fixed_shapes(spec):
        # tf.data calls back into Python once per generator item, a cost per item above
        # that of decoding a small JPEG; with every shape known, items cross in stacked
        # batches and are unbatched in TensorFlow -- same elements
        return tf.data.Dataset.from_generator(
            lambda: dp.stacked(gen(), spec, CROSSING_BATCH),
            output_signature=dp.batched_spec(spec),
        ).unbatch()
    return tf.data.Dataset.from_generator(gen, output_signature=spec)


def _reporting(items: Iterator[Any], stats: LoadStats, report: bool) -> Iterator[Any]:
    start = len(stats.rejects)
    try:
        yield from items
    finally:
        if report:
            log_rejects(stats.rejects[start:])


def log_rejects(rejects: Sequence[Reject]) -> None:
    """One warning per reason (stage and kind, as the CLI's report groups them): its count
    and the first reject of it, not one line per record."""
    for line in report_lines(rejects):
        log.warning("%s", line)


def report_lines(rejects: Sequence[Reject]) -> List[str]:
    groups: Dict[str, List[Any]] = {}
    for r in rejects:
        g = groups.setdefault(f"{r.stage}: {r.kind}", [0, r])
        g[0] += 1
    return [
        f"{n} rejected: {reason} (e.g. {describe_reject(first)})"
        for reason, (n, first) in groups.items()
    ]
