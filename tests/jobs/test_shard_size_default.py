"""The CLI bounds output files at 200MB unless told (TensorFlow's guidance: files of 100 MB
or more, enough of them to read in parallel; docs/cli.md); the Python API keeps its one
file unless asked."""

from __future__ import annotations

import json
import os

from support.cli_fixtures import cli

from launch.cli import build_parser

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "launch", "demo", "shards")


def test_cli_default_is_documented_and_recorded(tmp_path):
    action = build_parser().subcommands["convert"]._option_string_actions["--max-shard-size"]
    assert action.default == "200MB" and "default 200MB" in action.help
    with open(os.path.join(ROOT, "docs", "cli.md")) as f:
        assert "(default `200MB`" in f.read()
    p = cli(
        "convert",
        os.path.join(DEMO, "demo-{0..1}.tar"),
        "-o",
        str(tmp_path / "d.record"),
        "--runner",
        "local",
        "--no-progress",
    )
    assert p.returncode == 0, p.stderr
    m = json.loads((tmp_path / "d.record.manifest.json").read_text())
    assert m["options"]["max_shard_size"] == 200_000_000
    # an explicit bound still wins
    p = cli(
        "convert",
        os.path.join(DEMO, "demo-{0..1}.tar"),
        "-o",
        str(tmp_path / "e-{}.record"),
        "--max-shard-size",
        "100KB",
        "--runner",
        "local",
        "--no-progress",
    )
    assert p.returncode == 0, p.stderr
    m = json.loads((tmp_path / "e.record.manifest.json").read_text())
    assert m["options"]["max_shard_size"] == 100_000 and len(m["shards"]) > 1


def test_python_api_writes_one_file_unless_asked(tmp_path):
    from pipelines import Dataset

    paths = Dataset(DEMO).load("demo-{0..1}.tar", path=str(tmp_path / "p.record"))
    assert len(paths) == 1
    m = json.loads((tmp_path / "p.record.manifest.json").read_text())
    assert m["options"]["max_shard_size"] is None
