"""PCR output is byte-identical across separate processes for the same inputs and seed."""

import os
import subprocess
import sys

import pytest
from support.pcr_fixtures import bad_files, make_image_folder, requires_jpegtran, sample_images

pytestmark = requires_jpegtran
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "launch", "demo", "shards")


def _run(sources, out, *extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.cli",
            "pcr",
            *sources,
            "--output",
            out,
            "--max-rejects",
            "10",
            *extra,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return {
        f: open(os.path.join(out, f), "rb").read()
        for f in sorted(os.listdir(out))
        if f.startswith("PCR_") or f.endswith(".jsonl")
    }


@pytest.mark.slow
def test_same_seed_same_bytes_across_processes(tmp_path):
    root = make_image_folder(str(tmp_path / "folder"), dict(sample_images(), **bad_files()))
    sources = [os.path.join(DEMO, "demo-{0..2}.tar")]
    a = _run(
        sources,
        str(tmp_path / "a"),
        "--seed",
        "7",
        "--images-per-record",
        "16",
        "--direct_num_workers=2",
    )
    b = _run(
        sources,
        str(tmp_path / "b"),
        "--seed",
        "7",
        "--images-per-record",
        "16",
        "--direct_num_workers=1",
    )
    assert list(a) == [
        "PCR.rejects.jsonl",
        "PCR_0.db",
        "PCR_1.db",
        "PCR_2.db",
        "PCR_3.db",
        "PCR_4.db",
        "PCR_index.pb",
    ]
    assert a == b
    c = _run(sources, str(tmp_path / "c"), "--seed", "8", "--images-per-record", "16")
    assert c["PCR_index.pb"] != a["PCR_index.pb"] and c["PCR_0.db"] != a["PCR_0.db"]
    f1 = _run([root], str(tmp_path / "f1"), "--images-per-record", "4")
    f2 = _run([root], str(tmp_path / "f2"), "--images-per-record", "4", "--direct_num_workers=1")
    assert f1 == f2 and f1["PCR.rejects.jsonl"].count(b"\n") == 3
