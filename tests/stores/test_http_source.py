"""Shards read over HTTP: a real HTTP/1.1 server with Range/ETag support on loopback
(tests/support/range_server.py) behind the fault-injecting proxy (tests/support/faultproxy.py).

Under every fault the output is byte-identical to the local run, or the rejects say
exactly which shard failed and why.  Headers given for private hubs reach the server and
appear in no output, log or record."""

from __future__ import annotations

import json
import os
import re

import pytest
from support import shardgen
from support.cli_fixtures import cli, tree_text
from support.faultproxy import FaultProxy
from support.range_server import NOT_FOUND_PAGE, RangeServer, replace_file

from pipelines.beam.convert import convert
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from transforms.stores import StoreConfig, get_store
from transforms.stores.http_headers import HEADERS_ENV
from transforms.tar.sources import resolve

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N_SHARDS, PER_SHARD = 4, 6
OPTS = dict(max_shard_size="5KB", type_map={"cls": "int64"})
BEAM = ["--direct_num_workers=2"]
FAST = StoreConfig(
    retry_attempts=5, retry_initial_s=0.01, retry_max_s=0.05, retry_total_s=30.0, read_timeout_s=5.0
)
TEMPLATE = "train-{0000..0003}.tar"
SECRET = "Bearer tar2tf-http-secret-7d41c0"


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """The input shards and the reference output of a local-to-local run."""
    d = tmp_path_factory.mktemp("www")
    paths = shardgen.make_shards(str(d), N_SHARDS, PER_SHARD, size=(32, 24))
    out = tmp_path_factory.mktemp("ref")
    res = convert(
        ConvertConfig(
            sources=str(d / TEMPLATE), output=str(out / "train-{}.record"), progress=False, **OPTS
        ),
        BEAM,
    )
    assert res.exit_code == 0 and len(res.paths) >= 3
    return str(d), paths, [open(p, "rb").read() for p in res.paths], res.manifest["totals"]


@pytest.fixture(scope="module")
def server(shards):
    s = RangeServer(shards[0]).start()
    yield s
    s.stop()


@pytest.fixture()
def proxy(server):
    p = FaultProxy(server.url).start()
    yield p
    p.stop()


def _convert(sources, out, **kw):
    res = convert(
        ConvertConfig(
            sources=sources,
            output=str(out / "train-{}.record"),
            progress=False,
            store=kw.pop("store", FAST),
            **{**OPTS, **kw},
        ),
        BEAM,
    )
    return res, [open(p, "rb").read() for p in res.paths]


def _shard_re(i: int) -> str:
    return rf"^/train-{i:04d}\.tar$"


def test_convert_from_http_matches_local_run(shards, proxy, tmp_path):
    _, _, ref, ref_totals = shards
    res, got = _convert(f"{proxy.url}/{TEMPLATE}", tmp_path)
    assert res.exit_code == 0 and got == ref
    assert (
        res.manifest["totals"]["records_written"]
        == ref_totals["records_written"]
        == N_SHARDS * PER_SHARD
    )
    # no listing: one GET per shard, nothing else
    assert sorted(p for m, p, _, _ in proxy.log) == [f"/train-{i:04d}.tar" for i in range(N_SHARDS)]
    assert {m for m, _, _, _ in proxy.log} == {"GET"}


