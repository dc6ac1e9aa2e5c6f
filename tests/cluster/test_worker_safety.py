"""Worker processes and what they may pick up from where the user runs tar2tf:

* nothing imported from the current directory (a hostile ``google_crc32c.py``, ``yaml.py``,
  ``braceexpand.py`` or a project's own ``transforms/`` / ``pipelines/`` package there),
  on both drivers' workers, while ``$PYTHONPATH`` still reaches them;
* the in-process driver's worker processes log redacted and escaped, as the CLI's process
  does (a retry warning naming a URL with a password and a token, a server's reason phrase
  with terminal escapes);
* :func:`transforms.redact.redact` keeps the text after a hidden value.
"""

from __future__ import annotations

import http.server
import os
import shutil
import socketserver
import subprocess
import sys
import threading

import pytest
from conftest import DEFAULT_MODE_ENV
from support import shardgen
from support.cli_fixtures import ROOT

from pipelines.worker_python import python_c
from transforms.redact import printable, redact

HOSTILE_MODULES = ("google_crc32c", "yaml", "braceexpand", "crcmod", "cloudpickle")
HOSTILE_PACKAGES = ("transforms", "pipelines")


def _hostile_dir(path) -> str:
    """A directory whose modules, if imported, leave a marker and fail the import."""
    os.makedirs(path)
    body = (
        "import os\n"
        "open(os.path.join({d!r}, 'IMPORTED-' + __name__), 'w').close()\n"
        "raise SystemExit('hostile ' + __name__ + ' imported from the current directory')\n"
    )
    for name in HOSTILE_MODULES:
        with open(os.path.join(path, name + ".py"), "w") as f:
            f.write(body.format(d=str(path)))
    for name in HOSTILE_PACKAGES:
        os.makedirs(os.path.join(path, name))
        with open(os.path.join(path, name, "__init__.py"), "w") as f:
            f.write(body.format(d=str(path)))
    return str(path)


def _tar2tf(*args, cwd: str, env: dict) -> subprocess.CompletedProcess:
    """The CLI as an installed ``tar2tf`` runs: its console script (whose own path entry is
    its bin directory, not the current directory)."""
    script = shutil.which("tar2tf", path=os.path.dirname(sys.executable))
    cmd = (
        [script]
        if script
        else python_c("import sys; from launch.cli import main; sys.exit(main())")
    )
    return subprocess.run(
        [*cmd, *args],
        cwd=cwd,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **env),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    "mode",
    [["--runner", "local", "--processes", "2"], ["--direct_num_workers=2"]],
    ids=["local-workers", "beam-workers"],
)
def test_workers_import_nothing_from_the_current_directory(tmp_path, mode):
    hostile = _hostile_dir(tmp_path / "project")
    shardgen.make_shards(str(tmp_path / "in"), 2, 3, size=(32, 24))
    pids = tmp_path / "pids"
    pids.mkdir()
    env = {
        # the op module comes from $PYTHONPATH: it must still reach the workers
        "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]),
        "TAR2TF_TEST_PID_DIR": str(pids),
        **DEFAULT_MODE_ENV,  # Beam's worker processes, as a user gets them
    }
    p = _tar2tf(
        "convert",
        str(tmp_path / "in" / "train-{0000..0001}.tar"),
        "--output",
        str(tmp_path / "o" / "t-{}.record"),
        "--ops",
        "support.slow_ops:pid_ops",
        "--no-progress",
        *mode,
        cwd=hostile,
        env=env,
    )
    markers = sorted(n for n in os.listdir(hostile) if n.startswith("IMPORTED-"))
    assert not markers, f"imported from the current directory: {markers}\n{p.stderr}"
    assert p.returncode == 0, p.stderr
    assert os.path.exists(tmp_path / "o" / "t.record.manifest.json")
    # the op ran in worker processes (not in the launcher), which found it on $PYTHONPATH
    cmdlines = [open(pids / n, "rb").read().split(b"\0") for n in os.listdir(pids)]
    assert cmdlines and all(b"-c" in c for c in cmdlines), cmdlines


