"""The venv step's progress line (launch/setup.d/venv-progress.bash) moves while pip works:
while fetching, the packages collected and the megabytes of their wheels; while installing,
the packages installed of pip's total and the venv's size.  A line that said "unpacking 228
packages" for 90 s looked like a hang.  Fed a pip log and a venv made here."""

from __future__ import annotations

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(ROOT, "launch", "setup.d", "venv-progress.bash")

EARLIER = "Collecting old-pip\nInstalling collected packages: pip\n"  # an earlier pip call
FETCHING = """Collecting tensorflow<3,>=2.16
  Downloading tensorflow-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl (572.4 MB)
Collecting requests
  Downloading requests-2.34.2-py3-none-any.whl (73 kB)
Collecting numpy
  Using cached numpy-2.1.0-cp311-cp311-manylinux_2_17_x86_64.whl (1.5 GB)
"""
INSTALLING = "Installing collected packages: numpy, requests, tensorflow, zipp\n"


def progress(tmp_path, log_text):
    log = tmp_path / "pip-install.log"
    log.write_text(EARLIER + log_text)
    first = EARLIER.count("\n") + 1
    p = subprocess.run(
        [
            "bash",
            "-c",
            f'source "{LIB}"; venv_progress "$@"',
            "-",
            str(log),
            str(first),
            str(tmp_path / "stamp"),
            str(tmp_path / "venv"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0 and not p.stderr, p.stderr
    return p.stdout.strip()


def test_fetching_counts_packages_and_megabytes(tmp_path):
    # 572.4 MB + 73 kB + 1.5 GB; the earlier call's "Collecting" is not this one's
    assert progress(tmp_path, FETCHING) == "fetching: 3 packages, 2108 MB so far"
    assert progress(tmp_path, "Collecting a\n") == "fetching: 1 packages, 0 MB so far"


def test_installing_counts_the_packages_pip_has_finished(tmp_path):
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "pip-26.3.dist-info").mkdir()  # there before this pip started: not counted
    (tmp_path / "stamp").touch()
    past = os.stat(tmp_path / "stamp").st_mtime - 10
    os.utime(site / "pip-26.3.dist-info", (past, past))
    lines = []
    for name in ("numpy-2.1.0", "requests-2.34.2", "tensorflow-2.21.0"):
        lines.append(progress(tmp_path, FETCHING + INSTALLING))
        (site / f"{name}.dist-info").mkdir()
        (site / name.split("-")[0]).mkdir()
        (site / name.split("-")[0] / "x.so").write_bytes(b"\0" * (2 << 20))
    lines.append(progress(tmp_path, FETCHING + INSTALLING))
    assert [ln.split(",")[0] for ln in lines] == [
        "installing: 0 of 4 packages",
        "installing: 1 of 4 packages",
        "installing: 2 of 4 packages",
        "installing: 3 of 4 packages",
    ]
    # and the venv's size grows with them
    sizes = [int(ln.split("venv ")[1].split(" MB")[0]) for ln in lines]
    assert sizes == sorted(sizes) and sizes[-1] >= 6, lines
