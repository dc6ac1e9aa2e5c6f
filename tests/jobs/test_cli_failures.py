"""The CLI's failure contract: one line ``tar2tf <cmd>: <what> (<where>)`` and the
documented exit code for each failure (pipelines/job/exits.py), a traceback only with
``--debug``; no credential in anything tar2tf writes or prints (transforms/redact.py); no
terminal escapes from names read out of shards; and a full disk left with verified work
only, its size and place said (pipelines/job/cleanup.py).  Real processes, real servers'
absence (closed ports), a real full filesystem (a tmpfs of a few hundred KB)."""

import glob
import io
import json
import os
import subprocess
import tarfile

import pytest
from conftest import DEFAULT_MODE_ENV
from support import shardgen
from support.cli_fixtures import ROOT, cli

from pipelines.job import workfiles

SECRETS = ("s3cr3t", "tok123", "sig456", "amzsig789")


def _lines(p) -> list:
    return [ln for ln in p.stderr.splitlines() if ln.strip()]


def _failure_line(p, code: int, cmd: str = "convert") -> str:
    """The failure's one line (the last; retry warnings may precede it), no traceback."""
    assert p.returncode == code, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    lines = _lines(p)
    assert lines and lines[-1].startswith(f"tar2tf {cmd}: "), p.stderr
    assert all(ln.startswith("WARNING ") for ln in lines[:-1]), p.stderr
    return lines[-1]


def _all_written_text(*dirs) -> str:
    out = []
    for d in dirs:
        for path in glob.glob(os.path.join(str(d), "**"), recursive=True):
            if os.path.isfile(path) and path.endswith((".json", ".jsonl")):
                out.append(open(path, errors="replace").read())
    return "\n".join(out)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("in")
    shardgen.make_shards(str(d), 2, 3, size=(8, 8))
    return d


# -- credentials (item 5) ------------------------------------------------------------------


def _leaky_cases(shards):
    """(store, extra args, env, sources): each makes a listing fail, with a message naming
    an endpoint or path that holds credentials."""
    ais = "http://user:s3cr3t@127.0.0.1:9/?token=tok123&sig=sig456"
    return {
        "ais": (["--ais-endpoint", ais, "--retry-attempts", "1"], {}, ["ais://bkt/x-*.tar"]),
        "gs": (
            ["--retry-attempts", "1"],
            {"STORAGE_EMULATOR_HOST": "http://user:s3cr3t@127.0.0.1:9"},
            ["gs://bkt/x-*.tar"],
        ),
        "local": (
            [],
            {},
            [
                str(shards / "train-0000.tar"),
                str(shards / "gone.tar?X-Amz-Signature=amzsig789&token=tok123"),
            ],
        ),
    }


@pytest.mark.parametrize("store", ["ais", "gs", "local"])
@pytest.mark.parametrize("cmd", ["convert", "pcr"])
@pytest.mark.slow
def test_credentials_never_written_or_printed(shards, tmp_path, store, cmd):
    extra, env, sources = _leaky_cases(shards)[store]
    out = tmp_path / "o"
    summary = tmp_path / "summary.json"
    args = [
        "-v",
        cmd,
        *sources,
        "--output",
        str(out / "t-{}.rec") if cmd == "convert" else str(out),
        "--max-rejects",
        "5",
        "--summary-json",
        str(summary),
        "--no-progress",
        *extra,
    ]
    if cmd == "pcr":
        args += ["--input-format", "tar"]
    p = cli(*args, env=env)
    assert p.returncode in (0, 1, 3), p.stderr  # a listing reject, or a job with nothing to do
    written = _all_written_text(out, tmp_path)
    for s in SECRETS:
        assert s not in p.stderr and s not in p.stdout, p.stderr
        assert s not in written, written
    if store != "local":
        assert "***" in written + p.stderr  # the endpoint is still named, without its secrets


