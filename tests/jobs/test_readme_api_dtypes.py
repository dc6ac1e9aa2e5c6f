"""The README's Python API example, run as written: the records it writes and reads back
give the same dtypes and shapes as the stream it loads (it read them with
``default_record_parser``, float32 images beside the stream's uint8)."""

from __future__ import annotations

import json
import os
import re

from support.cli_fixtures import ROOT
from support.scripts import run_script_file

REPORT = """
import json as _json

def _specs(spec, batched=False):  # a batched element: a leading batch dimension
    return [[s.dtype.name, s.shape.as_list()[int(batched) :]] for s in tf.nest.flatten(spec)]

print(_json.dumps({"stream": _specs(train.element_spec, True), "records": _specs(records.element_spec)}))
"""


def _api_example() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    section = re.search(r"^## Python API\n(.*?)(?=^## )", text, re.S | re.M).group(1)
    return re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)[0]


def test_readme_api_example_reads_back_the_streams_dtypes(tmp_path):
    # the example names the demo shards relative to the checkout's root
    os.symlink(os.path.join(ROOT, "launch"), tmp_path / "launch")
    p = run_script_file(tmp_path, _api_example() + REPORT)
    assert p.returncode == 0, p.stderr[-3000:]
    specs = json.loads(p.stdout.strip().splitlines()[-1])
    assert specs["stream"] == [["uint8", [32, 32, 3]], ["int32", []]]
    assert specs["records"] == specs["stream"]
    assert (tmp_path / "out" / "api.record.manifest.json").exists()
