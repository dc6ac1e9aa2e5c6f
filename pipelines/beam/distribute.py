"""Moving elements between workers: gather a PCollection into one list; spread one.

``gather``: collect a whole PCollection into a one-element PCollection holding a list.

``beam.combiners.ToList`` expands into a ``CombineGlobally`` (a combine per key, a
default-value ``Create`` and a side-input join): about 0.1 s of graph construction and
several extra stages per use on the local runner, for what is here a few hundred small
dicts (one per input shard or output file).  A one-element ``Create`` that reads the
PCollection as a list side input does the same job with two steps; Beam materializes a
side input in full before its consumer runs, on every runner.  Element order is not
defined (as with ``ToList``): callers sort.

``spread``: ``beam.Reshuffle`` without its timestamp and window bookkeeping, which these
pipelines do not use (global window, no timestamps): each element is keyed by its own
index, grouped, and released, so that the runner can hand the groups to different workers.
"""

from __future__ import annotations

from typing import Any, Callable

import apache_beam as beam


def _as_list(_, items):
    return list(items)


def gather(pcoll: beam.PCollection, label: str) -> beam.PCollection:
    """``pcoll`` as a single list element, under the step name ``label``."""
    return (
        pcoll.pipeline
        | f"{label}Start" >> beam.Create([None], reshuffle=False)
        | label >> beam.Map(_as_list, beam.pvalue.AsList(pcoll))
    )


def _values(kv):
    return kv[1]


def spread(pcoll: beam.PCollection, label: str, key: Callable[[Any], int]) -> beam.PCollection:
    """The elements of ``pcoll`` regrouped by ``key`` (a distinct int per element, e.g.
    ``operator.itemgetter(0)`` of an ``(index, url)`` task; picklable), so that the next
    steps run in parallel over them."""
    return (
        pcoll
        | f"{label}Key" >> beam.WithKeys(key)
        | f"{label}Group" >> beam.GroupByKey()
        | label >> beam.FlatMap(_values)
    )
