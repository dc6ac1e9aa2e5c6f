"""``--resume`` after ``kill -9``: finished, verified pieces are skipped, the rest is
redone, and the output is byte-identical to an uninterrupted run."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import shardgen
from ops_fixtures import ROOT, cli, output_digest

N_SHARDS = 10


def _args(src, out, work):
    return ["convert", src, "--output", out, "--work-dir", work, "--records-per-shard", "7",
            "--type-map", "cls:int64", "--ops", "slow_ops:slow_ops", "--no-progress",
            "--direct_running_mode=in_memory", "--direct_num_workers=1"]


def test_resume_after_kill_is_byte_identical(tmp_path):
    shardgen.make_shards(str(tmp_path / "in"), N_SHARDS, 3, size=(32, 24))
    src = str(tmp_path / "in" / "train-{0000..0009}.tar")
    env = {"PYTHONPATH": os.path.join(ROOT, "tests"), "TAR2TF_TEST_DELAY": "0.2"}
    out, work = str(tmp_path / "o" / "t-{}.record"), str(tmp_path / "work")

    proc = subprocess.Popen([sys.executable, "-m", "launch.cli", *_args(src, out, work)], cwd=ROOT,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **env),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    while time.time() < deadline and len(glob.glob(f"{work}/*/piece-*.json")) < 3:
        assert proc.poll() is None, "the job ended before it could be killed: " + proc.stderr.read().decode()
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    proc.stderr.close()
    done = sorted(glob.glob(f"{work}/*/piece-*.json"))
    assert 3 <= len(done) < N_SHARDS, "the kill should land midway"
    assert not os.path.exists(tmp_path / "o" / "t.record.manifest.json")
    # a finished piece that got damaged is not trusted: it is redone
    damaged = done[0][: -len(".json")] + ".tfrecord"
    with open(damaged, "r+b") as f:
        f.seek(20)
        b = f.read(1)
        f.seek(20)
        f.write(bytes([b[0] ^ 0xFF]))

    summary = str(tmp_path / "resumed.json")
    p = cli(*_args(src, out, work), "--resume", "--summary-json", summary, env=env)
    assert p.returncode == 0, p.stderr
    rep = json.load(open(summary))
    assert rep["counters"]["shards_resumed"] == len(done) - 1 > 0
    assert rep["counters"]["shards_read"] == N_SHARDS and rep["counter_mismatches"] == []
    assert "resumed" in p.stderr
    assert not glob.glob(f"{work}/*/piece-*")            # work dir cleaned after success

    ref_out = str(tmp_path / "ref" / "t-{}.record")
    p = cli(*_args(src, ref_out, str(tmp_path / "work-ref")), env=env)
    assert p.returncode == 0, p.stderr
    got, want = output_digest(str(tmp_path / "o")), output_digest(str(tmp_path / "ref"))
    assert got == want and len([k for k in got if k.endswith(".record")]) == 5   # 30 records / 7
