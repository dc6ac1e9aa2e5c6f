"""``--resume`` keeps only journal entries whose shard is the one the output template
names at that place: a journal edited to point at a file outside the output (intact, with
the size and CRC32C its entry gives) is not trusted from that entry on, with a warning
line, and the manifest lists only the output's own shards."""

import glob
import json
import os
import shutil

import pytest
from support import background, shardgen
from support.cli_fixtures import cli

N_SHARDS = 8


def _args(src, out, work):
    more = ["--work-dir", work, "--records-per-shard", "4", "--runner", "local", "--processes", "0"]
    return background.slow_convert(src, out, *more)


@pytest.mark.slow
def test_journal_pointing_outside_the_output_is_not_trusted(tmp_path):
    shardgen.make_shards(str(tmp_path / "in"), N_SHARDS, 3, size=(16, 12))
    src = str(tmp_path / "in" / "train-{0000..0007}.tar")
    env = background.slow_env("0.2")
    out, work = str(tmp_path / "o" / "t-{}.record"), str(tmp_path / "work")
    proc = background.start(*_args(src, out, work), env=env)
    background.wait_until(
        proc, lambda: len(glob.glob(f"{work}/*/journal-*.json")) >= 2, "two journaled shards"
    )
    background.kill(proc)
    entry = sorted(glob.glob(f"{work}/*/journal-*.json"))[0]
    e = json.load(open(entry))
    outside = str(tmp_path / "elsewhere" / "secret.record")
    os.makedirs(os.path.dirname(outside))
    shutil.copy(e["row"]["path"], outside)  # intact: same size and CRC32C as the entry says
    e["row"]["path"] = outside
    json.dump(e, open(entry, "w"))

    p = cli(*_args(src, out, work), "--resume", env=env)
    assert p.returncode == 0, p.stderr
    assert "journal entry 1 names" in p.stderr and "secret.record" in p.stderr
    mpath = str(tmp_path / "o" / "t.record.manifest.json")
    paths = [s["path"] for s in json.load(open(mpath))["shards"]]
    assert paths == [out.replace("{}", str(i + 1)) for i in range(len(paths))]
    v = cli("verify", mpath)
    assert v.returncode == 0, v.stdout + v.stderr
