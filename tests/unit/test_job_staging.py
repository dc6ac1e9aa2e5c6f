"""The Beam graph of a job does not grow with its input: units, inputs and listing rejects
are staged in the work directory (``pipelines.job.staging``), and the config the steps
carry has no source list."""

from __future__ import annotations

import pytest

from benchmarks.graph_size import proto_bytes, synthetic_job
from pipelines.job import staging


def test_the_pipeline_proto_is_the_same_size_for_ten_units_and_fifty_thousand():
    small = proto_bytes(synthetic_job(10))
    large = proto_bytes(synthetic_job(50_000))
    # a few bytes more for larger chunk numbers; 50 k URLs would be ~2.5 MB
    assert abs(large - small) < 2_000, (small, large)
    assert large < 200_000


def test_staged_units_inputs_and_rejects_read_back_as_the_job_has_them(tmp_path):
    from transforms.record_types import Reject

    n = staging.UNITS_PER_CHUNK + 3
    units = [(i, f"/data/in/s-{i}.tar") for i in range(n)]
    units[1] = (1, "/data/in/caf\udce9.tar")  # a local name that is not UTF-8
    inputs = [u for _, u in units]
    rejects = [Reject("/data/in/gone.tar", None, "fetch", "missing shard", counts_record=False)]
    work = str(tmp_path / "w")
    staging.stage(work, units, inputs, rejects)
    chunks = staging.chunk_count(n)
    assert chunks == 2
    got = [u for c in range(chunks) for u in staging.read_units(work, c)]
    assert got == units and all(isinstance(u, tuple) for u in got)
    assert staging.read_inputs(work) == inputs
    assert [r.to_dict() for r in staging.read_list_rejects(work)] == [rejects[0].to_dict()]


@pytest.mark.parametrize("sources", ["in/s-{0..3}.tar", ["in/a.tar", "in/b.tar"]])
def test_workers_get_the_config_without_its_source_list(sources):
    from pipelines.job.kinds.tfrecord.config import ConvertConfig

    cfg = ConvertConfig(sources=sources, output="o/t-{}.record")
    shipped = staging.for_workers(cfg)
    assert shipped.describe() == cfg.describe()
    assert shipped.sources == (sources if isinstance(sources, str) else ())