def test_worker_command_drops_the_current_directory(tmp_path):
    """What the command line itself guarantees, on this interpreter: no current directory
    on ``sys.path`` (``-P`` on 3.11+, the prelude on 3.10), ``$PYTHONPATH`` kept."""
    hostile = _hostile_dir(tmp_path / "project")
    extra = str(tmp_path / "extra")
    os.makedirs(extra)
    code = "import sys, json; print(json.dumps(sys.path)); import yaml"
    p = subprocess.run(
        python_c(code),
        cwd=hostile,
        env=dict(os.environ, PYTHONPATH=extra),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    import json

    path = json.loads(p.stdout)
    assert "" not in path and hostile not in path and extra in path, path
    assert not [n for n in os.listdir(hostile) if n.startswith("IMPORTED-")]


# -- item: the pool's workers log as the CLI's process does --------------------------------

PASSWORD, TOKEN = "PW-SECRET-1", "TOKSECRET2"
ESC_REASON = "Busy \x1b]0;pwned\x07\x1b[31mred"


class _Busy(http.server.BaseHTTPRequestHandler):
    """Every GET: 503 with a reason phrase holding terminal escapes."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(503, ESC_REASON)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


@pytest.fixture
def busy_server():
    srv = _Server(("127.0.0.1", 0), _Busy)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_pool_workers_log_redacted_and_escaped(tmp_path, busy_server):
    base = f"http://bob:{PASSWORD}@127.0.0.1:{busy_server}/d"
    p = _tar2tf(
        "convert",
        f"{base}/train-{{0..3}}.tar?token={TOKEN}",
        "--output",
        str(tmp_path / "o" / "t-{}.record"),
        "--ops",
        "support.slow_ops:slow_ops",  # work per record: the shards go to worker processes
        "--runner",
        "local",
        "--processes",
        "2",
        "--retry-attempts",
        "2",
        "--retry-initial",
        "0.01",
        "--max-rejects",
        "10",
        "--no-progress",
        cwd=str(tmp_path),
        env={"PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests")])},
    )
    err = p.stderr
    # the retry warnings came (from the workers: the launcher opens no shard)
    assert "transient fault" in err, err
    assert PASSWORD not in err and TOKEN not in err, err
    assert "\x1b" not in err and "\x07" not in err, err
    assert "\\x1b]0;pwned\\x07" in err, err  # shown escaped, not dropped
    assert "WARNING tar2tf.retry: " in err, err  # the CLI's format, in the workers too


def test_redaction_keeps_the_text_after_a_hidden_value():
    assert redact("(see http://h/x?token=TOK), then") == "(see http://h/x?token=***), then"
    assert redact("at h/x?token=TOK).") == "at h/x?token=***)."
    assert redact("[h/x?sig=S1&token=T2]; next") == "[h/x?sig=***&token=***]; next"
    assert redact("said Authorization: Bearer XYZ), ok") == "said Authorization: Bearer ***), ok"
    # punctuation inside a value is still hidden, with the value
    assert redact("h/x?token=a,b)c&x=1") == "h/x?token=***&x=1"
    assert redact("h/x?token=a.b.c done") == "h/x?token=*** done"
    assert printable("u?token=T\x1b[1m), \x1b[2J") == "u?token=***), \\x1b[2J"
    # linear in a long run of such punctuation (a member name can be long)
    import time

    t = time.monotonic()
    assert redact("?token=" + ")" * 200_000 + "x") == "?token=***"
    assert time.monotonic() - t < 2


@pytest.mark.parametrize(
    "mode",
    [["--runner", "local", "--processes", "2"], ["--direct_num_workers=2"]],
    ids=["local-workers", "beam-workers"],
)
def test_ops_beside_the_launcher_still_reach_the_workers(tmp_path, mode):
    """``python -m launch.cli --ops myops:ops`` run from the directory holding ``myops.py``
    (the launcher imports it from there): its workers get the launcher's path, so they
    import it too, though their own current directory is off their path."""
    ops_dir = tmp_path / "mine"
    ops_dir.mkdir()
    (ops_dir / "myops.py").write_text(
        "import os\n"
        "from transforms.ops import Func\n\n\n"
        "def note(record):\n"
        "    path = os.path.join(os.environ['TAR2TF_TEST_PID_DIR'], str(os.getpid()))\n"
        "    with open('/proc/self/cmdline', 'rb') as src, open(path, 'wb') as dst:\n"
        "        dst.write(src.read())\n"
        "    return record\n\n\n"
        "def ops():\n"
        "    return [Func(note)]\n"
    )
    shardgen.make_shards(str(tmp_path / "in"), 2, 3, size=(32, 24))
    pids = tmp_path / "pids"
    pids.mkdir()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.cli",
            "convert",
            str(tmp_path / "in" / "train-{0000..0001}.tar"),
            "--output",
            str(tmp_path / "o" / "t-{}.record"),
            "--ops",
            "myops:ops",
            "--no-progress",
            *mode,
        ],
        cwd=str(ops_dir),
        env=dict(
            os.environ,
            PYTHONPATH=ROOT,
            TAR2TF_TEST_PID_DIR=str(pids),
            TF_CPP_MIN_LOG_LEVEL="3",
            **DEFAULT_MODE_ENV,
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    # in the workers (python -P -c ...), not in the launcher (python -m launch.cli)
    cmdlines = [open(pids / n, "rb").read().split(b"\0") for n in os.listdir(pids)]
    assert cmdlines and all(b"-c" in c and b"launch.cli" not in c for c in cmdlines), cmdlines
