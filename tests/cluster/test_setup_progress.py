"""The venv step of the set-up (launch/setup.d/10-venv.sh) says how far pip got while it
installs, instead of a minute or two of silence, and still ends with a working venv; run
here on a tiny project of its own, in a cache of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEP = os.path.join(ROOT, "launch", "setup.d", "10-venv.sh")

PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "tinyproj"
version = "0.1"
dependencies = [
]

[project.optional-dependencies]
test = []
bench = []

[project.scripts]
tinyproj = "tinyproj:main"

[tool.setuptools]
packages = ["tinyproj"]
"""


def test_venv_step_prints_progress_and_builds(tmp_path):
    proj = tmp_path / "proj"
    (proj / "launch").mkdir(parents=True)
    (proj / "tinyproj").mkdir()
    (proj / "pyproject.toml").write_text(PYPROJECT)
    (proj / "tinyproj" / "__init__.py").write_text("def main():\n    print('tiny')\n")
    (proj / "launch" / "constraints.txt").write_text("# nothing pinned\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    env = dict(
        os.environ,
        TAR2TF_CACHE=str(cache),
        TAR2TF_ROOT=str(proj),
        PYTHON=sys.executable,  # any Python 3; the step makes its own venv from it
        TAR2TF_PROGRESS_EVERY="1",
    )
    p = subprocess.run(["bash", STEP], capture_output=True, text=True, env=env, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stderr.splitlines()
    assert lines[0].startswith("installing dependencies into ") and "log: " in lines[0]
    ticks = [ln for ln in lines if re.fullmatch(r"\[venv\] \d+ s: .+", ln)]
    assert ticks, p.stderr  # pip takes longer than 0.2 s
    # each with numbers that move (launch/setup.d/venv-progress.bash)
    what = r"fetching: \d+ packages, \d+ MB so far|installing: \d+ of \d+ packages, venv \d+ MB"
    assert all(re.fullmatch(r"\[venv\] \d+ s: (" + what + ")", ln) for ln in ticks), ticks
    assert lines[-1].startswith("[venv] done: ")
    py = (cache / "venv-current").read_text().strip()
    assert py.startswith(str(cache / "venv-")) and os.path.exists(
        os.path.join(os.path.dirname(py), "..", ".complete")
    )
    out = subprocess.run(
        [py, "-c", "import tinyproj; tinyproj.main()"], capture_output=True, text=True
    )
    assert out.stdout == "tiny\n", out.stderr
    # a rerun reuses it, silently
    p = subprocess.run(["bash", STEP], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0 and "[venv]" not in p.stderr, p.stderr
