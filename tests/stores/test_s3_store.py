"""s3:// against a real S3-compatible server on loopback (moto's standalone server,
tests/support/s3_fixtures.py), with faults injected by a proxy between client and server: paged
listing, streamed reads that resume after a reset, atomic whole-object writes (multipart
completed only on success), conversion from and to a bucket byte-identical to the local
run, and credentials in no artifact."""

from __future__ import annotations

import json
import os
import random
import re

import pytest
from support.cli_fixtures import cli, tree_text
from support.faultproxy import FaultProxy
from support.objstore_fixtures import BEAM, OPTS
from support.s3_fixtures import ACCESS_KEY, SECRET_KEY

from pipelines.beam.convert import convert
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from transforms.stores import StoreConfig, get_store
from transforms.stores.retry import ObjectChangedError
from transforms.tar.sources import resolve

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAST = dict(
    retry_attempts=5, retry_initial_s=0.01, retry_max_s=0.05, retry_total_s=30.0, read_timeout_s=5.0
)


@pytest.fixture()
def s3(moto_server, s3_env):
    """A fresh bucket, and a proxy in front of the server (clean unless a test adds rules)."""
    proxy = FaultProxy(moto_server.url).start()
    bucket = moto_server.new_bucket()
    yield moto_server, bucket, proxy, StoreConfig(s3_endpoint=proxy.url, **FAST)
    proxy.stop()


def _obj_re(bucket: str, key: str) -> str:
    return "^" + re.escape(f"/{bucket}/{key}") + r"(\?|$)"


def test_list_is_paged_and_survives_a_failed_page(s3):
    server, bucket, proxy, cfg = s3
    for i in range(7):
        server.put(bucket, f"p/obj-{i}", b"x")
    server.put(bucket, "q/other", b"y")
    store = get_store(f"s3://{bucket}/", StoreConfig(**{**cfg.__dict__, "list_page_size": 3}))
    want = [f"s3://{bucket}/p/obj-{i}" for i in range(7)]
    assert list(store.list(f"s3://{bucket}/p/")) == want
    assert proxy.count("GET", rf"^/{bucket}\?list-type=2|^/{bucket}/?\?.*list-type=2") == 3
    proxy.clear()
    proxy.add("status", "GET", rf"^/{bucket}/?\?", skip=1, times=1, status=503)
    assert list(store.list(f"s3://{bucket}/p/")) == want
    assert proxy.faults() == 1
    # a glob resolves against the listing; a name it lacks is a list reject
    urls, rejects = resolve(f"s3://{bucket}/p/obj-[0-2]", config=cfg)
    assert urls == want[:3] and rejects == []
    urls, rejects = resolve(f"s3://{bucket}/p/obj-{{5..8}}", config=cfg)
    assert urls == want[5:] and [r.stage for r in rejects] == ["list", "list"]
    assert list(store.list(f"s3://no-such-bucket-{bucket}/x")) == []


def test_streamed_read_resumes_after_a_reset_and_refuses_another_version(s3):
    server, bucket, proxy, cfg = s3
    data = random.Random(3).randbytes(700_000)
    server.put(bucket, "d/blob.bin", data)
    store = get_store(f"s3://{bucket}/", cfg)
    url = f"s3://{bucket}/d/blob.bin"
    assert store.size(url) == len(data) and store.exists(url) and not store.exists(url + "x")
    proxy.add("reset", "GET", _obj_re(bucket, "d/blob.bin"), times=2, after=200_000)
    with store.open_read(url) as f:
        assert f.read() == data
        assert f.raw.reopens == 2
    ranges = [h.get("Range") for h in proxy.headers if h.get("Range")]
    assert len(ranges) == 2 and all(
        re.fullmatch(r"bytes=\d+-", r) and r != "bytes=0-" for r in ranges
    )
    assert all(h.get("If-Match") for h in proxy.headers if h.get("Range"))
    # replaced between a reset and the resume: the read fails instead of splicing versions
    proxy.clear()
    proxy.add(
        "reset",
        "GET",
        _obj_re(bucket, "d/blob.bin"),
        times=1,
        after=100_000,
        then=lambda: server.put(bucket, "d/blob.bin", data[::-1]),
    )
    with store.open_read(url) as f:
        with pytest.raises(ObjectChangedError, match="412"):
            f.read()
    with pytest.raises(FileNotFoundError, match="not found"):
        store.open_read(f"s3://{bucket}/d/none")


def test_writes_are_atomic_and_multipart_is_completed_only_on_success(s3):
    server, bucket, proxy, cfg = s3
    store = get_store(f"s3://{bucket}/", cfg)
    store.multipart_at, store.part_size = 6 << 20, 5 << 20  # S3's smallest part: 5 MiB
    big = random.Random(5).randbytes(12 << 20)
    # a 503 on the second part: that part is sent again, the upload completes once
    proxy.add("status", "PUT", rf"^/{bucket}/out/big\?.*partNumber=2", times=1, status=503)
    with store.open_write(f"s3://{bucket}/out/big") as f:
        f.write(big)
    assert proxy.faults() == 1 and server.get(bucket, "out/big") == big
    assert proxy.count("POST", rf"^/{bucket}/out/big\?uploadId=") == 1  # one completion
    assert proxy.count("PUT", rf"^/{bucket}/out/big\?.*partNumber=") == 4  # 3 parts + 1 resent
    # a writer that fails: nothing visible, the multipart upload aborted (no parts left)
    with pytest.raises(KeyError):
        with store.open_write(f"s3://{bucket}/out/failed") as f:
            f.write(big)
            raise KeyError("boom")
    proxy.clear()
    proxy.add("status", "PUT", rf"^/{bucket}/out/failed2\?.*partNumber=3", times=99, status=500)
    with pytest.raises(Exception):  # noqa: B017 - whatever the failed upload raises; what counts is below
        with store.open_write(f"s3://{bucket}/out/failed2") as f:
            f.write(big)
    assert server.keys(bucket) == ["out/big"] and server.uploads_in_progress(bucket) == []
    assert proxy.count("DELETE", rf"^/{bucket}/out/failed2\?uploadId=") >= 1
    with store.open_write(f"s3://{bucket}/out/small") as f:
        f.write(b"small")
    assert server.get(bucket, "out/small") == b"small"
    store.delete(f"s3://{bucket}/out/small")
    store.delete(f"s3://{bucket}/out/small")  # gone already: no error
    assert server.keys(bucket) == ["out/big"]


