"""One input shard -> the elements of the streamed ``tf.data.Dataset`` (numpy values).

The per-shard work of ``Dataset.load(template)`` without ``path``, kept free of Beam and
TensorFlow so that it runs on the caller's threads (``pipelines.tfdata``) and in the
local worker processes of ``pipelines.inprocess.pool`` alike.  Every count goes to
``note(what, reject=None)``: ``note("records_read")``, ``note("records_yielded")``,
``note("records_filtered")``, or ``note("", reject)`` for a rejected record or shard (a
:class:`~transforms.tar.damage.ShardCorrupt` included: the stream cannot take back what
it already yielded, so it only reports it).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

from transforms.ops.element_spec import fit, plain_spec
from transforms.ops.leaves import datapoint
from transforms.ops.stages import FILTERED, Stages
from transforms.record_types import ELEMENT, KEY, Reject, is_reject
from transforms.stores import StoreConfig
from transforms.tar.damage import ShardCorrupt
from transforms.tar.fetch import read_shard

Note = Callable[..., None]


class ElementStage:
    """Last sample stage of in-memory mode: the record becomes one tf.data element."""

    def __init__(self, sels, spec=None, strict: bool = False):
        # plain leaves: the stage pickles into worker processes without TensorFlow
        self.sels, self.spec = sels, None if spec is None else plain_spec(spec)
        self.strict = strict  # the dtypes were inferred: a value must fit them (fit)
        self.light = all(
            getattr(s, "light", False) for s in sels
        )  # see transforms.ops.base.Op.light

    def __call__(self, record):
        el = datapoint(self.sels, record)
        return {
            KEY: record.get(KEY),
            ELEMENT: el if self.spec is None else fit(el, self.spec, self.strict),
        }

    def describe(self):
        return "Select[" + ", ".join(s.describe() for s in self.sels) + "]"


def shard_elements(
    url: str, store: Optional[StoreConfig], max_member: int, stages: Stages, note: Note
) -> Iterator[Any]:
    """The elements of the records of ``url`` that pass ``stages`` (whose last sample stage
    puts the element under :data:`~transforms.record_types.ELEMENT`), in shard order."""
    for item in read_shard(url, store, max_member):
        if isinstance(item, ShardCorrupt) or is_reject(item):
            note("", item)
            continue
        note("records_read")
        out = stages.run_samples(item)
        if out is FILTERED:
            note("records_filtered")
        elif is_reject(out):
            note("", out)
        else:
            note("records_yielded")
            yield out[ELEMENT]


def describe(reject: Reject) -> str:
    """The log line for a reject of the stream."""
    if isinstance(reject, ShardCorrupt):
        return (
            f"shard {reject.shard} failed its integrity check after its records were streamed: "
            f"{reject.reason}"
        )
    if reject.key is None:
        return f"reject {reject.shard}: {reject.reason}"
    return f"reject {reject.shard} {reject.key}: {reject.reason}"
