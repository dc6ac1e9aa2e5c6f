"""s3:// against AIStore's own S3 API (``/s3`` on the proxy) on the real aisnode: without
the cluster feature S3-Reverse-Proxy its proxy redirects every object GET (HTTP 307),
which S3 clients do not follow; each shard's reject then says what to do in one line.
With the feature, the same command converts every record."""

from __future__ import annotations

import json
import os

import pytest
import requests
from support.cli_fixtures import cli

from transforms.stores import StoreConfig, get_store

pytestmark = [pytest.mark.ais]

DEMO = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "launch",
    "demo",
    "shards",
)
REVERSE_PROXY = 1 << 13  # AIS's feature bit S3-Reverse-Proxy (cmn/feat/feat.go)


def _features(endpoint: str) -> int:
    r = requests.get(f"{endpoint}/v1/daemon", params={"what": "config"}, timeout=10)
    r.raise_for_status()
    return int(r.json()["features"])


def _set_features(endpoint: str, value: int) -> None:
    r = requests.put(
        f"{endpoint}/v1/cluster/set-config", params={"features": str(value)}, timeout=10
    )
    r.raise_for_status()


@pytest.fixture()
def demo_bucket(ais_cluster):
    bucket = ais_cluster.new_bucket("s3api")
    for i in range(2):
        with open(os.path.join(DEMO, f"demo-{i}.tar"), "rb") as f:
            ais_cluster.put(bucket, f"demo/demo-{i}.tar", f.read())
    return bucket


@pytest.mark.slow
def test_redirect_without_reverse_proxy_says_what_to_do(ais_cluster, demo_bucket, s3_env, tmp_path):
    before = _features(ais_cluster.endpoint)
    assert not before & REVERSE_PROXY, "the test cluster runs without S3-Reverse-Proxy"
    cfg = StoreConfig(
        s3_endpoint=ais_cluster.endpoint + "/s3", retry_attempts=2, retry_initial_s=0.01
    )
    url = f"s3://{demo_bucket}/demo/demo-0.tar"
    with pytest.raises(IOError) as e:
        with get_store(url, cfg).open_read(url) as f:
            f.read()
    assert "HTTP 307" in str(e.value) and "S3-Reverse-Proxy" in str(e.value)

    out = tmp_path / "out"
    args = [
        "convert",
        f"s3://{demo_bucket}/demo/demo-{{0..1}}.tar",
        "-o",
        str(out / "d-{}.record"),
        "--s3-endpoint",
        ais_cluster.endpoint + "/s3",
        "--runner",
        "local",
        "--no-progress",
    ]
    p = cli(*args)
    assert p.returncode == 3, p.stderr
    rejects = [
        json.loads(line) for line in (out / "d.record.rejects.jsonl").read_text().splitlines()
    ]
    assert [r["stage"] for r in rejects] == ["fetch", "fetch"]
    for r in rejects:
        reason = r["reason"]
        assert "\n" not in reason and "HTTP 307" in reason, reason
        assert "ais config cluster features S3-Reverse-Proxy" in reason, reason

    # the remedy the line names works: the same command converts every record
    _set_features(ais_cluster.endpoint, before | REVERSE_PROXY)
    try:
        p = cli(*args, "--overwrite")
    finally:
        _set_features(ais_cluster.endpoint, before)
    assert p.returncode == 0, p.stderr
    manifest = json.loads((out / "d.record.manifest.json").read_text())
    assert manifest["rejects"]["count"] == 0 and manifest["totals"]["records_written"] == 48, (
        manifest["totals"]
    )