def test_redact_keeps_what_says_where():
    from transforms.redact import printable, redact

    assert (
        redact("could not list ais://b/x at http://u:pw@h:8080/?token=t&x=1")
        == "could not list ais://b/x at http://***@h:8080/?token=***&x=1"
    )
    assert (
        redact("https://s.example/o?X-Amz-Credential=c&X-Amz-Signature=s")
        == "https://s.example/o?X-Amz-Credential=***&X-Amz-Signature=***"
    )
    assert redact("mail me at a@b.c; key: value") == "mail me at a@b.c; key: value"
    assert printable("a\x1b[31mb\x07\n") == "a\\x1b[31mb\\x07\n"


# -- terminal escapes (item 6) -------------------------------------------------------------


def test_member_names_cannot_drive_the_terminal(tmp_path):
    path = tmp_path / "evil.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        for ext, data in (("jpg", b"\xff\xd8"), ("cls", b"1")):
            ti = tarfile.TarInfo(f"ok.{ext}")
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
        link = tarfile.TarInfo("\x1b]0;pwned\x07title.jpg")
        link.type, link.linkname = tarfile.SYMTYPE, "\x1b[31mred\x1b[0m"
        t.addfile(link)
    p = cli(
        "convert",
        str(path),
        "--output",
        str(tmp_path / "o" / "t-{}.rec"),
        "--max-rejects",
        "9",
        "--no-progress",
    )
    assert p.returncode == 0, p.stderr
    assert "symbolic link member" in p.stderr, p.stderr  # the reject is listed...
    assert "\x1b" not in p.stderr and "\x07" not in p.stderr, repr(p.stderr)  # ...escaped
    assert "\\x1b]0;pwned\\x07title" in p.stderr, p.stderr
    rejects = open(tmp_path / "o" / "t.rec.rejects.jsonl").read()
    assert json.loads(rejects.splitlines()[0])["reason"].startswith(
        "symbolic link member \x1b]0;pwned"
    )


# -- one line per failure, the documented code (item 8) -------------------------------------


def test_malformed_google_credentials_are_one_line(shards, tmp_path):
    key = tmp_path / "key.json"
    key.write_text('{"type": "service_account", "private_key": "nope"')
    env = {"GOOGLE_APPLICATION_CREDENTIALS": str(key), "STORAGE_EMULATOR_HOST": ""}
    p = cli(
        "convert",
        str(shards / "train-0000.tar"),
        "--output",
        "gs://bkt/t-{}.rec",
        "--no-progress",
        env=env,
    )
    line = _failure_line(p, 2)
    assert "credentials" in line and str(key) in line, line


def _to_unreachable_ais(shards) -> list:
    """A convert whose output is an AIS cluster that nothing answers for (a closed port)."""
    return [
        "convert",
        str(shards / "train-0000.tar"),
        "--output",
        "ais://bkt/t-{}.rec",
        "--no-progress",
        "--ais-endpoint",
        "http://127.0.0.1:9",
        "--retry-attempts",
        "1",
    ]


def test_unreachable_ais_output_is_one_line(shards):
    p = cli(*_to_unreachable_ais(shards))
    line = _failure_line(p, 1)
    assert "cannot connect" in line and "127.0.0.1:9" in line, line


def test_debug_shows_the_traceback(shards):
    p = cli(*_to_unreachable_ais(shards), "--debug")
    assert p.returncode == 1 and "Traceback (most recent call last)" in p.stderr, p.stderr
    assert _lines(p)[-1].startswith("tar2tf convert: cannot connect"), p.stderr


@pytest.mark.parametrize("debug", [False, True], ids=["one-line", "debug"])
@pytest.mark.slow
def test_a_failure_in_beams_worker_processes_is_one_line(shards, tmp_path, debug):
    """On Beam's local runner (``--runner beam``: its SDK worker processes, not the suite's
    threads), an op that fails inside the job: Beam's workers print and log the traceback of
    each failed bundle, and the user gets tar2tf's one line; ``--debug`` shows the tracebacks."""
    p = cli(
        "convert",
        str(shards / "train-*.tar"),
        "--output",
        str(tmp_path / "o" / "t-{}.rec"),
        "--no-progress",
        "--ops",
        "support.raising_ops:value_error_in_job",
        "--runner",
        "beam",
        *(["--debug"] if debug else []),
        env={"PYTHONPATH": os.path.join(ROOT, "tests"), **DEFAULT_MODE_ENV},
    )
    if debug:
        assert p.returncode == 1 and "Traceback (most recent call last)" in p.stderr, p.stderr
        assert "ERROR apache_beam.runners.worker" in p.stderr, p.stderr
        assert _lines(p)[-1].startswith("tar2tf convert: ValueError: the op cannot be rebuilt")
    else:
        assert _lines(p) == [
            "tar2tf convert: ValueError: the op cannot be rebuilt on this worker"
        ], p.stderr


