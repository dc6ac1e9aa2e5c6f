"""tar2tf pcr-report: bytes fraction, MS-SSIM and PSNR per scan group, JSON + PNG."""

import json
import os

import numpy as np
import pytest
from PIL import Image
from support.pcr_fixtures import convert_local, encode, make_image_folder, photo, requires_jpegtran

from transforms.pcr import quality as pcr_quality

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@requires_jpegtran
def test_report_cli(tmp_path, capsys):
    from launch.cli import main

    files = {
        f"c{i % 2}/{n}.jpg": encode(photo(n, (96 + 16 * i, 72)), quality=90)
        for i, n in enumerate(("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry"))
    }
    files["c0/gray.jpg"] = encode(photo("camera", (64, 64), "L"))
    files["c1/tiny.jpg"] = encode(photo("coffee", (9, 7)))
    root = make_image_folder(str(tmp_path / "f"), files)
    out, _ = convert_local(tmp_path, root, images_per_record=3)
    assert main(["pcr-report", out, "--sample", "5"]) == 0
    printed = capsys.readouterr().out
    assert "MS-SSIM" in printed and "saved:" in printed
    assert "scans: jpegtran's standard script" in printed
    rep = json.load(open(os.path.join(out, "PCR_report.json")))
    assert rep["scan_script"] is None
    assert rep["images"] == 7 and rep["sample"] == 5 and rep["scan_groups"] == 10
    rows = rep["groups"]
    fractions = [r["fraction"] for r in rows]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and fractions[0] < 0.5
    assert rows[-1]["ms_ssim_mean"] == pytest.approx(1.0) and rows[-1]["identical"] == 5
    assert rows[-1]["psnr_db_mean"] is None
    assert 0.3 < rows[0]["ms_ssim_mean"] < rows[4]["ms_ssim_mean"] < 1.0
    assert 15 < rows[0]["psnr_db_mean"] < rows[4]["psnr_db_mean"]
    sizes = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".db"))
    assert rep["bytes_total"] == sizes
    with Image.open(os.path.join(out, "PCR_report.png")) as png:
        assert png.format == "PNG" and png.size[0] > 300
    assert main(["pcr-report", str(tmp_path / "nowhere")]) == 2


def test_ms_ssim_handles_small_images():
    rng = np.random.default_rng(0)
    for h, w, scales in ((200, 170, 5), (120, 90, 4), (30, 25, 2), (12, 40, 1), (6, 5, 1)):
        assert pcr_quality.scales_for(max(h, 11), max(w, 11)) == scales
        a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        b = np.clip(a.astype(int) + rng.integers(-20, 21, a.shape), 0, 255).astype(np.uint8)
        same = pcr_quality.ms_ssim(a, a)[0]
        noisy = pcr_quality.ms_ssim(a, b)[0]
        assert same == pytest.approx(1.0, abs=1e-5) and 0 < noisy < 0.99
    assert np.isinf(pcr_quality.psnr(a, a)[0]) and pcr_quality.psnr(a, b)[0] < 40


@requires_jpegtran
def test_report_cli_prints_no_tensorflow_start_up_log(tmp_path):
    """About 9 lines of TensorFlow's (oneDNN, CPU features, no CUDA driver, a cuInit error
    line) came before the table; TensorFlow 2.21 writes them whatever
    TF_CPP_MIN_LOG_LEVEL says.  In a fresh process, as a user runs it."""
    import subprocess
    import sys

    root = make_image_folder(
        str(tmp_path / "f"), {"c0/a.jpg": encode(photo("coffee", (48, 32)), quality=90)}
    )
    out, _ = convert_local(tmp_path, root, images_per_record=1)
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    p = subprocess.run(
        [sys.executable, "-m", "launch.cli", "pcr-report", out, "--sample", "1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stderr == "" and "MS-SSIM" in p.stdout, p.stderr[-3000:]
