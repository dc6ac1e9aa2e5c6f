"""The Pillow image codec (``TAR2TF_IMAGE_CODEC=pillow``) keeps the output bytes tar2tf wrote
before the numpy codec became the default: the golden jobs with image ops, run with it on
both drivers, give the digests recorded then (``<job>@pillow`` in
``tests/cluster/golden_digests.json``).  ``tests/cluster/test_golden_digests.py`` pins the default codec's.
"""

from __future__ import annotations

import os

import pytest
from support import golden

PILLOW = "@pillow"
IMAGE_JOBS = ("ops-encode", "ops-resize")  # the golden jobs whose bytes depend on the codec


@pytest.mark.parametrize("job,runner", [(j, r) for j in IMAGE_JOBS for r in sorted(golden.RUNNERS)])
def test_pillow_codec_bytes_are_pinned(job, runner, tmp_path, monkeypatch):
    monkeypatch.setenv("TAR2TF_IMAGE_CODEC", "pillow")  # the CLI's environment
    golden.tar2tf(golden.JOBS[job], str(tmp_path), golden.RUNNERS[runner])
    golden.check(job + PILLOW, golden.digests(str(tmp_path)))


def test_pillow_in_memory_load_is_pinned(monkeypatch):
    from pipelines import Dataset
    from transforms.ops import Decode, Resize, images

    monkeypatch.setattr(images, "CODEC", "pillow")
    monkeypatch.setenv("TAR2TF_IMAGE_CODEC", "pillow")  # worker processes started meanwhile
    ds = Dataset(
        os.path.dirname(golden.DEMO),
        None,
        [Decode("jpg"), Resize("jpg", (16, 16))],
        ["jpg", "cls"],
    )
    got = {
        "elements": golden.element_digest(
            ds.load(os.path.basename(golden.DEMO), num_workers=2, remote_exec=False)
        )
    }
    golden.check("in-memory-load" + PILLOW, got)


def test_the_codecs_write_different_bytes():
    """The default codec's digests are not the Pillow codec's: the switch is real."""
    gold = golden.pinned()
    for job in IMAGE_JOBS + ("in-memory-load",):
        assert gold[job] != gold[job + PILLOW], job
