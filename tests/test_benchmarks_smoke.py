"""Smoke test of the benchmark harness (``python -m benchmarks.run --size quick``).

Structure and sanity only -- never speed: every variant ran on every workload it applies
to, each run's output was verified by the harness (counts, keys, labels, image sizes,
CRCs), the report has every table, PCR levels read exactly their prefixes, and the
dataset generator is deterministic and realistic (real-photo JPEGs, not noise).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys

import pytest
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import dataset  # noqa: E402

pytestmark = pytest.mark.slow  # ~2 min: runs the whole quick benchmark (CI runs slow tests too)

# every variant but Beam's in_memory/multi_processing modes (same code path as threads;
# multi_processing alone costs ~15 s and 2 GB on the quick size)
VARIANTS = ["limit-io", "limit-io-nosync", "limit-codec", "naive", "webdataset", "tar2tf-beam-threads",
            "tar2tf-load", "tar2tf-load-1t", "tar2tf-stream", "tar2tf-stream-b64"]
EXPECTED = {
    "passthrough": {"limit-io", "limit-io-nosync", "naive", "webdataset", "tar2tf-beam-threads", "tar2tf-load",
                    "tar2tf-load-1t", "tar2tf-stream", "tar2tf-stream-b64"},
    "resize224": {"limit-codec", "naive", "webdataset", "tar2tf-beam-threads", "tar2tf-load"},
    "resize32": {"limit-codec", "naive", "webdataset", "tar2tf-beam-threads", "tar2tf-load", "tar2tf-stream",
                 "tar2tf-stream-b64"},
}


@pytest.fixture(scope="module")
def quick_data(tmp_path_factory):
    return dataset.build("quick", str(tmp_path_factory.mktemp("bench-data")))


@pytest.fixture(scope="module")
def bench(quick_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-out")
    root = os.path.dirname(os.path.dirname(quick_data.directory))
    cmd = [sys.executable, "-m", "benchmarks.run", "--size", "quick", "--repeat", "1", "--data-dir", root,
           "--out", str(out), "--work-dir", str(out / "work"), "--variants", ",".join(VARIANTS)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    with open(out / "results-quick.json") as f:
        result = json.load(f)
    return proc, result, (out / "results-quick.md").read_text()


def test_dataset_is_deterministic_and_complete(quick_data, tmp_path):
    spec = dataset.SIZES["quick"]
    assert len(quick_data.shards) == spec.shards and quick_data.images == spec.images
    with open(os.path.join(quick_data.directory, "index.json")) as f:
        meta = json.load(f)
    for path, digest in zip(quick_data.shards, meta["sha256"]):
        with open(path, "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest
    # a second build elsewhere gives the same bytes (images are a function of (seed, index))
    again = dataset.build("quick", str(tmp_path))
    for a, b in zip(quick_data.shards, again.shards):
        with open(a, "rb") as fa, open(b, "rb") as fb:
            assert fa.read() == fb.read()
    # a different seed gives different images
    assert dataset.make_image(0, seed=1)[0] != dataset.make_image(0, seed=0)[0]


def test_dataset_images_are_imagenet_like(quick_data):
    shapes = {wh for wh, _ in dataset.SHAPES}
    sizes, digests = [], set()
    for path, members in zip(quick_data.shards, quick_data.index):
        with open(path, "rb") as f:
            buf = f.read()
        for m in members:
            data = buf[m["offset"]:m["offset"] + m["size"]]
            with Image.open(io.BytesIO(data)) as im:
                assert im.format == "JPEG" and im.mode == "RGB" and im.size in shapes
            assert 0 <= m["label"] < len(dataset.PHOTOS)
            sizes.append(len(data))
            digests.add(hashlib.sha256(data).hexdigest())
    mean = sum(sizes) / len(sizes)
    # real photographs at q90: tens of kB (uniform noise at 500x375 q90 is ~170 kB)
    assert 20_000 < mean < 150_000, mean
    assert len(digests) == len(sizes)  # no two images alike
    assert len({m["label"] for s in quick_data.index for m in s}) > 3


def test_harness_runs_every_variant_and_verifies_output(bench, quick_data):
    proc, result, _ = bench
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert result["missing"] == {}, result["missing"]
    got = {}
    for row in result["rows"]:
        got.setdefault(row["workload"], set()).add(row["variant"])
        # ok = exit 0, records out == images in, and the harness's verification passed
        assert row["ok"], row
        assert row["records_out"] == row["images"] == quick_data.images
        assert row["seconds"] > 0 and row["peak_rss_mb"] > 0
        # every run started on recycled page-cache memory (benchmarks/pagecache.py)
        assert row["recycled_mb"] * 1e6 >= quick_data.tar_bytes, row
    assert got == EXPECTED


def test_recycle_writes_and_deletes_a_scratch_file_within_a_memory_cap(tmp_path, monkeypatch):
    from benchmarks import pagecache
    (tmp_path / "keep").write_bytes(b"x")
    written = []
    real = pagecache.os.write
    monkeypatch.setattr(pagecache.os, "write", lambda fd, b: (written.append(len(b)), real(fd, b))[1])
    assert pagecache.recycle(str(tmp_path), (3 << 20) + 5) == (3 << 20) + 5
    assert written == [1 << 20] * 3 + [5]  # 1 MB writes, as the converters' buffered writes
    assert os.listdir(tmp_path) == ["keep"]
    monkeypatch.setattr(pagecache, "_available", lambda: 8 << 20)  # never more than a quarter of it
    assert pagecache.recycle(str(tmp_path), 100 << 20) == 2 << 20
    monkeypatch.setattr(pagecache, "_available", lambda: 0)  # /proc/meminfo unreadable: nothing
    assert pagecache.recycle(str(tmp_path), 100 << 20) == 0
    assert os.listdir(tmp_path) == ["keep"]


def test_report_has_ratios_targets_and_tables(bench):
    _, result, md = bench
    for wl in EXPECTED:
        r = result["ratios"][wl]
        assert r["tar2tf_variant"] == "tar2tf-beam-threads"
        for k in ("tar2tf/naive", "tar2tf/webdataset", "tar2tf/limit"):
            assert r[k] > 0
    assert {t for t in result["targets"]} >= {"passthrough tar2tf/limit-io", "resize224 tar2tf/naive",
                                             "resize224 tar2tf/limit-codec", "resize32 tar2tf/naive",
                                             "memory: 4x images -> peak RSS ratio"}
    mem = result["memory"]
    assert mem["images_large"] == 4 * mem["images_small"] and mem["rss_small_mb"] > 0
    sc = result["scaling"]  # passthrough on 1/4 of the shards as well: fixed vs per-image time
    assert sc["beam_variant"] == "tar2tf-beam-threads"
    # the in-process driver in its faster mode on this run (a thread per core, or one)
    load = result["ratios"]["passthrough"]["load_variant"]
    assert load in ("tar2tf-load", "tar2tf-load-1t")
    assert set(sc["variants"]) == {"tar2tf-beam-threads", "limit-io", load}
    for r in sc["variants"].values():
        assert r["images_large"] == 4 * r["images_small"] and 0 < r["seconds_small"]
        if r["marginal_images_per_s"] is not None:  # None when noise swamps the quick size
            full_rate = r["images_large"] / r["seconds_large"]
            assert r["marginal_images_per_s"] > 0 and r["seconds_large"] > r["seconds_small"]
            # t = fixed + images / rate holds at both sizes
            assert abs(r["fixed_seconds"] + r["images_large"] / r["marginal_images_per_s"] - r["seconds_large"]) < 1e-6
            assert (r["fixed_seconds"] > 0) == (r["marginal_images_per_s"] > full_rate)
    assert "**Passthrough scaling**" in md
    for variant in VARIANTS:
        assert f"| {variant} |" in md
    assert "| workload | tar2tf (best mode) |" in md and "**Targets**" in md


def test_pcr_levels_read_exactly_their_prefix(bench, quick_data):
    _, result, md = bench
    pcr = result["pcr"]
    if shutil.which("jpegtran") is None:
        assert "missing" in pcr and "jpegtran" in pcr["missing"]
        pytest.skip("jpegtran is not installed (launch/setup.d/20-apt.sh): PCR part reported as not measured")
    assert "load" in pcr, pcr
    levels = pcr["load"]
    assert [lv["groups"] for lv in levels] == [1, 2, 5, 10]
    for lv in levels:
        assert lv["ok"] and lv["images"] == quick_data.images
        assert lv["exact_prefix"] and lv["bytes"] == lv["prefix_bytes"]
    fractions = [lv["fraction"] for lv in levels]
    assert fractions == sorted(fractions) and fractions[0] < 0.2 and fractions[-1] == 1.0
    assert "**PCR** convert" in md
