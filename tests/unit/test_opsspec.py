"""``--ops`` specs (inline JSON/YAML, files, module:function) and the original API's example as one CLI command."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from launch.opsspec import SpecError, load_ops, parse_expr
from transforms.ops import (
    ByKey,
    Convert,
    Decode,
    Func,
    Rename,
    Resize,
    Rotate,
    Select,
    SelectDict,
    SelectJSON,
    SelectList,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "launch", "demo", "shards")
SEED_OPS = '{conversions: [Decode(jpg), "Resize(jpg, (32, 32))"], selections: [jpg, cls]}'


def test_expressions_and_mappings():
    assert parse_expr("Resize(Convert(Decode('jpg'), tf.float32), (224, 224))") == Resize(
        Convert(Decode("jpg"), "float32"), (224, 224)
    )
    assert parse_expr("Decode(png, channels=1, formats=[png])") == Decode(
        "png", channels=1, formats=("png",)
    )
    assert parse_expr("SelectJSON(json, [objects, 0, label])") == SelectJSON(
        "json", ["objects", 0, "label"]
    )
    assert parse_expr("Rotate(jpg, -90)").angle == -90
    conv, sel = load_ops(SEED_OPS)
    assert conv == [Resize(Decode("jpg"), (32, 32))]  # fused for DCT-domain downscaling
    assert sel == ["jpg", "cls"]
    conv, sel = load_ops(
        json.dumps(
            {
                "conversions": [
                    {"op": "Decode", "args": ["jpg"]},
                    {"Resize": ["jpg", [8, 8]]},
                    {"Rotate": {"what": "jpg", "angle": 90}},
                    "Rename(label, cls)",
                    "ByKey(jpg, label)",
                ],
                "selections": [
                    {"img": "jpg", "meta": "SelectJSON(json, [a, 1])"},
                    "SelectList([cls, lab])",
                ],
            }
        )
    )
    assert conv == [Resize(Decode("jpg"), (8, 8)), Rotate("jpg", 90)] + conv[2:]
    assert isinstance(conv[2], Rename) and isinstance(conv[3], ByKey)
    assert sel == [
        SelectDict({"img": Select("jpg"), "meta": SelectJSON("json", ["a", 1])}),
        SelectList(["cls", "lab"]),
    ]
    conv, _ = load_ops("[Rotate(jpg)]", seed=9)
    assert conv[0].seed == 9


def test_spec_errors():
    for bad, msg in [
        ("[Explode(jpg)]", "unknown op 'Explode'"),
        ("[__import__('os')]", "unknown op"),
        ("[os.system(ls)]", "only op names can be called"),
        ("[Resize(jpg)]", "bad arguments"),
        ("{conversions: [], extra: 1}", "unknown keys"),
        ("missing.yaml", "does not exist"),
        ("{selections: [a, b, c]}", r"\[value\] or \[value, label\]"),
        ("nosuchmodule_x:f", "cannot import"),
    ]:
        with pytest.raises(SpecError, match=msg):
            load_ops(bad)


def test_files_and_module_function(tmp_path, monkeypatch):
    (tmp_path / "ops.yaml").write_text(
        "conversions:\n  - Decode(jpg)\n  - Resize(jpg, [16, 16])\nselections: [jpg, cls]\n"
    )
    (tmp_path / "ops.json").write_text(
        json.dumps({"conversions": ["Decode(jpg)"], "selections": ["jpg"]})
    )
    (tmp_path / "myops.py").write_text(
        "from transforms.ops import Decode, Func\n"
        "def double(r):\n    return dict(r, cls=r['cls'] * 2)\n"
        "def ops():\n    return [Decode('jpg'), Func(double)], ['jpg', 'cls']\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_ops(str(tmp_path / "ops.yaml")) == (
        [Resize(Decode("jpg"), (16, 16))],
        ["jpg", "cls"],
    )
    assert load_ops(str(tmp_path / "ops.json")) == ([Decode("jpg")], ["jpg"])
    conv, sel = load_ops("myops:ops")
    assert conv[0] == Decode("jpg") and isinstance(conv[1], Func) and sel == ["jpg", "cls"]
    conv, _ = load_ops(
        "[\"Func('myops:double', ext_name=x)\"]"
    )  # callables as quoted module:function
    assert conv[0].f.__name__ == "double" and conv[0].ext_name == "x"


def _cli(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [sys.executable, "-m", "launch.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


@pytest.mark.slow
def test_seed_example_is_one_cli_command(tmp_path):
    """Decode + resize to 32x32, select jpg and cls: one `tar2tf convert` command."""
    import tensorflow as tf

    from pipelines import Dataset, default_record_parser, make_record_parser

    out = tmp_path / "out" / "train-{}.record"
    p = _cli(
        "convert",
        "demo-{0..3}.tar",
        "--base",
        DEMO,
        "-o",
        str(out),
        "--ops",
        SEED_OPS,
        "--max-shard-size",
        "100KB",
    )
    assert p.returncode == 0, p.stderr
    paths = p.stdout.split()
    assert len(paths) > 1 and all(os.path.getsize(x) <= 100_000 for x in paths)
    assert "96 read, 96 written, 0 rejected" in p.stderr
    manifest = json.load(open(tmp_path / "out" / "train.record.manifest.json"))
    assert manifest["options"]["sample_stages"] == [
        "Resize(Decode('jpg'), (32, 32))",
        "Select[Select('jpg'), Select('cls')]",
    ]
    dataset = Dataset(DEMO, None, [Decode("jpg"), Resize("jpg", (32, 32))], ["jpg", "cls"])
    mem = list(dataset.load("demo-{0..3}.tar", num_workers=2).as_numpy_iterator())
    exact = list(
        tf.data.TFRecordDataset(paths)
        .map(make_record_parser(dataset.element_spec))
        .as_numpy_iterator()
    )
    floats = list(tf.data.TFRecordDataset(paths).map(default_record_parser).as_numpy_iterator())
    assert len(mem) == len(exact) == len(floats) == 96
    for (v, l), (v2, l2), (f, l3) in zip(mem, exact, floats):
        np.testing.assert_array_equal(v, v2)
        np.testing.assert_array_equal(f, tf.image.convert_image_dtype(v, tf.float32).numpy())
        assert l == l2 == l3


def test_cli_bad_ops_is_usage_error(tmp_path):
    p = _cli(
        "convert",
        "demo-0.tar",
        "--base",
        DEMO,
        "-o",
        str(tmp_path / "x.record"),
        "--ops",
        "[Explode(jpg)]",
    )
    assert p.returncode == 2 and "unknown op 'Explode'" in p.stderr
    assert not os.path.exists(tmp_path / "x.record")


def test_dotted_extensions_unquoted():
    """WebDataset shards often hold ``rgb.png``, ``depth.npy``, ``txt.gz``: bare dotted words
    are extensions, as plain words are; a dotted word that is no Python name (``seg.0.png``)
    gets a hint to quote it."""
    conv, sel = load_ops(
        '{conversions: [Decode(rgb.png), "Resize(rgb.png, (8, 8))", '
        '"Rotate(depth.npy, 90)"], selections: [rgb.png, txt.gz]}'
    )
    assert conv[0] == Resize(Decode("rgb.png"), (8, 8))
    assert conv[1].what == "depth.npy"
    assert sel == ["rgb.png", "txt.gz"]
    assert parse_expr("SelectJSON(meta.json, [a])") == SelectJSON("meta.json", ["a"])
    assert parse_expr("Convert(Decode(rgb.png), tf.float32)") == Convert(
        Decode("rgb.png"), "float32"
    )
    with pytest.raises(SpecError, match=r"quote an extension .*seg\.0\.png"):
        parse_expr("Decode(seg.0.png)")
    with pytest.raises(SpecError, match="quote an extension"):
        parse_expr("Decode(seg-0.png)")
    assert parse_expr("Decode('seg-0.png')") == Decode("seg-0.png")
