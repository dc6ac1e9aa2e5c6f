"""A newcomer's path, as the README gives it: ``bash launch/demo.sh``, then the Quick
start's commands (activating this checkout's venv first), then the Python API example,
in that order, in one fresh directory, each as written in README.md; and
``launch/venv.sh`` finds this checkout's venv by the set-up's own rule, honouring
``$TAR2TF_CACHE``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _section(text: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, f"README has no section {title!r}"
    return m.group(1)


def _blocks(section: str, lang: str) -> List[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", section, re.S | re.M)


def _commands(block: str) -> List[Tuple[str, List[str]]]:
    """``(command, output lines shown after it)`` of a console block; a command continued
    with a trailing backslash is joined."""
    out: List[Tuple[str, List[str]]] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.startswith("$ "):
            out[-1][1].append(line)
            continue
        cmd = line[2:]
        while cmd.endswith("\\"):
            cmd = cmd[:-1] + " " + lines[i].strip()
            i += 1
        out.append((re.sub(r"\s+#.*$", "", cmd).strip(), []))
    return out


def _readme():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    setup = _commands(_blocks(_section(text, "Install, and the two commands"), "console")[1])
    quick = _commands(_blocks(_section(text, "Quick start"), "console")[0])
    api = _blocks(_section(text, "Python API"), "python")[0]
    return setup, quick, api


def test_readme_commands_run_in_order(tmp_path):
    setup, quick, api = _readme()
    assert [c for c, _ in setup] == ["bash launch/demo.sh", "bash tests/run.sh"]
    assert quick[0][0] == 'source "$(bash launch/venv.sh)"'
    work = tmp_path / "newcomer"
    work.mkdir()
    # the checkout's files, reached through a symlink (the scripts find the real checkout):
    # what the commands write lands here, not in the tree the tests run from
    os.symlink(os.path.join(ROOT, "launch"), work / "launch")
    cmds = [setup[0][0]] + [c for c, _ in quick]  # not tests/run.sh: this is part of it
    script = ["set -uo pipefail"]
    for i, c in enumerate(cmds):
        # { } runs in this shell: the venv that `source` activates stays active
        script.append(
            f"{{ {c} ; }} >out.{i} 2>err.{i}; rc=$?; echo $rc >rc.{i}; [ $rc = 0 ] || exit $rc"
        )
    with open(work / "api.py", "w") as f:
        f.write(api)
    script.append("python api.py >out.api 2>err.api")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV",)}
    # a newcomer's PATH: no venv on it until the README activates one
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if os.path.dirname(sys.executable) != p
    )
    p = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    done = {
        i: (work / f"rc.{i}").read_text().strip()
        for i in range(len(cmds))
        if (work / f"rc.{i}").exists()
    }
    failed = [i for i in range(len(cmds)) if done.get(i) != "0"]
    assert not failed, (
        f"README command {cmds[failed[0]]!r} exited {done.get(failed[0])}:\n"
        + (work / f"err.{failed[0]}").read_text()[-3000:]
    )
    assert p.returncode == 0, (
        "the Python API example failed:\n" + (work / "err.api").read_text()[-3000:]
    )
    # what the commands print on stdout is what the README shows
    for i, (c, shown) in enumerate(quick):
        printed = (work / f"out.{i + 1}").read_text().splitlines()
        if c.startswith("tar2tf convert"):
            assert printed == [s for s in shown if s.endswith(".record")], printed
        elif c.startswith("tar2tf verify"):
            assert printed == shown, printed
    assert (work / "demo-out" / "demo.record.manifest.json").exists()
    assert (work / "out" / "api.record.manifest.json").exists()


def _venv_sh(*args, **env):
    return subprocess.run(
        ["bash", os.path.join(ROOT, "launch", "venv.sh"), *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, **env),
        timeout=600,
    )


def test_venv_sh_is_this_checkouts_venv(tmp_path):
    # the tests run in this checkout's venv, set up under the cache tests/run.sh used
    p = _venv_sh("--python")
    assert p.returncode == 0, p.stderr
    assert os.path.dirname(os.path.dirname(p.stdout.strip())) == sys.prefix
    assert _venv_sh().stdout.strip() == os.path.join(sys.prefix, "bin", "activate")
    # another cache: its own venv of the same key, whatever its venv-current names, and
    # --path sets nothing up
    other = tmp_path / "cache"
    other.mkdir()
    (other / "venv-current").write_text("/elsewhere/venv-000000000000/bin/python\n")
    p = _venv_sh("--path", TAR2TF_CACHE=str(other))
    assert p.returncode == 1
    assert p.stdout.strip() == str(other / os.path.basename(sys.prefix))
    assert sorted(os.listdir(other)) == ["venv-current"]
