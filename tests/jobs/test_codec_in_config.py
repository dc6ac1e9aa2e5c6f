"""The image codec is part of the job's config: recorded in the manifest, and shipped to
every worker with the config, so a worker whose environment lacks
``$TAR2TF_IMAGE_CODEC`` -- a remote one, which the launcher's environment does not reach --
writes the same bytes (``transforms.ops.codec_choice``)."""

from __future__ import annotations

import json
import os

import pytest
from support.cli_fixtures import ROOT, output_digest

from pipelines.beam.convert import convert
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from transforms.ops import Decode, Resize

DEMO = os.path.join(ROOT, "launch", "demo", "shards", "demo-{0..1}.tar")
# worker processes started by the run, with the launcher's environment at that time
BEAM = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]

pytestmark = pytest.mark.slow


def _run(out, **kw):
    cfg = ConvertConfig(
        sources=DEMO,
        output=str(out / "t-{}.record"),
        sample_stages=[Decode("jpg"), Resize("jpg", (20, 16))],
        progress=False,
        **kw,
    )
    res = convert(cfg, BEAM)
    assert res.exit_code == 0
    return output_digest(str(out)), res.manifest


def test_workers_without_the_variable_use_the_configs_codec(tmp_path, monkeypatch):
    monkeypatch.setenv("TAR2TF_IMAGE_CODEC", "pillow")
    with_env, manifest = _run(tmp_path / "env")  # the default, read from the environment
    assert manifest["options"]["image_codec"] == "pillow"
    monkeypatch.delenv("TAR2TF_IMAGE_CODEC")
    shipped, manifest = _run(tmp_path / "cfg", image_codec="pillow")
    assert manifest["options"]["image_codec"] == "pillow"
    numpy, manifest = _run(tmp_path / "numpy")
    assert manifest["options"]["image_codec"] == "numpy"
    shards = {k: v for k, v in shipped.items() if k.endswith(".record")}
    assert shards and shards == {k: v for k, v in with_env.items() if k.endswith(".record")}
    assert shards != {k: v for k, v in numpy.items() if k.endswith(".record")}


def test_a_bad_codec_is_a_usage_error_before_anything_is_written(tmp_path):
    cfg = ConvertConfig(sources=DEMO, output=str(tmp_path / "o" / "t-{}.record"))
    cfg.image_codec = "opencv"
    with pytest.raises(ValueError, match="image codec must be one of numpy, pillow"):
        convert(cfg, BEAM)
    assert not os.path.exists(tmp_path / "o")
    assert json  # the manifest is read through the result above
