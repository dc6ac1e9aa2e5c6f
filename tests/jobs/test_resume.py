"""``--resume`` after ``kill -9``: finished, verified pieces are skipped, the rest is
redone, and the output is byte-identical to an uninterrupted run."""

import glob
import json
import os

import pytest
from support import background, shardgen
from support.cli_fixtures import cli, output_digest

N_SHARDS = 10


# the in-process driver journals the final shards it streams (where --resume goes on):
# converting on this thread, in two worker processes (they write into the final shards), or
# in one worker process
MODES = {
    "thread": ["--runner", "local", "--processes", "0"],
    "workers": ["--runner", "local", "--processes", "2"],
    "one-worker": ["--runner", "local", "--processes", "1"],
}


def _args(src, out, work, mode="thread"):
    return background.slow_convert(
        src, out, "--work-dir", work, "--records-per-shard", "7", *MODES[mode]
    )


def _flip(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.slow
def test_resume_after_kill_is_byte_identical(tmp_path, mode):
    shardgen.make_shards(str(tmp_path / "in"), N_SHARDS, 3, size=(32, 24))
    src = str(tmp_path / "in" / "train-{0000..0009}.tar")
    env = background.slow_env("0.2")
    out, work = str(tmp_path / "o" / "t-{}.record"), str(tmp_path / "work")

    proc = background.start(*_args(src, out, work, mode), env=env)
    background.wait_until(
        proc, lambda: len(glob.glob(f"{work}/*/journal-*.json")) >= 2, "two journaled shards"
    )
    background.kill(proc)
    journal = sorted(glob.glob(f"{work}/*/journal-*.json"))
    assert 2 <= len(journal) < 5, "the kill should land midway"
    assert not os.path.exists(tmp_path / "o" / "t.record.manifest.json")
    entries = [json.load(open(j)) for j in journal]
    # the job recorded what it is (for a --resume with other options to be told which)
    assert [json.load(open(j))["output"] for j in glob.glob(f"{work}/*/job.json")] == [out]
    # the journal's shards are final; the pieces wholly inside them are gone from the work dir
    assert [e["row"]["path"] for e in entries] == [
        out.replace("{}", str(i + 1)) for i in range(len(entries))
    ]
    journaled = [p["index"] for e in entries for p in e["pieces"]]
    left = sorted(int(f[-11:-5]) for f in glob.glob(f"{work}/*/piece-*.json"))
    # (the journal entry is written before its pieces are deleted, so a kill between the
    # two leaves the last entry's pieces; any earlier entry's are gone)
    settled = [p["index"] for e in entries[:-1] for p in e["pieces"]]
    last = {p["index"] for p in entries[-1]["pieces"]}
    assert journaled and not set(settled) & set(left)
    assert min((i for i in left if i not in last), default=N_SHARDS) >= entries[-1]["next"][0]
    # a damaged final shard is not trusted: it and the ones after it are written again;
    # so is a damaged piece
    _flip(entries[1]["row"]["path"], 20)
    expect_resumed = len(entries[0]["pieces"]) + len(
        [i for i in left if i >= entries[0]["next"][0]]
    )
    if left:
        _flip(glob.glob(f"{work}/*/piece-{left[0]:06d}.tfrecord")[0], 20)
        expect_resumed -= 1

    summary = str(tmp_path / "resumed.json")
    p = cli(*_args(src, out, work, mode), "--resume", "--summary-json", summary, env=env)
    assert p.returncode == 0, p.stderr
    rep = json.load(open(summary))
    assert rep["counters"]["shards_resumed"] == expect_resumed > 0
    assert rep["counters"]["shards_read"] == N_SHARDS and rep["counter_mismatches"] == []
    assert "resumed" in p.stderr
    assert not glob.glob(f"{work}/*/piece-*") and not glob.glob(
        f"{work}/*/journal-*"
    )  # cleaned after success

    ref_out = str(tmp_path / "ref" / "t-{}.record")
    p = cli(*_args(src, ref_out, str(tmp_path / "work-ref"), mode), env=env)
    assert p.returncode == 0, p.stderr
    got, want = output_digest(str(tmp_path / "o")), output_digest(str(tmp_path / "ref"))
    assert got == want and len([k for k in got if k.endswith(".record")]) == 5  # 30 records / 7