def _bucket_text(server, bucket) -> str:
    return "\n".join(server.get(bucket, k).decode("latin-1") for k in server.keys(bucket))


def test_cli_convert_s3_to_s3_matches_local_run_through_a_reset(s3, local_run, tmp_path):
    server, bucket, proxy, _ = s3
    paths, ref, ref_manifest = local_run
    for p in paths:
        server.put(bucket, "in/" + os.path.basename(p), open(p, "rb").read())
    server.put(bucket, "in/notes.txt", b"not a shard")
    proxy.add(
        "reset",
        "GET",
        _obj_re(bucket, "in/train-0001.tar"),
        times=1,
        after=os.path.getsize(paths[1]) // 2,
    )
    summary = tmp_path / "summary.json"
    env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    r = cli(
        "convert",
        f"s3://{bucket}/in/train-*.tar",
        "-o",
        f"s3://{bucket}/out/train-{{}}.record",
        "--s3-endpoint",
        proxy.url,
        "--max-shard-size",
        "5KB",
        "--type-map",
        "cls:int64",
        "--retry-initial",
        "0.01",
        "--summary-json",
        str(summary),
        "--no-progress",
        "--direct_num_workers=2",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert proxy.faults() == 1
    out_keys = [k for k in server.keys(bucket) if k.startswith("out/")]
    shards = sorted((k for k in out_keys if k.endswith(".record")), key=lambda k: int(k[10:-7]))
    assert [server.get(bucket, k) for k in shards] == ref
    from pipelines.job.names import companion

    manifest = json.loads(server.get(bucket, companion("out/train-{}.record", ".manifest.json")))
    assert manifest["totals"] == ref_manifest["totals"]
    assert not [k for k in out_keys if ".tar2tf-work" in k or ".tmp" in k]
    everything = r.stdout + r.stderr + _bucket_text(server, bucket) + tree_text(str(summary))
    for secret in (SECRET_KEY, ACCESS_KEY):
        assert secret not in everything


def test_convert_from_s3_to_local_keeps_credentials_out_of_every_artifact(
    s3, local_run, tmp_path, caplog
):
    import pickle

    server, bucket, proxy, cfg = s3
    paths, ref, _ = local_run
    for p in paths:
        server.put(bucket, "in/" + os.path.basename(p), open(p, "rb").read())
    conf = ConvertConfig(
        sources=f"s3://{bucket}/in/train-{{0000..0003}}.tar",
        output=str(tmp_path / "out/train-{}.record"),
        store=cfg,
        work_dir=str(tmp_path / "work"),
        max_rejects=1,
        progress=False,
        **OPTS,
    )
    # what travels to workers (the pickled config) holds no credential
    blob = pickle.dumps(conf)
    assert SECRET_KEY.encode() not in blob and ACCESS_KEY.encode() not in blob
    res = convert(conf, BEAM)
    assert res.exit_code == 0 and [open(p, "rb").read() for p in res.paths] == ref
    rejects = [json.loads(line) for line in open(res.rejects_path)]
    assert [(r["shard"], r["stage"]) for r in rejects] == [
        (f"s3://{bucket}/in/train-0003.tar", "list")
    ]
    text = tree_text(str(tmp_path)) + caplog.text
    assert SECRET_KEY not in text and ACCESS_KEY not in text


def test_pcr_from_s3(s3, tmp_path):
    from support.pcr_fixtures import encode, make_tar, need_jpegtran, photo

    need_jpegtran()
    from pipelines.beam.pcr import PcrConfig, convert_pcr

    server, bucket, proxy, cfg = s3
    images = [
        (f"s/{i}", {"jpg": encode(photo(n, (48, 40))), "cls": str(i).encode()})
        for i, n in enumerate(("chelsea", "coffee", "rocket"))
    ]
    shard = make_tar(str(tmp_path / "a.tar"), images)
    server.put(bucket, "in/a.tar", open(shard, "rb").read())
    local = convert_pcr(
        PcrConfig(sources=[shard], output=str(tmp_path / "local"), images_per_record=2, seed=1),
        BEAM,
    )
    remote = convert_pcr(
        PcrConfig(
            sources=[f"s3://{bucket}/in/*.tar"],
            output=f"s3://{bucket}/pcr",
            images_per_record=2,
            seed=1,
            store=cfg,
        ),
        BEAM,
    )
    assert remote.totals["records_written"] == 3 and remote.totals["records_rejected"] == 0
    assert [server.get(bucket, p.split("/", 3)[3]) for p in remote.paths] == [
        open(p, "rb").read() for p in local.paths
    ]
