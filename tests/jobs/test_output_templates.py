"""Output templates with a Python format spec (``-o 'd-{:03d}.record'``,
``load(path='t-{:05d}.record')``): padded shard names that sort in shard order, the
manifest beside them, ``verify`` and reruns finding them; a field that would not give
decimal names is a usage error before anything is written."""

from __future__ import annotations

import glob
import json
import os

from support import shardgen
from support.cli_fixtures import DEMO_SOURCES, cli

from pipelines import Dataset


def _names(d) -> list:
    return sorted(n for n in os.listdir(d) if n.endswith(".record"))


def test_cli_pads_shard_numbers_and_verify_finds_them(tmp_path):
    out = tmp_path / "out"
    template = str(out / "d-{:03d}.record")
    p = cli("convert", DEMO_SOURCES, "-o", template, "--records-per-shard", "9", "--no-progress")
    assert p.returncode == 0, p.stdout + p.stderr
    # 96 records, 9 a shard: 11 shards, the 10th and 11th sort after the 2nd
    # (the spec was written literally: d-{:03d}-00000-of-00011.record)
    assert _names(out) == [f"d-{i:03d}.record" for i in range(1, 12)]
    m = json.load(open(out / "d.record.manifest.json"))
    assert [s["path"] for s in m["shards"]] == sorted(glob.glob(str(out / "d-*.record")))
    assert m["output"] == template
    v = cli("verify", template)
    assert v.returncode == 0, v.stdout + v.stderr
    assert v.stdout.startswith(f"OK: {out / 'd.record.manifest.json'} (tfrecord): 11 shards")
    # a stray name of the template is one verify finds
    stray = out / "d-012.record"
    stray.write_bytes((out / "d-001.record").read_bytes())
    v = cli("verify", template)
    assert v.returncode == 5 and f"{stray}: matches the output template" in v.stdout, v.stdout
    stray.unlink()
    # a rerun finds them as this output's: refused without --overwrite, replaced with it
    again = cli(
        "convert", DEMO_SOURCES, "-o", template, "--records-per-shard", "9", "--no-progress"
    )
    assert again.returncode == 4, again.stdout + again.stderr
    fewer = cli(
        "convert", DEMO_SOURCES, "-o", template, "--records-per-shard", "48", "--overwrite",
        "--no-progress",
    )  # fmt: skip
    assert fewer.returncode == 0, fewer.stdout + fewer.stderr
    assert _names(out) == ["d-001.record", "d-002.record"]


def test_cli_refuses_a_field_without_decimal_names(tmp_path):
    p = cli("convert", DEMO_SOURCES, "-o", str(tmp_path / "o" / "d-{:x}.record"), "--no-progress")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "output field '{:x}' writes shard 12 as 'c'" in p.stderr
    assert not os.path.exists(tmp_path / "o")


def test_dataset_load_path_pads_shard_numbers(tmp_path):
    src = tmp_path / "src"
    shardgen.make_shards(str(src), 2, 6, size=(32, 24))
    paths = Dataset(str(src)).load(
        "train-{0000..0001}.tar",
        path=str(tmp_path / "out" / "t-{:05d}.record"),
        records_per_shard=1,
        remote_exec=False,
    )
    assert [os.path.basename(p) for p in paths] == [f"t-{i:05d}.record" for i in range(1, 13)]
    assert paths == sorted(paths)
    assert os.path.exists(tmp_path / "out" / "t.record.manifest.json")
