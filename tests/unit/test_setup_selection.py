"""tests/run.sh sets up only what the selected tests need (launch/bootstrap.sh --for-tests):
the venv always, a server or Flink only when a selected test is marked with it.  Checked on
a copy of the two scripts with stand-in steps (real runs, nothing slow is built), and on this
checkout in --plan mode for the README's fast loop (nothing is run there: the real steps
build Go programs and Flink)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = sorted(f for f in os.listdir(os.path.join(ROOT, "launch", "setup.d")) if f.endswith(".sh"))


def fast_loop_args(readme: str) -> list:
    """The pytest arguments of the command a README names as the fast loop."""
    m = re.search(r"^\$ bash tests/run\.sh (.*?)\s+# the fast loop", readme, re.M)
    assert m, "the README names no fast loop (`$ bash tests/run.sh ...  # the fast loop`)"
    return shlex.split(m.group(1))


def plan(cache, *args):
    p = subprocess.run(
        ["bash", os.path.join(ROOT, "tests", "run.sh"), "--plan", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, TAR2TF_CACHE=str(cache)),
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    # one line a step: "run STEP", "skip STEP (why)" or "maybe STEP (why)"
    steps = {ln.split(" ")[1]: ln.split(" ")[0] for ln in p.stdout.splitlines()}
    assert sorted(steps) == STEPS, p.stdout
    return steps


def cache_with_venv(tmp_path):
    """A cache without servers or Flink: only the marker naming this venv."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "venv-current").write_text(sys.executable + "\n")
    return cache


@pytest.mark.slow  # collects tests/unit: several seconds
def test_readme_fast_loop_sets_up_the_venv_and_nothing_else(tmp_path):
    readme = open(os.path.join(ROOT, "README.md")).read()
    args = fast_loop_args(readme)
    # tests/README.md names the same command
    assert fast_loop_args(open(os.path.join(ROOT, "tests", "README.md")).read()) == args
    cache = cache_with_venv(tmp_path)
    got = plan(cache, *args)
    assert {n for n, v in got.items() if v == "run"} == {"10-venv.sh", "20-apt.sh"}, got
    assert os.listdir(cache) == ["venv-current"]  # --plan writes nothing


@pytest.mark.slow  # collects a stores and a cluster module
def test_selections_that_need_servers_or_flink_get_them(tmp_path):
    cache = cache_with_venv(tmp_path)
    stores = plan(cache, "tests/stores/test_ais_s3_api.py", "-q")
    assert stores["30-aisnode.sh"] == "run" and stores["50-flink.sh"] == "skip", stores
    flink = plan(cache, "tests/cluster/test_flink.py")
    assert flink["50-flink.sh"] == flink["51-flink-dist.sh"] == "run", flink
    assert flink["30-aisnode.sh"] == "skip", flink
    # the servers' own marker deselected: no server
    none = plan(cache, "tests/stores/test_ais_s3_api.py", "-m", "not ais")
    assert none["30-aisnode.sh"] == "skip", none


def test_the_whole_suite_and_a_fresh_cache_plan_everything(tmp_path):
    # no arguments: the whole suite, every step (no collection needed)
    assert set(plan(tmp_path).values()) == {"run"}
    # no venv yet to collect with: the marked steps are "maybe", never silently skipped
    got = plan(tmp_path, "tests/unit")
    assert got["10-venv.sh"] == "run" and got["30-aisnode.sh"] == "maybe", got
    assert os.listdir(tmp_path) == []


FAKE_STEP = """#!/usr/bin/env bash
{header}
echo {name} >> "$TAR2TF_CACHE/ran"
{body}
"""


def fake_checkout(tmp_path):
    """run.sh and bootstrap.sh of this checkout over stand-in steps (each notes that it ran)
    and three tests: one plain, one marked ais, one marked flink."""
    root = tmp_path / "checkout"
    (root / "launch" / "setup.d").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "launch", "bootstrap.sh"), root / "launch")
    steps = {
        "10-venv.sh": ("", 'echo "$FAKE_PY" > "$TAR2TF_CACHE/venv-current"'),
        "30-server.sh": ("# setup-for-marker: ais", ""),
        "50-jvm.sh": ("# setup-for-marker: flink", ""),
    }
    for name, (header, body) in steps.items():
        (root / "launch" / "setup.d" / name).write_text(
            FAKE_STEP.format(header=header, name=name, body=body)
        )
    (root / "tests" / "support").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "tests", "run.sh"), root / "tests")
    (root / "tests" / "support" / "__init__.py").write_text("")
    shutil.copy(
        os.path.join(ROOT, "tests", "support", "setup_needs.py"), root / "tests" / "support"
    )
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    ais: a\n    flink: f\n")
    for group, mark in (("unit", None), ("stores", "ais"), ("cluster", "flink")):
        (root / "tests" / group).mkdir()
        deco = f"@pytest.mark.{mark}\n" if mark else ""
        (root / "tests" / group / f"test_{group}.py").write_text(
            f"import pytest\n\n\n{deco}def test_{group}():\n    pass\n"
        )
    return root


@pytest.mark.parametrize(
    "args, built",
    [
        (["tests/unit"], ["10-venv.sh"]),
        (["tests/stores", "-q"], ["10-venv.sh", "30-server.sh"]),
        (["-m", "not ais"], ["10-venv.sh", "50-jvm.sh"]),
        ([], ["10-venv.sh", "30-server.sh", "50-jvm.sh"]),
    ],
    ids=["unit", "stores", "not-ais", "everything"],
)
def test_run_sh_builds_only_what_the_selection_needs(tmp_path, args, built):
    root = fake_checkout(tmp_path)
    cache = tmp_path / "cache"
    env = dict(os.environ, TAR2TF_CACHE=str(cache), FAKE_PY=sys.executable)
    env.pop("PYTHONPATH", None)  # the stand-in checkout's tests, not this one's
    p = subprocess.run(
        ["bash", str(root / "tests" / "run.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert (cache / "ran").read_text().split() == built, p.stderr
    assert re.search(r"\b\d+ passed", p.stdout), p.stdout  # and the tests ran
    if args:  # a skipped step says why
        for name in {"30-server.sh", "50-jvm.sh"} - set(built):
            assert f"[bootstrap] {name}: skipped, no selected test is marked" in p.stderr
