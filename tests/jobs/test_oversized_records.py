"""Records larger than ``--max-shard-size``: each sits alone in its shard, and the job says
so in one warning with their count and the first as the example, on every path that cuts
shards (a streamed ``{}`` output, a planned one, Beam's plan step) -- not one line per
record (``--max-shard-size 1`` over a million records was a million lines).  Sizes that
do not parse say which forms do."""

from __future__ import annotations

import json
import os

import pytest
from support.cli_fixtures import cli

from transforms.sizes import FORMS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARD = os.path.join(ROOT, "launch", "demo", "shards", "demo-0.tar")


@pytest.mark.parametrize(
    "output, runner",
    [
        ("t-{}.record", "local"),  # the shard stream
        ("t.record", "local"),  # planned once every piece is done
        pytest.param("t.record", "beam", marks=pytest.mark.slow),  # Beam's plan step
    ],
)
def test_one_warning_for_every_oversized_record(tmp_path, output, runner):
    r = cli(
        "convert", SHARD, "-o", str(tmp_path / output), "--max-shard-size", "1",
        "--runner", runner, "--no-progress",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "t.record.manifest.json", encoding="utf-8") as f:
        shards = json.load(f)["shards"]
    assert len(shards) > 2 and all(s["records"] == 1 for s in shards)
    said = [line for line in r.stderr.splitlines() if "max shard size" in line]
    assert said == [
        f"WARNING tar2tf: {len(shards)} records exceed max shard size 1: each sits alone in "
        f"its shard (the first, of {shards[0]['bytes']} bytes, in {shards[0]['path']})"
    ]


def test_a_size_in_exponent_form_is_bytes(tmp_path):
    r = cli("convert", SHARD, "-o", str(tmp_path / "t-{}.record"), "--max-shard-size", "1e5")
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "t.record.manifest.json", encoding="utf-8") as f:
        m = json.load(f)
    assert m["options"]["max_shard_size"] == 100_000
    assert all(s["bytes"] <= 100_000 for s in m["shards"]) and len(m["shards"]) > 1


def test_a_size_that_does_not_parse_says_what_does(tmp_path):
    r = cli("convert", SHARD, "-o", str(tmp_path / "t-{}.record"), "--max-shard-size", "1e3MB")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"tar2tf convert: argument --max-shard-size: invalid size '1e3MB': {FORMS}"
    ]