def test_a_value_error_inside_a_job_is_not_a_usage_error(tmp_path):
    """A tar member name that is not UTF-8 raised ``UnicodeEncodeError`` (a ValueError) in
    the job: it is not bad usage (2).  Either the record is kept or the failure is one line."""
    path = tmp_path / "latin.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT, encoding="latin-1") as t:
        for ext, data in (("jpg", b"\xff\xd8"), ("cls", b"1")):
            ti = tarfile.TarInfo(f"caf\xe9.{ext}")
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    p = cli(
        "convert",
        str(path),
        "--output",
        str(tmp_path / "o" / "t-{}.rec"),
        "--no-progress",
        "--processes",
        "1",
    )
    assert p.returncode != 2, p.stderr
    if p.returncode:
        _failure_line(p, 1)


def test_failed_work_dir_cleanup_after_a_complete_output_is_a_warning(shards, tmp_path):
    """The work directory's parent cannot be changed (immutable, so even root gets
    EPERM): the output is complete and verified, the clean-up fails: exit 0, a warning."""
    root = tmp_path / "wroot"
    (root / "w").mkdir(parents=True)
    subprocess.run(["chattr", "+i", str(root)], check=True)
    try:
        out = tmp_path / "o" / "t-{}.rec"
        p = cli(
            "convert",
            str(shards / "train-{0000..0001}.tar"),
            "--output",
            str(out),
            "--no-progress",
            "--work-dir",
            str(root / "w"),
        )
    finally:
        subprocess.run(["chattr", "-i", str(root)], check=True)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    assert "work directory could not be removed" in p.stderr, p.stderr
    v = cli("verify", str(out))
    assert v.returncode == 0, v.stdout + v.stderr


# -- a full disk (item 9) -----------------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path):
    """A 200 KB tmpfs (the tests run as root; a failing mount fails the test)."""
    d = tmp_path / "small"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(d)], check=True)
    yield d
    subprocess.run(["umount", "-l", str(d)], check=False)


@pytest.mark.parametrize("output", ["t.rec", "t-{}.rec"])
def test_full_disk_is_one_line_and_leaves_only_verified_work(tmp_path, small_fs, output):
    shardgen.make_shards(str(tmp_path / "in"), 6, 10, size=(128, 128))
    args = [
        "convert",
        str(tmp_path / "in" / "train-{0000..0005}.tar"),
        "--output",
        str(small_fs / "o" / output),
        "--no-progress",
        "--records-per-shard",
        "10",
    ]
    p = cli(*args)
    line = _failure_line(p, 1)
    assert "no space left on device" in line, line
    assert len(_lines(p)) == 1, p.stderr
    files = [f for f in glob.glob(str(small_fs / "**"), recursive=True) if os.path.isfile(f)]
    assert not [f for f in files if ".tmp-" in os.path.basename(f)], files  # no partial temp file
    work = [f for f in files if "/.tar2tf-work/" in f]
    for f in work:  # only pieces with their sidecars, and the job's records
        if not f.endswith(".json"):
            assert os.path.exists(workfiles.sidecar_of(f)), f
    held = sum(os.path.getsize(f) for f in work if not f.endswith("job.json"))
    if held:
        assert "kept in" in line and ".tar2tf-work" in line, line
    # with room again, --resume finishes the job
    subprocess.run(["mount", "-o", "remount,size=20m", str(small_fs)], check=True)
    p = cli(*args, "--resume")
    assert p.returncode == 0, p.stderr
    v = cli("verify", str(small_fs / "o" / output))
    assert v.returncode == 0, v.stdout + v.stderr
