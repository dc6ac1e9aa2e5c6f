"""The tar -> TFRecord Beam pipeline and its ``convert()`` entry point.

Graph (every step is a thin shell over a plain function in ``transforms``)::

    Create(shard tasks) -> spread (names, not bytes) -> ConvertShard (fetch, tar, ops,
    encode; one piece + sidecar per input shard) -> gather sidecars -> plan final shards
    -> spread -> WriteShard (copy byte ranges, atomic rename) -> manifest + rejects

With ``shuffle=True`` the plan is made over a seeded permutation of all records, and the
records travel through a GroupByKey keyed by final shard (Beam's shuffle moves the
records once; ordering inside a shard comes from the seeded sort key, so it is
deterministic).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from operator import itemgetter
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

import transforms
from pipelines import finalize, options as opts, progress as prog, workfiles
from pipelines.distribute import gather, spread
from transforms import example as ex
from transforms.fetch import read_shard
from transforms.records import Reject, is_reject
from transforms.sizes import parse_size
from transforms.sources import resolve
from transforms.stages import FILTERED, Stages, stage_name
from transforms.stores import StoreConfig, dirname, get_store, join
from transforms.tar_records import DEFAULT_MAX_MEMBER_SIZE, ShardCorrupt, TarStats
from transforms.tfrecord import frame

log = logging.getLogger("tar2tf")
NS = "tar2tf"


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

    def stages(self) -> Stages:
        from transforms.gostages import as_stage  # user stages may be Beam DoFns
        return Stages(tuple(as_stage(s) for s in self.sample_stages), self.record_to_example,
                      tuple(as_stage(s) for s in self.example_stages), ex.parse_type_map(self.type_map))

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


# -- the per-shard work -----------------------------------------------------------------

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
    digest = hashlib.sha256()
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
        sizes, keys, schema, digest = [], [], {}, hashlib.sha256()
        store.write_bytes(piece, b"")
    info = {"index": index, "shard": url, "piece": piece, "sizes": sizes, "keys": keys, "bytes": sum(sizes),
            "sha256": digest.hexdigest(), "records_read": read, "filtered": filtered,
            "rejects": rejects, "schema": schema, "members": stats.members,
            "skipped_members": stats.skipped_members, "member_bytes": stats.member_bytes}
    workfiles.write_sidecar(piece, info, cfg.store)
    return info


def load_verified_piece(index: int, work: str, config: StoreConfig) -> Optional[Dict[str, Any]]:
    """A finished piece from an earlier run, if its sidecar exists and its bytes match."""
    return workfiles.load_verified(join(work, f"piece-{index:06d}.tfrecord"), config)


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
        info = load_verified_piece(index, self.work, self.cfg.store) if self.cfg.resume else None
        if info is not None:
            self.c["shards_resumed"].inc()
        else:
            info = convert_shard(index, url, self.work, self.cfg, self.stages)
        self._count(info)
        bar = prog.get(self.job)
        if bar is not None:
            bar.shard_done(len(info["sizes"]), info["member_bytes"])
        yield info

    def _count(self, info):
        c = self.c
        c["shards_read"].inc()
        c["records_read"].inc(info["records_read"])
        c["records_written"].inc(len(info["sizes"]))
        c["records_filtered"].inc(info["filtered"])
        c["bytes_written"].inc(info["bytes"])
        c["member_bytes_read"].inc(info["member_bytes"])
        c["members_skipped"].inc(info["skipped_members"])
        for r in info["rejects"]:
            if r.get("record", True):
                c["records_rejected"].inc()
            else:
                c["shards_rejected"].inc()
            Metrics.counter(NS, "reject:" + r["stage"] + ":" + Reject.from_dict(r).kind).inc()


def plan_shards(pieces, cfg: ConvertConfig):
    """Final shard tasks for all pieces (used by the Beam graph and the in-process driver)."""
    return finalize.make_plan(pieces, cfg.output, parse_size(cfg.max_shard_size), cfg.records_per_shard)


def finish_job(shards, pieces, cfg: ConvertConfig, list_rejects: List[Reject], inputs: List[str], work: str):
    """Stale outputs removed, manifest + rejects written, work dir deleted; yields the manifest."""
    shards = sorted(shards, key=lambda s: s["path"])
    order = {p: i for i, p in enumerate(finalize.shard_names(cfg.output, len(shards)))}
    shards.sort(key=lambda s: order.get(s["path"], 0))
    schema: Dict[str, Any] = {}
    for p in sorted(pieces, key=lambda p: p["index"]):
        if p["schema"]:
            schema = ex.merge_schema(schema, p["schema"]) if schema else p["schema"]
    rejects = finalize.all_rejects(pieces, list_rejects)
    totals = finalize.totals_of(pieces, list_rejects, shards)
    by_reason: Dict[str, int] = {}
    for r in rejects:
        k = f"{r['stage']}: {Reject.from_dict(r).kind}"
        by_reason[k] = by_reason.get(k, 0) + 1
    manifest = {"tool": "tar2tf", "version": transforms.__version__, "kind": "tfrecord",
                "inputs": inputs, "output": cfg.output, "options": cfg.describe(), "schema": schema,
                "shards": shards, "totals": totals,
                "rejects": {"count": len(rejects), "by_reason": dict(sorted(by_reason.items())),
                            "path": finalize.companion(cfg.output, ".rejects.jsonl")}}
    # stale shards of an earlier run (overwrite was checked before the job started)
    keep = {s["path"] for s in shards}
    store = get_store(cfg.output, cfg.store)
    for stale in finalize.existing_outputs(cfg.output, cfg.store):
        if stale not in keep:
            store.delete(stale)
            store.delete(stale + ".idx")
    finalize.write_manifest(cfg.output, manifest, rejects, cfg.store)
    finalize.delete_tree(get_store(work, cfg.store), work)
    yield manifest


def work_dir_for(cfg: ConvertConfig, inputs: List[str]) -> str:
    """Same inputs + options -> same work dir, which is what makes ``resume`` find pieces."""
    key = json.dumps({"inputs": inputs, "options": cfg.describe(), "v": transforms.__version__},
                     sort_keys=True)
    fp = hashlib.sha256(key.encode()).hexdigest()[:16]
    root = cfg.work_dir or join(dirname(cfg.output), ".tar2tf-work")
    return join(root, fp)


def build(p: beam.Pipeline, cfg: ConvertConfig, urls: List[str], list_rejects: List[Reject],
          work: str, job: str):
    tasks = list(enumerate(urls))
    pieces = (spread(p | "Shards" >> beam.Create(tasks, reshuffle=False), "SpreadShards", itemgetter(0))
              | "ConvertShard" >> beam.ParDo(ConvertShardFn(cfg, work, job)))
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


def convert(cfg: ConvertConfig, beam_args: Optional[Sequence[str]] = None) -> ConvertResult:
    """Run the conversion; see the module docstring.  Raises OutputExistsError."""
    t0 = time.time()
    if "{}" in cfg.output and cfg.output.count("{}") > 1:
        raise ValueError("output may contain '{}' only once")
    parse_size(cfg.max_shard_size), parse_size(cfg.max_member_size)
    if cfg.records_per_shard is not None and cfg.records_per_shard <= 0:
        raise ValueError("records_per_shard must be positive")
    urls, list_rejects = resolve(cfg.sources, cfg.base, cfg.store)
    existing = finalize.existing_outputs(cfg.output, cfg.store)
    if existing and not (cfg.overwrite or cfg.resume):
        raise OutputExistsError(f"{len(existing)} output file(s) already match {cfg.output} "
                                f"(e.g. {existing[0]}); pass --overwrite to replace them")
    work = work_dir_for(cfg, urls)
    job = uuid.uuid4().hex
    args = opts.effective_args(beam_args)
    bar = prog.Progress(job, len(urls), cfg.progress) if opts.shows_progress(args) else None
    try:
        p = beam.Pipeline(options=opts.make_pipeline_options(args))
        build(p, cfg, urls, list_rejects, work, job)
        result = p.run()
        result.wait_until_finish()
    finally:
        if bar is not None:
            bar.close()
    manifest_path = finalize.companion(cfg.output, ".manifest.json")
    manifest = json.loads(get_store(manifest_path, cfg.store).read_bytes(manifest_path))
    counters = counters_of(result)
    counters["shards_rejected"] = counters.get("shards_rejected", 0) + len(list_rejects)
    totals = manifest["totals"]
    rejected = manifest["rejects"]["count"]
    return ConvertResult(paths=[s["path"] for s in manifest["shards"]], manifest=manifest,
                         manifest_path=manifest_path,
                         rejects_path=finalize.companion(cfg.output, ".rejects.jsonl"),
                         totals=totals, counters=counters, seconds=time.time() - t0,
                         exit_code=0 if rejected <= cfg.max_rejects else 3)
