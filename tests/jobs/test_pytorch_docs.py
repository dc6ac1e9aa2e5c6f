"""docs/pytorch.md's code, run as written: the demo shards converted as the page says (with
``--dali-index``, padded names) and to PCR, read through the ``tfrecord`` package and
``iter_pcr`` inside the page's ``IterableDataset`` classes.  Every record comes once, in
order within a process, with its source's pixels and label, however the workers split it;
a record read at its ``.idx`` offset is the right one.  torch is a stand-in
(support/torch_standin.py), as the page says."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile

import numpy as np
from PIL import Image
from support.cli_fixtures import DEMO_SHARDS, ROOT, cli
from support.pcr_fixtures import need_jpegtran
from support.torch_standin import write_torch_standin

PAGE = os.path.join(ROOT, "docs", "pytorch.md")

CHECKS = """
import hashlib as _hashlib
import json as _json


def _row(image, label):
    return [_hashlib.sha256(np.ascontiguousarray(image).tobytes()).hexdigest(), int(label)]


def _flat(batches):
    return [_row(image, label) for batch in batches for image, label in batch]


print(_json.dumps({
    "in_order": [_row(*item) for item in TFRecordShards()],
    "loader": _flat(loader),
    "record_at": [record_at(paths[1], 0), record_at(paths[-1], -1)],
    "pcr": [_row(*item) for item in PCRRecords("pcr_out")],
    "pcr_loader": _flat(pcr_loader),
    "pcr_coarse": [_row(*item) for item in PCRRecords("pcr_out", scan_groups=1)],
}))
"""


def _page():
    with open(PAGE) as f:
        text = f.read()
    python = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    console = re.findall(r"^```console\n(.*?)^```", text, re.S | re.M)[0]
    convert = re.search(r"^\$ (tar2tf convert .*?[^\\])$", console, re.S | re.M).group(1)
    return "\n".join(python), shlex.split(convert.replace("\\\n", " "))


def _sources():
    """(sha256 of the pixels, label) of every demo record, in template and tar order."""
    rows = []
    for i in range(4):
        with tarfile.open(os.path.join(DEMO_SHARDS, f"demo-{i}.tar")) as t:
            members = {m.name: t.extractfile(m).read() for m in t.getmembers()}
        for name in [n for n in members if n.endswith(".jpg")]:
            key = name[: -len(".jpg")]
            pixels = np.asarray(Image.open(io.BytesIO(members[name])).convert("RGB"))
            rows.append([hashlib.sha256(pixels.tobytes()).hexdigest(), int(members[key + ".cls"])])
    return rows


def test_pytorch_page_reads_every_record(tmp_path):
    need_jpegtran()
    code, convert = _page()
    os.symlink(os.path.join(ROOT, "launch"), tmp_path / "launch")
    assert convert[:2] == ["tar2tf", "convert"]
    p = cli(*convert[1:], "--no-progress", cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    p = cli(
        "pcr", "launch/demo/shards/demo-{0..3}.tar", "-o", "pcr_out", "--images-per-record",
        "10", "--no-progress", cwd=str(tmp_path),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    (tmp_path / "page.py").write_text(code + CHECKS)
    standin = write_torch_standin(str(tmp_path / "standin"))
    path = os.pathsep.join([standin, ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    run = subprocess.run(
        [sys.executable, "page.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=path),
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    sources = _sources()
    assert len(sources) == 96
    assert got["in_order"] == sources  # one process: every record, in order
    assert sorted(got["loader"]) == sorted(sources)  # two workers: each record once
    # the loader's first worker read the first half of each file, the second the rest
    assert got["loader"] != got["in_order"]
    shards = json.load(open(tmp_path / "out" / "train.record.manifest.json"))["shards"]
    assert len(shards) > 1
    assert got["record_at"] == [sources[shards[0]["records"]][1], sources[-1][1]]
    assert sorted(got["pcr"]) == sorted(got["pcr_loader"]) == sorted(sources)
    # one scan group: fewer bytes, other pixels (the default reads every group)
    assert sorted(got["pcr_coarse"]) != sorted(sources)
