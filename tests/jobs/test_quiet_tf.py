"""The Python API prints no TensorFlow CUDA error on a machine without a GPU driver
(``E0000 ... failed call to cuInit``), whether the user imported TensorFlow first (as the
README does) or tar2tf did; and it changes none of the user's settings."""

from __future__ import annotations

import os
import subprocess

import pytest
from support.scripts import run_python

from pipelines.tfdata.tfquiet import _driver_loadable

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "launch", "demo", "shards")

pytestmark = pytest.mark.skipif(
    _driver_loadable(), reason="n/a: a GPU driver is present; the cuInit line would be real"
)


def _run(code: str) -> subprocess.CompletedProcess:
    # a user's environment: no TF_CPP_MIN_LOG_LEVEL (the test runner sets one)
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return run_python(code, env=env)


LOAD = f"""
ds = Dataset({DEMO!r}, selections=["jpg", "cls"]).load("demo-0.tar", num_workers=1)
n = sum(1 for _ in ds)
import os, tensorflow as tf
print(n, os.environ.get("TF_CPP_MIN_LOG_LEVEL"), os.environ.get("CUDA_VISIBLE_DEVICES"),
      [d.device_type for d in tf.config.get_visible_devices()])
"""


@pytest.mark.parametrize("user_imports_tf_first", [True, False])
@pytest.mark.slow
def test_no_cuinit_line(user_imports_tf_first):
    head = "import tensorflow as tf\n" if user_imports_tf_first else ""
    p = _run(head + "from pipelines import Dataset\n" + LOAD)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "cuInit" not in p.stderr, p.stderr[-3000:]
    # every record, and nothing of the user's changed: no log level set, no device hidden
    assert p.stdout.split("\n")[0] == "24 None None ['CPU']", p.stdout


def test_other_stderr_output_is_kept():
    code = (
        "import os, sys, tensorflow as tf\n"
        "from pipelines.tfdata import tfquiet\n"
        "tfquiet._done = False\n"
        "with tfquiet._stderr_without(b'cuInit'):\n"
        "    os.write(2, b'kept line\\nfailed call to cuInit: x\\nlast line\\n')\n"
        "print('after', file=sys.stderr)\n"
    )
    p = _run(code)
    assert p.returncode == 0, p.stderr
    tail = p.stderr.splitlines()[-3:]
    assert tail == ["kept line", "last line", "after"], p.stderr
