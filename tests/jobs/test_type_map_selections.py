"""``--type-map`` names the record's entries also next to selections, which store them as
``value``/``label``: the README's ``--type-map cls:int64`` with its ``--ops`` types the
``label`` feature; a name no selection writes is a usage error before the job starts."""

from __future__ import annotations

import json
import os

import pytest
from support.cli_fixtures import cli

from transforms.ops import Select, SelectJSON
from transforms.ops.selection_names import through_selections

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "launch", "demo", "shards", "demo-{0..1}.tar")
# the README's own flags (Quick start)
README_OPS = """'{conversions: [Decode(jpg), "Resize(jpg, (32, 32))"], selections: [jpg, cls]}'"""
OPS = README_OPS.strip("'")


def test_readme_shows_these_flags():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    assert README_OPS in text and "--type-map cls:int64" in text


def test_names_map_through_selections():
    sels = [Select("jpg"), Select("cls")]
    assert through_selections("cls:int64", sels) == "label:int64"
    assert through_selections({"jpg": "bytes", "label": "float"}, sels) == {
        "value": "bytes",
        "label": "float",
    }
    assert through_selections("cls:int64", []) == "cls:int64"
    # dict selections: value.<key>; one entry selected twice is typed in both places
    d = [{"a": Select("cls"), "b": SelectJSON("json", "n")}, Select("cls")]
    assert through_selections("cls:float", d) == "value.a:float,label:float"
    with pytest.raises(ValueError, match=r"names txt, which the selections do not write; "):
        through_selections("txt:int64", sels)
    with pytest.raises(ValueError, match="types label twice"):
        through_selections("cls:int64,label:float", sels)


def _convert(tmp_path, *extra):
    return cli(
        "convert",
        DEMO,
        "-o",
        str(tmp_path / "d-{}.record"),
        "--ops",
        OPS,
        "--runner",
        "local",
        "--no-progress",
        *extra,
    )


def test_readme_type_map_with_selections_types_the_label(tmp_path):
    p = _convert(tmp_path, "--type-map", "cls:float")
    assert p.returncode == 0, p.stderr
    assert "typed nothing" not in p.stderr, p.stderr
    m = json.loads((tmp_path / "d.record.manifest.json").read_text())
    assert m["options"]["type_map"] == {"label": "float"}
    assert m["schema"]["label"]["dtype"] == "float", m["schema"]
    # and the README's own int64: no warning, an int64 label
    p = _convert(tmp_path, "--type-map", "cls:int64", "--overwrite")
    assert p.returncode == 0 and "WARNING" not in p.stderr, p.stderr
    m = json.loads((tmp_path / "d.record.manifest.json").read_text())
    assert m["schema"]["label"]["dtype"] == "int64"


def test_a_name_no_selection_writes_fails_before_the_job(tmp_path):
    p = _convert(tmp_path, "--type-map", "txt:int64")
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert lines == [
        "tar2tf convert: type map names txt, which the selections do not write; "
        "they write value (from jpg), label (from cls)"
    ], p.stderr
    assert not os.path.exists(tmp_path / "d.record.manifest.json")


def test_python_api_type_map_with_selections(tmp_path):
    from pipelines import Dataset

    ds = Dataset(os.path.dirname(DEMO), selections=["jpg", "cls"])
    ds.load("demo-0.tar", path=str(tmp_path / "a.record"), type_map="cls:float")
    m = json.loads((tmp_path / "a.record.manifest.json").read_text())
    assert m["options"]["type_map"] == {"label": "float"}
    assert m["schema"]["label"]["dtype"] == "float"
    with pytest.raises(ValueError, match="type map names txt"):
        ds.load("demo-0.tar", path=str(tmp_path / "b.record"), type_map="txt:int64")
