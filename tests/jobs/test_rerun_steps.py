"""A cluster may run the graph's last steps again after they finished: Flink re-runs the
tasks whose results a lost TaskManager held, even once the Manifest step has run.  The
steps run again must write the same bytes, and the pieces they copy must still be there:
the work directory goes only when the launcher has the job's result."""

import os

from support import shardgen
from support.cli_fixtures import output_digest

from pipelines.beam.convert import convert
from pipelines.beam.job import _finish
from pipelines.job import lifecycle, staging
from pipelines.job.kinds.tfrecord import shardfile
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from pipelines.job.kinds.tfrecord.kind import TFRECORD, plan_shards
from pipelines.job.kinds.tfrecord.piece import convert_to_piece


def _cfg(src: str, out: str) -> ConvertConfig:
    return ConvertConfig(
        sources=src + "/train-{0000..0003}.tar",
        output=out + "/t-{}.record",
        max_shard_size="6KB",
        type_map={"cls": "int64"},
    )


def test_write_and_manifest_steps_run_again_after_the_manifest(tmp_path):
    src = str(tmp_path / "in")
    shardgen.make_shards(src, 4, 5, size=(32, 24))
    cfg = _cfg(src, str(tmp_path / "o"))
    job = lifecycle.prepare(TFRECORD, cfg)
    lifecycle.start(job)
    staging.stage(job.work, job.units, job.inputs, job.list_rejects, cfg.store)
    stages = cfg.stages()
    # ConvertShard, as the graph runs it (its results held by a surviving worker)
    pieces = [
        convert_to_piece(i, url, job.work, cfg, stages).summary for i, url in enumerate(job.urls)
    ]

    def last_steps():  # Plan -> WriteShard -> Manifest
        shards = [
            shardfile.write_shard(t, cfg.store, cfg.dali_index) for t in plan_shards(pieces, cfg)
        ]
        return next(_finish(shards, pieces, TFRECORD, cfg, job.work, {}))

    last_steps()
    first = output_digest(str(tmp_path / "o"))
    assert len([n for n in first if n.endswith(".record")]) > 1
    assert os.path.isdir(job.work), "the work directory went before the job had finished"
    last_steps()  # run again, after the manifest was written
    assert output_digest(str(tmp_path / "o")) == first

    res = lifecycle.result_of(job, {})
    assert not os.path.exists(job.work)
    assert res.totals["records_written"] == 20
    # and the same bytes as a job run once on the Beam graph (both jobs over: no output
    # lock left beside either)
    convert(_cfg(src, str(tmp_path / "ref")), ["--direct_num_workers=2"])
    assert output_digest(str(tmp_path / "ref")) == output_digest(str(tmp_path / "o"))
    kept = {n: d for n, d in first.items() if not n.endswith(".tar2tf-lock")}
    assert kept == output_digest(str(tmp_path / "o"))
