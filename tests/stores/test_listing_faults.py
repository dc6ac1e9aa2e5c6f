"""A listing that fails for good (an unreachable endpoint, a persistent 5xx, a 403) is a
``list`` reject per shard it was to find, after the retry policy gave up: never a crashed
job, and never at the cost of the other templates' shards.  Against the real servers
(aisnode, fake-gcs-server) with faults from tests/support/faultproxy.py, and against a port
nothing listens on."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from support import shardgen

from pipelines.beam.convert import convert
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from transforms.tar.sources import resolve

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BEAM = ["--direct_num_workers=2"]


def _endpoint(backend) -> str:
    return backend.front.url  # AIS: the proxy's fault proxy; GCS: $STORAGE_EMULATOR_HOST


@pytest.mark.ais
@pytest.mark.gcs
def test_a_listing_failing_for_good_is_a_list_reject_per_shard(backend):
    backend.put("s/shard-0.tar", b"t")
    cfg = backend.config(retry_attempts=3)
    rule = backend.front.add("status", method="GET", path=backend.list_re(), status=503, times=1000)
    urls, rejects = resolve([backend.url("s/shard-{0..2}.tar"), backend.url("s/*.tar")], config=cfg)
    assert urls == []
    assert [r.shard for r in rejects] == [backend.url(f"s/shard-{i}.tar") for i in range(3)] + [
        backend.url("s/*.tar")
    ]
    for r in rejects:
        assert r.stage == "list" and r.key is None and not r.counts_record and "\n" not in r.reason
        assert r.reason.startswith(f"listing failed: {r.shard}: could not list {backend.url('s/')}")
        assert f" at {_endpoint(backend)} (retries spent)" in r.reason and "503" in r.reason
    assert rule.fired == 2 * 3  # two listings, each tried retry_attempts times by the policy
    # a refused listing is final: asked once, said so
    backend.clear()
    rule = backend.front.add("status", method="GET", path=backend.list_re(), status=403, times=1000)
    urls, rejects = resolve(backend.url("s/shard-{0..1}.tar"), config=cfg)
    assert urls == [] and len(rejects) == 2 and rule.fired == 1
    assert all("(not retryable)" in r.reason and "access denied" in r.reason for r in rejects)
    # a fault that goes away is retried and leaves no trace
    backend.clear()
    backend.front.add("status", method="GET", path=backend.list_re(), status=503, times=2)
    urls, rejects = resolve(backend.url("s/shard-0.tar"), config=cfg)
    assert urls == [backend.url("s/shard-0.tar")] and rejects == []


def _tar(path: str, start: int, n: int) -> bytes:
    shardgen.write_tar(path, shardgen.sample_members(start, n, size=(32, 24)))
    return open(path, "rb").read()


@pytest.mark.ais
@pytest.mark.gcs
def test_other_templates_convert_when_one_store_cannot_list(backend, tmp_path):
    backend.put("in/s-0.tar", _tar(str(tmp_path / "s-0.tar"), 100, 4))
    shardgen.make_shards(str(tmp_path / "loc"), 2, 5, size=(32, 24))
    backend.front.add("status", method="GET", path=backend.list_re(), status=503, times=1000)
    cfg = backend.config(retry_attempts=2)
    res = convert(
        ConvertConfig(
            sources=[str(tmp_path / "loc/train-{0000..0001}.tar"), backend.url("in/s-{0..1}.tar")],
            output=str(tmp_path / "out/x-{}.record"),
            store=cfg,
            progress=False,
            max_rejects=2,
        ),
        BEAM,
    )
    rejects = [json.loads(line) for line in open(res.rejects_path)]
    assert [(r["shard"], r["stage"]) for r in rejects] == [
        (backend.url(f"in/s-{i}.tar"), "list") for i in (0, 1)
    ]
    assert all(r["reason"].startswith("listing failed:") for r in rejects)
    t = res.manifest["totals"]
    assert t["records_written"] == 10 and t["shards_rejected"] == 2 and res.exit_code == 0


def _dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.slow
def test_cli_with_an_unreachable_ais_endpoint_converts_the_local_shards(tmp_path):
    """The reviewer's repro: no traceback, the local template converts, exit code by
    --max-rejects (0 within it, 3 beyond)."""
    shardgen.make_shards(str(tmp_path / "good"), 3, 4, size=(32, 24))
    endpoint = f"http://127.0.0.1:{_dead_port()}"
    env = {k: v for k, v in os.environ.items() if k != "AIS_ENDPOINT"}
    env.update(TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
    args = [
        sys.executable,
        "-m",
        "launch.cli",
        "convert",
        str(tmp_path / "good/train-{0000..0002}.tar"),
        "ais://b/s-{0..1}.tar",
        "--ais-endpoint",
        endpoint,
        "--retry-attempts",
        "2",
        "--retry-initial",
        "0.01",
        "--retry-max",
        "0.02",
        "--no-progress",
        "-o",
        str(tmp_path / "out/x-{}.record"),
        *BEAM,
    ]
    p = subprocess.run(
        args + ["--max-rejects", "10"], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    rejects = [json.loads(line) for line in open(tmp_path / "out/x.record.rejects.jsonl")]
    assert [(r["shard"], r["stage"]) for r in rejects] == [
        (f"ais://b/s-{i}.tar", "list") for i in (0, 1)
    ]
    assert all(f"at {endpoint} (retries spent): ConnectionError" in r["reason"] for r in rejects)
    manifest = json.load(open(tmp_path / "out/x.record.manifest.json"))
    assert manifest["totals"]["records_written"] == 12
    p = subprocess.run(
        args + ["--max-rejects", "1", "--overwrite"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert p.returncode == 3 and "Traceback" not in p.stderr, p.stderr
