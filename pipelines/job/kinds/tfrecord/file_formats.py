"""The file formats a TFRecord job's final shards can have: one adapter each, the seam
between the job (pieces, plan, manifest: the same for every format) and the file.

Pieces are TFRecord files whatever the format, so the plan cuts every format's shards at
the same records; an adapter says how one planned shard becomes a file, and what else
its files allow.  Adding a format is adding an adapter here (and its writer module)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional

from transforms.stores import StoreConfig


@dataclasses.dataclass(frozen=True)
class FileFormat:
    name: str  # the ``format`` option's value (``ConvertConfig.format``, ``--format``)
    # (task, store config, dali_index) -> the shard's manifest row, written atomically;
    # imported when a shard is written, so a job of another format never loads it
    writer: Callable[[], Callable[..., Dict[str, Any]]]
    # the shards can be written while pieces convert, in input order (the in-process
    # driver's stream): TFRecord framing, copied record by record
    streams: bool
    # the shuffled graph's writer (``pipelines.beam.shuffle``) writes this format
    shuffles: bool
    # a DALI index can describe its files (TFRecord offsets)
    dali_index: bool
    why_not: str = ""  # what a refused shuffle or DALI index is told

    def write(self, task, config: Optional[StoreConfig] = None, dali_index: bool = False):
        return self.writer()(task, config, dali_index)


def _tfrecord_writer():
    from pipelines.job.kinds.tfrecord import shardfile

    return shardfile.write_shard


def _array_record_writer():
    from pipelines.job.kinds.tfrecord import arrayrecordfile

    return arrayrecordfile.write_array_record_shard


ADAPTERS: Dict[str, FileFormat] = {
    f.name: f
    for f in (
        FileFormat("tfrecord", _tfrecord_writer, streams=True, shuffles=True, dali_index=True),
        FileFormat(
            "array_record",
            _array_record_writer,
            streams=False,
            shuffles=False,
            dali_index=False,
            why_not="Grain shuffles an ArrayRecord dataset by index as it reads, and a DALI "
            "index describes TFRecord files",
        ),
    )
}
FORMATS = tuple(ADAPTERS)


def of(name: str) -> FileFormat:
    """The adapter of ``name``; ``ValueError`` naming the formats there are."""
    if name not in ADAPTERS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {name!r}")
    return ADAPTERS[name]


def checked(name: str, shuffle: bool, dali_index: bool) -> FileFormat:
    """The adapter of ``name``, refusing the options its files do not allow."""
    fmt = of(name)
    options = (("shuffle", shuffle, fmt.shuffles), ("dali_index", dali_index, fmt.dali_index))
    refused = [option for option, asked, allowed in options if asked and not allowed]
    if refused:
        raise ValueError(
            f"format {fmt.name} takes neither shuffle nor dali_index ({fmt.why_not}); "
            f"given: {', '.join(refused)}"
        )
    return fmt
