"""User and library stages between the tar reader and the sink (go-tfdata's pipeline).

* A *sample stage* is a callable ``record -> record | None``.  ``None`` filters the record
  out (counted as ``filtered``).  Ops from ``transforms.ops`` are sample stages.
* ``to_example`` turns the final record into a ``tf.train.Example`` (or serialized bytes);
  default: :func:`transforms.tfrecord.example.record_to_example` with the type map.
* An *example stage* is a callable ``tf.train.Example -> tf.train.Example | None``.

Any exception inside a stage rejects that one record with the stage and the reason;
it never stops the shard.  This module is the one place that rule is written.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple, Union

from transforms.record_types import KEY, SHARD, Record, Reject, is_reject
from transforms.tfrecord import example as ex
from transforms.tfrecord import schema as exs

FILTERED = object()


def stage_name(stage: Any) -> str:
    r = getattr(stage, "describe", None)
    if callable(r):
        return r()
    name = getattr(stage, "__name__", None) or type(stage).__name__
    return name


@dataclasses.dataclass
class Stages:
    sample_stages: Sequence[Callable[[Record], Optional[Record]]] = ()
    to_example: Optional[Callable[[Record], Any]] = None
    example_stages: Sequence[Callable[[Any], Any]] = ()
    type_map: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def run_samples(self, record: Record) -> Union[Record, Reject, object]:
        """Apply sample stages; return the record, a Reject, or FILTERED."""
        shard, key = record.get(SHARD, ""), record.get(KEY)
        for st in self.sample_stages:
            try:
                out = st(record)
            except Exception as e:
                return Reject(shard, key, "op", f"{stage_name(st)} failed: {_msg(e)}")
            if out is None:
                return FILTERED
            if not isinstance(out, dict):
                return Reject(
                    shard,
                    key,
                    "op",
                    f"{stage_name(st)} failed: returned {type(out).__name__}, not a record",
                )
            out.setdefault(KEY, key)
            out.setdefault(SHARD, shard)
            record = out
        return record

    def encode(self, record: Record) -> Union[bytes, Reject, object]:
        """Record -> serialized Example (after example stages), a Reject, or FILTERED."""
        return self._encode(record, False)[0]

    def _encode(
        self, record: Record, want_schema: bool, parts: bool = False
    ) -> Tuple[Union[bytes, List[bytes], Reject, object], Optional[dict]]:
        shard, key = record.get(SHARD, ""), record.get(KEY)
        try:
            if not self.example_stages:
                return ex.encode_with_schema(
                    record, self.type_map, self.to_example, want_schema, parts
                )
            example = (
                self.to_example(record)
                if self.to_example is not None
                else ex.record_to_example(record, self.type_map)
            )
            if isinstance(example, (bytes, bytearray)):
                from tensorflow.core.example import example_pb2

                example = example_pb2.Example.FromString(bytes(example))
        except Exception as e:
            return Reject(shard, key, "encode", f"encode failed: {_msg(e)}"), None
        for st in self.example_stages:
            try:
                example = st(example)
            except Exception as e:
                return Reject(shard, key, "op", f"{stage_name(st)} failed: {_msg(e)}"), None
            if example is None:
                return FILTERED, None
        try:
            data = ex.serialize(example)
            return ([data] if parts else data), (
                exs.schema_of_message(example) if want_schema else None
            )
        except Exception as e:
            return Reject(shard, key, "encode", f"encode failed: {_msg(e)}"), None

    def process(self, record: Record) -> Union[bytes, Reject, object]:
        return self.process_with_schema(record, False)[0]

    def process_with_schema(
        self, record: Record, want_schema: bool = True, parts: bool = False
    ) -> Tuple[Union[bytes, List[bytes], Reject, object], Optional[dict]]:
        """:meth:`process`, plus the written Example's schema (``example_schema.schema_of``)
        taken from the message before serialization: None unless bytes are returned.
        ``parts=True``: the Example as a list of bytes to concatenate
        (``example.encode_with_schema``), for a writer that frames it in one copy."""
        out = self.run_samples(record)
        if out is FILTERED or is_reject(out):
            return out, None
        return self._encode(out, want_schema, parts)


def _msg(e: BaseException) -> str:
    text = str(e).strip() or e.__class__.__name__
    return f"{e.__class__.__name__}: {text}"
