"""Every subcommand that reads or writes a store takes the same store flags
(launch/store_args.py): ``verify`` and ``inspect`` of a dataset in an S3-compatible bucket
work with ``--s3-endpoint`` alone, as ``convert`` does, with no environment variable."""

from __future__ import annotations

import json
import os

import pytest
from support.cli_fixtures import cli
from support.range_server import RangeServer

from launch.cli import build_parser, main
from transforms.stores.base import MAX_SECONDS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "launch", "demo", "shards")
STORE_FLAGS = {
    "--ais-endpoint",
    "--s3-endpoint",
    "--http-header",
    "--retry-attempts",
    "--retry-initial",
    "--retry-max",
    "--retry-total",
    "--read-timeout",
}


def _flags(sub) -> set:
    return set(build_parser().subcommands[sub]._option_string_actions)


@pytest.mark.parametrize("sub", ["convert", "pcr", "verify", "inspect"])
def test_every_store_subcommand_has_the_store_flags(sub):
    assert STORE_FLAGS <= _flags(sub), STORE_FLAGS - _flags(sub)


def test_etl_only_where_input_shards_are_read():
    assert "--ais-etl-name" in _flags("convert") and "--ais-etl-name" in _flags("pcr")
    assert "--ais-etl-name" not in _flags("verify") and "--ais-etl-name" not in _flags("inspect")


@pytest.mark.slow
def test_verify_and_inspect_a_bucket_with_the_flags_only(moto_server, s3_env, tmp_path):
    for k in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        assert k not in os.environ  # the endpoint comes from the flag alone
    bucket = moto_server.new_bucket()
    store = ["--s3-endpoint", moto_server.url, "--retry-attempts", "2", "--read-timeout", "20"]
    out = f"s3://{bucket}/out/demo-{{}}.record"
    p = cli(
        "convert",
        os.path.join(DEMO, "demo-{0..1}.tar"),
        "-o",
        out,
        "--max-shard-size",
        "100KB",
        "--type-map",
        "cls:int64",
        "--runner",
        "local",
        "--no-progress",
        *store,
    )
    assert p.returncode == 0, p.stderr
    paths = p.stdout.split()
    assert len(paths) >= 2 and all(x.startswith(f"s3://{bucket}/out/demo-") for x in paths)

    p = cli("verify", f"s3://{bucket}/out/demo.record.manifest.json", *store)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"OK: s3://{bucket}/out/demo.record.manifest.json"), p.stdout
    assert "48 records" in p.stdout, p.stdout

    sheet = tmp_path / "sheet.png"
    p = cli("inspect", paths[0], "-n", "1", "--sheet", str(sheet), *store)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"{paths[0]}: ") and "cls" in p.stdout, p.stdout
    assert sheet.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


SECONDS_FLAGS = ("--retry-initial", "--retry-max", "--retry-total", "--read-timeout")


@pytest.mark.parametrize("value", ["inf", "nan", "1e10", str(MAX_SECONDS + 1)])
@pytest.mark.parametrize("flag", SECONDS_FLAGS)
def test_seconds_beyond_the_maximum_are_a_usage_error(tmp_path, capfd, flag, value):
    """``inf`` (or any count of seconds beyond the stated maximum) is refused when parsed:
    taken, it made every HTTP shard a reject (``OverflowError: timestamp out of range``)."""
    out = tmp_path / "o" / "t-{}.record"
    assert main(["convert", os.path.join(DEMO, "demo-0.tar"), "-o", str(out), flag, value]) == 2
    err = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert err == [
        f"tar2tf convert: argument {flag}: must be a finite number of seconds, "
        f"at most {MAX_SECONDS} (7 days), got {value}"
    ]
    assert not (tmp_path / "o").exists()


def test_seconds_at_the_maximum_read_http_shards(tmp_path):
    """The largest value each seconds flag takes works: the HTTP shards convert."""
    server = RangeServer(DEMO).start()
    try:
        top = str(MAX_SECONDS)
        p = cli(
            "convert",
            server.url + "/demo-{0..1}.tar",
            "-o",
            str(tmp_path / "t-{}.record"),
            *[a for f in SECONDS_FLAGS for a in (f, top)],
            "--runner",
            "local",
            "--no-progress",
        )
    finally:
        server.stop()
    assert p.returncode == 0, p.stderr
    with open(tmp_path / "t.record.manifest.json", encoding="utf-8") as f:
        totals = json.load(f)["totals"]
    assert totals["records_rejected"] == 0 and totals["records_written"] > 0
