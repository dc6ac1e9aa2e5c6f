"""One input shard -> one piece of TFRecord frames + its sidecar, and the job's options.

This is the per-shard work of the TFRecord conversion, kept free of Beam so that it can
run anywhere: in a Beam DoFn (``pipelines.convert``), in the in-process driver
(``pipelines.local_convert``) and in the local worker processes of ``--processes``
(``pipelines.shard_pool``), which then start without importing Beam.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from pipelines import workfiles
from transforms import digests, example as ex
from transforms.fetch import read_shard
from transforms.records import Reject, is_reject
from transforms.sizes import parse_size
from transforms.stages import FILTERED, Stages, stage_name
from transforms.stores import StoreConfig, get_store, join
from transforms.tar_records import DEFAULT_MAX_MEMBER_SIZE, ShardCorrupt, TarStats
from transforms.tfrecord import frame


class OutputExistsError(RuntimeError):
    """Output files already exist and neither overwrite nor resume was asked for."""


@dataclasses.dataclass
class ConvertConfig:
    sources: Union[str, Sequence[str]]
    output: str
    base: Optional[str] = None
    max_shard_size: Union[None, int, str] = None
    records_per_shard: Optional[int] = None
    type_map: Optional[Dict[str, str]] = None
    sample_stages: Sequence[Callable] = ()
    record_to_example: Optional[Callable] = None
    example_stages: Sequence[Callable] = ()
    max_member_size: Union[int, str] = DEFAULT_MAX_MEMBER_SIZE
    max_rejects: int = 0
    overwrite: bool = False
    resume: bool = False
    store: StoreConfig = dataclasses.field(default_factory=StoreConfig)
    dali_index: bool = False
    shuffle: bool = False
    seed: int = 0
    progress: Optional[bool] = None
    work_dir: Optional[str] = None
    # convert shards in this many local worker processes (pipelines.shard_pool); 0: on the
    # runner's own threads; None: automatic (pipelines.options.pool_size).  Not an output
    # option: the bytes are the same either way.
    processes: Optional[int] = None

    def stages(self) -> Stages:
        from transforms.gostages import as_stage  # user stages may be Beam DoFns
        return Stages(tuple(as_stage(s) for s in self.sample_stages), self.record_to_example,
                      tuple(as_stage(s) for s in self.example_stages), ex.parse_type_map(self.type_map))

    def has_heavy_ops(self) -> bool:
        """Whether records go through ops that do real work per record (decode, resize,
        user functions...), not only light ones that pick entries (``Op.light``)."""
        stages = list(self.sample_stages) + [self.record_to_example] + list(self.example_stages)
        return any(s is not None and not getattr(s, "light", False) for s in stages)

    def describe(self) -> Dict[str, Any]:
        """The options as they enter the manifest (callables by name)."""
        return {"max_shard_size": parse_size(self.max_shard_size), "records_per_shard": self.records_per_shard,
                "type_map": ex.parse_type_map(self.type_map),
                "sample_stages": [stage_name(s) for s in self.sample_stages],
                "record_to_example": stage_name(self.record_to_example) if self.record_to_example else None,
                "example_stages": [stage_name(s) for s in self.example_stages],
                "max_member_size": parse_size(self.max_member_size), "max_rejects": self.max_rejects,
                "dali_index": self.dali_index, "shuffle": self.shuffle,
                "seed": self.seed if self.shuffle else None}


def convert_shard(index: int, url: str, work: str, cfg: ConvertConfig, stages: Stages) -> Dict[str, Any]:
    """Convert one input shard into ``piece-<index>.tfrecord`` + its JSON sidecar."""
    piece = join(work, f"piece-{index:06d}.tfrecord")
    store = get_store(piece, cfg.store)
    stats = TarStats()
    sizes: List[int] = []
    rejects: List[Dict[str, Any]] = []
    schema: Dict[str, Any] = {}
    last_schema: Optional[Dict[str, Any]] = None
    read = filtered = 0
    digest = digests.new("crc32c")
    keys: List[str] = []
    corrupt: Optional[Reject] = None
    with store.open_write(piece, durable=False) as f:  # scratch: resume re-hashes it
        for item in read_shard(url, cfg.store, parse_size(cfg.max_member_size), stats):
            if isinstance(item, ShardCorrupt):
                corrupt = item
                continue
            if is_reject(item):
                rejects.append(item.to_dict())
                read += item.counts_record
                continue
            read += 1
            out, rec_schema = stages.process_with_schema(item)
            if out is FILTERED:
                filtered += 1
                continue
            if is_reject(out):
                rejects.append(out.to_dict())
                continue
            data = frame(out)
            f.write(data)
            digest.update(data)
            sizes.append(len(data))
            keys.append(item["__key__"])
            # every record enters the schema, so `tar2tf verify` can hold each Example to it
            # without false alarms on features that appear late; merging is idempotent, so
            # a run of records with the same features merges once
            if rec_schema != last_schema:
                schema = ex.merge_schema(schema, rec_schema) if schema else rec_schema
                last_schema = rec_schema
    if corrupt is not None:
        # the shard failed its integrity check after its records were read: none of its
        # content can be trusted, so every record it gave is rejected and the piece emptied
        rejects.append(corrupt.to_dict())
        reason = f"corrupt shard: {corrupt.reason}; record content unreliable"
        rejects.extend(Reject(url, k, "tar", reason).to_dict() for k in keys)
        sizes, keys, schema, digest = [], [], {}, digests.new("crc32c")
        store.write_bytes(piece, b"")
    info = {"index": index, "shard": url, "piece": piece, "sizes": sizes, "keys": keys, "bytes": sum(sizes),
            "crc32c": digests.hexdigest(digest), "records_read": read, "filtered": filtered,
            "rejects": rejects, "schema": schema, "members": stats.members,
            "skipped_members": stats.skipped_members, "member_bytes": stats.member_bytes}
    workfiles.write_sidecar(piece, info, cfg.store)
    return info


def load_verified_piece(index: int, work: str, config: StoreConfig) -> Optional[Dict[str, Any]]:
    """A finished piece from an earlier run, if its sidecar exists and its bytes match."""
    return workfiles.load_verified(join(work, f"piece-{index:06d}.tfrecord"), config)


