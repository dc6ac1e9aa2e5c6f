"""Smoke test of the latency benchmark (``python -m benchmarks.latency``) and its proxy
(``benchmarks/latency_proxy.py``), against the session's moto server.

Behaviour only -- never timings: the proxy passes bodies through unchanged (chunked
uploads and multipart copies included) and counts each S3 operation as what it is; the
harness runs a real s3:// -> s3:// job through it at each delay, counts its requests and
verifies its output.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from benchmarks.latency_proxy import LatencyProxy  # noqa: E402


def _client(url: str):
    import boto3

    # moto checks no signatures; the proxy forwards the client's Host, so a real server
    # that did would see the address the client signed for
    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="AKIALATENCYSMOKE0001",
        aws_secret_access_key="latency-smoke-not-a-secret",
    )


def test_proxy_passes_bodies_through_and_counts_each_operation(moto_server):
    bucket = moto_server.new_bucket()
    proxy = LatencyProxy(moto_server.url, 0.001).start()
    try:
        s3 = _client(proxy.url)
        s3.put_object(Bucket=bucket, Key="in/a-000001.tar", Body=b"hello")
        assert s3.get_object(Bucket=bucket, Key="in/a-000001.tar")["Body"].read() == b"hello"
        got = s3.get_object(Bucket=bucket, Key="in/a-000001.tar", Range="bytes=1-3")
        assert got["Body"].read() == b"ell"
        assert s3.head_object(Bucket=bucket, Key="in/a-000001.tar")["ContentLength"] == 5
        assert s3.list_objects_v2(Bucket=bucket, Prefix="in/")["KeyCount"] == 1
        part = os.urandom(5 << 20)  # S3's smallest part but the last
        up = s3.create_multipart_upload(Bucket=bucket, Key="out/m")["UploadId"]
        e1 = s3.upload_part(Bucket=bucket, Key="out/m", UploadId=up, PartNumber=1, Body=part)
        e2 = s3.upload_part_copy(
            Bucket=bucket,
            Key="out/m",
            UploadId=up,
            PartNumber=2,
            CopySource={"Bucket": bucket, "Key": "in/a-000001.tar"},
        )
        parts = [
            {"PartNumber": 1, "ETag": e1["ETag"]},
            {"PartNumber": 2, "ETag": e2["CopyPartResult"]["ETag"]},
        ]
        s3.complete_multipart_upload(
            Bucket=bucket, Key="out/m", UploadId=up, MultipartUpload={"Parts": parts}
        )
        # a body in HTTP chunks, as aws-chunked uploads send theirs: framing passed through
        conn = http.client.HTTPConnection(urllib.parse.urlsplit(proxy.url).netloc, timeout=60)
        conn.request(
            "PUT", f"/{bucket}/work/c.bin", body=iter([b"abc", b"", b"defgh"]), encode_chunked=True
        )
        resp = conn.getresponse()
        resp.read()
        conn.close()
        assert resp.status == 200
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "in/a-000001.tar"}]})
        s3.delete_object(Bucket=bucket, Key="work/c.bin")
        counts = proxy.counts()
    finally:
        proxy.stop()
    # what reached the server, read straight from it
    assert moto_server.get(bucket, "out/m") == part + b"hello"
    assert moto_server.keys(bucket) == ["out/m"]
    assert counts["by_kind"] == {
        "delete": 1,
        "delete-multi": 1,
        "get": 1,
        "get-range": 1,
        "head": 1,
        "list": 1,
        "mpu-complete": 1,
        "mpu-create": 1,
        "mpu-part": 1,
        "mpu-part-copy": 1,
        "put": 2,
    }
    assert counts["total"] == 12 and counts["by_method"]["PUT"] == 4
    areas = {}
    for a in counts["by_kind_area"]:  # bursts: one (kind, area) may have several
        areas[(a["kind"], a["area"])] = areas.get((a["kind"], a["area"]), 0) + a["count"]
    assert areas[("put", "in/a-#.tar")] == 1 and areas[("put", "work/c.bin")] == 1
    assert areas[("list", "in/")] == 1 and areas[("delete-multi", "")] == 1


def test_harness_counts_requests_and_verifies_each_run(moto_server, tmp_path):
    bucket = moto_server.new_bucket()
    out = tmp_path / "latency.json"
    cmd = [sys.executable, "-m", "benchmarks.latency", "--shards", "6", "--delays", "0,5"]
    cmd += ["--runners", "inprocess", "--s3-server", moto_server.url, "--bucket", bucket]
    cmd += ["--json", str(out), "--timeout", "300"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert [(r["runner"], r["delay_ms"]) for r in rows] == [("inprocess", 0), ("inprocess", 5)]
    for r in rows:
        # the job succeeded and `tar2tf verify` of its manifest passed
        assert r["exit_code"] == 0 and r["verify_exit_code"] == 0, r
        assert r["records_written"] == 12  # 6 shards x 2 records
        assert r["manifest"] == f"s3://{bucket}/out/t.record.manifest.json"
        counts = r["counts"]
        assert counts["total"] == r["requests"] == sum(counts["by_kind"].values())
        assert counts["total"] == sum(counts["by_method"].values())
        areas = {}
        for a in counts["by_kind_area"]:
            areas[(a["kind"], a["area"])] = areas.get((a["kind"], a["area"]), 0) + a["count"]
        # every input shard was read through the proxy, and the manifest written through it
        assert areas[("get", "in/shard-#.tar")] >= 6
        assert areas[("put", "out/t.record.manifest.json")] == 1
    # each run started on an empty out/ and work/: the job did not refuse or resume
    assert all(not r["counters"].get("shards_resumed") for r in rows)
    assert [(q["runner"], q["delay_ms"]) for q in result["ratios"]] == [("inprocess", 5)]
    assert "| inprocess | 5 ms |" in proc.stdout and "| ratio |" in proc.stdout
    # the inputs stay; the last run's output is there to look at
    keys = moto_server.keys(bucket)
    assert sum(k.startswith("in/shard-") for k in keys) == 6
    assert "out/t.record.manifest.json" in keys
