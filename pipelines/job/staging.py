"""A job's unit list, inputs and listing rejects, staged as files in its work directory
for a graph whose size does not grow with the input.

A Beam graph that carries its units in a ``Create`` -- and its inputs and listing rejects
as arguments of its last step -- pickles them into the pipeline: at a million input
shards that is tens of MB of pipeline proto, built, held and sent by the launcher, and
shipped to every worker.  Instead the launcher writes them here once (:func:`stage`, after
``lifecycle.start``) and the graph names only chunk numbers: a worker reads its chunk
of units (:func:`read_units`), the finish step the inputs and rejects
(:func:`read_inputs`, :func:`read_list_rejects`).

The files are JSON lines: one unit, input or reject a line.
They are not verified work: a failed job's clean-up removes them, and every run --
``--resume`` included -- stages them again (the same job stages the same lines).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, Iterator, List, Optional

from pipelines.job import inflight
from transforms.record_types import Reject
from transforms.stores import StoreConfig, get_store, join

UNITS_PER_CHUNK = 10_000  # ~1 MB of JSON for shard URLs: a worker reads one at a time
INPUTS = "staged-inputs.jsonl"
LIST_REJECTS = "staged-listing-rejects.jsonl"


def chunk_count(units: int) -> int:
    """The number of unit chunks of a job with ``units`` units (one, when there are none,
    so that the graph's shape does not depend on an empty input)."""
    return max(1, -(-units // UNITS_PER_CHUNK))


def units_url(work: str, chunk: int) -> str:
    return join(work, f"staged-units-{chunk:06d}.jsonl")


def for_workers(cfg):
    """The config as the graph carries it to every step: without its ``sources`` (a list
    of a million shard URLs is the job's largest option), which only the launcher reads,
    to resolve the units staged here."""
    if isinstance(getattr(cfg, "sources", None), str):
        return cfg
    return dataclasses.replace(cfg, sources=())


def _lines(items: Iterable[Any]) -> bytes:
    # ensure_ascii keeps the surrogate escapes of a non-UTF-8 local path (element_coding)
    return "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in items).encode()


def stage(
    work: str,
    units: List[Any],
    inputs: List[str],
    list_rejects: List[Reject],
    config: Optional[StoreConfig] = None,
) -> None:
    """Write the job's units (in chunks), inputs and listing rejects into ``work``."""
    store = get_store(join(work, INPUTS), config)

    def put(c: int) -> None:
        chunk = units[c * UNITS_PER_CHUNK : (c + 1) * UNITS_PER_CHUNK]
        store.write_bytes(units_url(work, c), _lines(list(u) for u in chunk))

    # a hundred chunks at a million units: uploads to a bucket, many at once
    inflight.each(put, range(chunk_count(len(units))))
    store.write_bytes(join(work, INPUTS), _lines(inputs))
    store.write_bytes(join(work, LIST_REJECTS), _lines(r.to_dict() for r in list_rejects))


def _read(url: str, config: Optional[StoreConfig]) -> Iterator[Any]:
    data = get_store(url, config).read_bytes(url)
    for line in data.decode().splitlines():
        yield json.loads(line)


def read_units(work: str, chunk: int, config: Optional[StoreConfig] = None) -> Iterator[Any]:
    """Chunk ``chunk``'s units, as tuples (what a kind's units are)."""
    for u in _read(units_url(work, chunk), config):
        yield tuple(u)


def read_inputs(work: str, config: Optional[StoreConfig] = None) -> List[str]:
    return list(_read(join(work, INPUTS), config))


def read_list_rejects(work: str, config: Optional[StoreConfig] = None) -> List[Reject]:
    return [Reject.from_dict(d) for d in _read(join(work, LIST_REJECTS), config)]