def test_resets_short_bodies_and_503_bursts_change_no_byte(shards, server, proxy, tmp_path):
    _, paths, ref, _ = shards
    size = os.path.getsize(paths[1])
    proxy.add("reset", "GET", _shard_re(1), times=2, after=size // 3)
    proxy.add("truncate", "GET", _shard_re(2), times=1, after=size // 2)
    proxy.add("status", "GET", _shard_re(3), times=3, status=503)
    proxy.add("status", "GET", _shard_re(0), times=1, status=502)
    del server.requests[:]
    res, got = _convert(f"{proxy.url}/{TEMPLATE}", tmp_path)
    assert proxy.faults() == 7
    assert res.exit_code == 0 and got == ref and res.manifest["rejects"]["count"] == 0
    # the broken bodies resumed where they broke, with a range request
    ranges = [r for m, p, r, s in server.requests if p == "/train-0001.tar" and r]
    assert ranges and all(re.fullmatch(r"bytes=\d+-", r) for r in ranges)
    assert int(ranges[0][6:-1]) > 0
    assert any(p == "/train-0002.tar" and r and s == 206 for m, p, r, s in server.requests)


def test_a_server_without_ranges_is_read_again_from_the_start(shards, tmp_path):
    root, paths, ref, _ = shards
    plain = RangeServer(root, ranges=False).start()
    proxy = FaultProxy(plain.url).start()
    try:
        proxy.add("reset", "GET", _shard_re(2), times=1, after=os.path.getsize(paths[2]) // 2)
        res, got = _convert(f"{proxy.url}/{TEMPLATE}", tmp_path)
        assert proxy.faults() == 1 and res.exit_code == 0 and got == ref
        # asked again from the start (no Range: the server did not offer ranges)
        again = [(r, s) for m, p, r, s in plain.requests if p == "/train-0002.tar"]
        assert again == [(None, 200), (None, 200)]
    finally:
        proxy.stop()
        plain.stop()


def test_a_shard_replaced_mid_read_is_a_fetch_reject_not_a_splice(shards, tmp_path):
    root, paths, ref, ref_totals = shards
    www = tmp_path / "www"
    shardgen.make_shards(str(www), N_SHARDS, PER_SHARD, size=(32, 24))
    # another version of shard 1: other records, and larger (a longer resume offset still fits)
    new_bytes = open(
        shardgen.write_tar(
            str(tmp_path / "v2.tar"), shardgen.sample_members(500, 2 * PER_SHARD, (32, 24))
        ),
        "rb",
    ).read()
    srv = RangeServer(str(www)).start()
    proxy = FaultProxy(srv.url).start()
    try:
        target = str(www / "train-0001.tar")
        proxy.add(
            "reset",
            "GET",
            _shard_re(1),
            times=1,
            after=os.path.getsize(target) // 2,
            then=lambda: replace_file(target, new_bytes),
        )
        res, _ = _convert(f"{proxy.url}/{TEMPLATE}", tmp_path / "out", max_rejects=100)
        rejects = [json.loads(line) for line in open(res.rejects_path)] if res.rejects_path else []
        t = res.manifest["totals"]
        assert (
            proxy.faults() == 1
            and res.exit_code == 0
            and res.manifest["rejects"]["count"] == len(rejects)
        )
        url = f"{proxy.url}/train-0001.tar"
        fetch = [r for r in rejects if r["stage"] == "fetch"]
        assert fetch and all(r["shard"] == url for r in rejects)
        assert any(
            "object changed while being read" in r["reason"] and "ETag" in r["reason"]
            for r in fetch
        )
        # the records read before the break are kept; nothing of the new version got in
        assert t["records_read"] == t["records_written"] + t["records_rejected"] + t.get(
            "records_filtered", 0
        )
        assert N_SHARDS * PER_SHARD - PER_SHARD <= t["records_written"] < N_SHARDS * PER_SHARD
    finally:
        proxy.stop()
        srv.stop()


def test_404_and_an_html_page_are_rejects_naming_the_url(shards, server, proxy, tmp_path):
    _, _, ref, _ = shards
    page = b"<!DOCTYPE html>\n<html><body>Please sign in</body></html>\n"
    proxy.add(
        "status", "GET", _shard_re(2), times=1, status=200, body=page, content_type="text/html"
    )
    res, _ = _convert(f"{proxy.url}/train-{{0000..0004}}.tar", tmp_path, max_rejects=10)
    rejects = [json.loads(line) for line in open(res.rejects_path)]
    got = {(r["shard"], r["stage"]) for r in rejects}
    missing, html = f"{proxy.url}/train-0004.tar", f"{proxy.url}/train-0002.tar"
    assert got == {(missing, "fetch"), (html, "tar")}
    by = {r["shard"]: r["reason"] for r in rejects}
    assert by[missing] == f"missing shard: {missing} does not exist"
    assert by[html].startswith(f"not a tar archive: {html} is an HTML page")
    assert res.manifest["totals"]["records_written"] == (N_SHARDS - 1) * PER_SHARD
    # the 404 came from the server itself (with its HTML page, which never reaches the tar reader)
    assert ("GET", "/train-0004.tar", None, 404) in server.requests


def test_a_glob_over_http_is_a_usage_error(server, tmp_path):
    with pytest.raises(ValueError, match="a glob needs a listing and HTTP has none"):
        resolve(f"{server.url}/train-*.tar")
    # '?' starts a query string: not a glob
    urls, rejects = resolve(f"{server.url}/train-{{0000..0001}}.tar?download=true")
    assert (
        urls == [f"{server.url}/train-{i:04d}.tar?download=true" for i in range(2)]
        and rejects == []
    )
    r = cli(
        "convert",
        f"{server.url}/train-*.tar",
        "-o",
        str(tmp_path / "o/x-{}.record"),
        "--no-progress",
        timeout=300,
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("tar2tf convert: ")
    assert "a glob needs a listing" in r.stderr


def test_store_reads_seeks_and_sizes(shards, server):
    _, paths, _, _ = shards
    data = open(paths[0], "rb").read()
    store = get_store(server.url + "/", FAST)
    url = f"{server.url}/train-0000.tar"
    assert store.size(url) == len(data) and store.exists(url) and not store.exists(url + "x")
    with store.open_read(url) as f:
        assert f.read(100) == data[:100]
        f.raw.seek(5000)
        assert f.raw.read(1000) == data[5000:6000]
    with pytest.raises(ValueError, match="read-only"):
        store.open_write(url)


def test_dataset_load_over_http_matches_local(shards, server, tmp_path):
    from pipelines import Dataset

    root = shards[0]
    local = Dataset(root).load("train-{0000..0001}.tar", path=str(tmp_path / "a/x.record"))
    remote = Dataset(server.url).load("train-{0000..0001}.tar", path=str(tmp_path / "b/x.record"))
    assert [open(p, "rb").read() for p in remote] == [open(p, "rb").read() for p in local]
    mem_local = list(
        Dataset(root).load("train-{0000..0001}.tar", remote_exec=False).as_numpy_iterator()
    )
    mem_http = list(
        Dataset(server.url + "/")
        .load("train-{0000..0001}.tar", remote_exec=False)
        .as_numpy_iterator()
    )
    assert len(mem_http) == len(mem_local) == 2 * PER_SHARD
    assert all((a[0] == b[0]).all() and a[1] == b[1] for a, b in zip(mem_local, mem_http))


@pytest.mark.slow
def test_cli_http_headers_reach_the_server_and_no_artifact(shards, proxy, tmp_path):
    _, _, ref, _ = shards
    out = tmp_path / "out"
    summary = tmp_path / "summary.json"
    env = {HEADERS_ENV: "X-Hub-Token: from-env-5e2b"}
    proxy.add(
        "status",
        "GET",
        _shard_re(3),
        times=1,
        status=404,
        body=NOT_FOUND_PAGE,
        content_type="text/html",
    )
    r = cli(
        "convert",
        f"{proxy.url}/{TEMPLATE}",
        "-o",
        str(out / "train-{}.record"),
        "--max-shard-size",
        "5KB",
        "--type-map",
        "cls:int64",
        "--http-header",
        f"Authorization: {SECRET}",
        "--max-rejects",
        "1",
        "--retry-initial",
        "0.01",
        "--summary-json",
        str(summary),
        "--no-progress",
        "--direct_num_workers=2",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    gets = [h for h in proxy.headers]
    assert len(gets) == N_SHARDS and all(h.get("Authorization") == SECRET for h in gets)
    assert all(h.get("X-Hub-Token") == "from-env-5e2b" for h in gets)
    assert summary.exists()
    everything = r.stdout + r.stderr + tree_text(str(out), str(summary))
    assert "train-0003.tar" in everything  # the reject is there, naming the shard
    for secret in (SECRET, "tar2tf-http-secret", "from-env-5e2b"):
        assert secret not in everything
    # a header that is not 'Name: value' is a usage error that does not echo the value
    bad = cli(
        "convert",
        f"{proxy.url}/{TEMPLATE}",
        "-o",
        str(tmp_path / "b/x-{}.record"),
        "--http-header",
        "Bearer sekrit-value",
        timeout=300,
    )
    assert bad.returncode == 2 and "sekrit-value" not in bad.stderr + bad.stdout
    assert "expected 'Name: value'" in bad.stderr


def test_pcr_from_http(tmp_path):
    from support.pcr_fixtures import encode, make_tar, need_jpegtran, photo

    need_jpegtran()
    from pipelines.beam.pcr import PcrConfig, convert_pcr

    www = tmp_path / "www"
    www.mkdir()
    images = [
        (f"s/{i}", {"jpg": encode(photo(n, (48, 40))), "cls": str(i).encode()})
        for i, n in enumerate(("chelsea", "coffee", "rocket"))
    ]
    make_tar(str(www / "a-0.tar"), images[:2])
    make_tar(str(www / "a-1.tar"), images[2:])
    srv = RangeServer(str(www)).start()
    proxy = FaultProxy(srv.url).start()
    try:
        proxy.add("reset", "GET", r"^/a-0\.tar$", times=1, after=3000)
        outs = {}
        for name, src in (
            ("local", str(www / "a-{0..1}.tar")),
            ("http", f"{proxy.url}/a-{{0..1}}.tar"),
        ):
            res = convert_pcr(
                PcrConfig(
                    sources=[src],
                    output=str(tmp_path / name),
                    images_per_record=2,
                    seed=1,
                    store=FAST,
                ),
                BEAM,
            )
            assert res.totals["records_written"] == 3 and res.totals["records_rejected"] == 0
            outs[name] = {os.path.basename(p): open(p, "rb").read() for p in res.paths}
        assert proxy.faults() == 1 and outs["http"] == outs["local"]
    finally:
        proxy.stop()
        srv.stop()


def test_http_headers_travel_in_the_config_and_stay_out_of_the_record(monkeypatch, tmp_path):
    """The headers reach every worker with the pickled config (a remote worker does not
    see the launcher's environment), are never in job.json / the manifest (the job's
    description) nor the config's repr, and never go into this process's environment,
    where a later job would inherit them."""
    import pickle

    from launch import cli
    from launch.cmd_convert import build_config
    from pipelines.job.lifecycle import job_of

    monkeypatch.delenv(HEADERS_ENV, raising=False)

    def config(*headers):
        argv = ["convert", "http://127.0.0.1:9/x-{0..1}.tar", "-o", str(tmp_path / "x-{}.record")]
        for h in headers:
            argv += ["--http-header", h]
        args, _ = cli.build_parser().parse_known_args(argv)
        return build_config(args)

    cfg = config(f"Authorization: {SECRET}")
    assert HEADERS_ENV not in os.environ
    assert pickle.loads(pickle.dumps(cfg)).store.http_headers == (("Authorization", SECRET),)
    assert SECRET not in json.dumps(job_of(cfg, ["http://127.0.0.1:9/x-0.tar"])) + repr(cfg)
    assert config().store.http_headers == ()  # the next job in this process has none
