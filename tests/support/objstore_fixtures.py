"""One interface over the two real object stores the tests run (AIS cluster, GCS emulator),
each reached through fault proxies (tests/support/faultproxy.py), so a test can be written once
and run against both.

``backend`` (parametrized ``ais`` / ``gcs``): a fresh bucket, a fast-retry StoreConfig
whose traffic passes through the proxies (clean unless a test adds fault rules), and the
request regexes a test needs to aim faults: object data (GET), uploads, listings.
For AIS, ``front`` proxies the AIS proxy and rewrites its 307 ``Location`` to ``data``,
which proxies the target: object bytes flow through ``data``.  For GCS both are one proxy.
"""

from __future__ import annotations

import re
from typing import List, NamedTuple
from urllib.parse import quote

import pytest

from support.faultproxy import FaultProxy
from support.gcs_fixtures import use_gcs_endpoint
from transforms.stores import StoreConfig

FAST = dict(
    retry_attempts=5, retry_initial_s=0.01, retry_max_s=0.05, retry_total_s=30.0, read_timeout_s=5.0
)


class Backend:
    scheme = ""

    def __init__(self, server, front: FaultProxy, data: FaultProxy):
        self.server, self.front, self.data = server, front, data
        self.bucket = server.new_bucket()

    def url(self, name: str = "") -> str:
        return f"{self.scheme}://{self.bucket}/{name}"

    def put(self, name: str, data: bytes) -> None:
        self.server.put(self.bucket, name, data)

    def get(self, name: str) -> bytes:
        return self.server.get(self.bucket, name)

    def clear(self) -> None:
        self.front.clear()
        self.data.clear()

    def keep_crc32c(self) -> None:
        """Make the bucket keep a CRC32C of each object written from now on (GCS keeps one
        for every object: nothing to do)."""


class AISBackend(Backend):
    scheme = "ais"

    def config(self, **kw) -> StoreConfig:
        return StoreConfig(**{"ais_endpoint": self.front.url, **FAST, **kw})

    def obj_re(self, name: str) -> str:
        return "^" + re.escape(f"/v1/objects/{self.bucket}/{name}") + r"(\?|$)"

    def list_re(self) -> str:
        return "^" + re.escape(f"/v1/buckets/{self.bucket}") + r"(\?|$)"

    get_method = "GET"
    put_method = "PUT"

    def put_re(self, name: str) -> str:
        return self.obj_re(name)

    def keep_crc32c(self) -> None:
        self.server.set_checksum(self.bucket, "crc32c")


class GCSBackend(Backend):
    scheme = "gs"

    def config(self, **kw) -> StoreConfig:
        return StoreConfig(**{**FAST, **kw})

    def obj_re(self, name: str) -> str:
        return re.escape(f"/b/{self.bucket}/o/{quote(name, safe='')}") + r"\?.*alt=media"

    def list_re(self) -> str:
        return "^" + re.escape(f"/storage/v1/b/{self.bucket}/o") + r"\?"

    get_method = "GET"
    put_method = "POST"

    def put_re(self, name: str) -> str:
        return "^" + re.escape(f"/upload/storage/v1/b/{self.bucket}/o")


@pytest.fixture(scope="session")
def ais_proxies(ais_cluster):
    data = FaultProxy(f"http://{ais_cluster.target_netloc}").start()
    front = FaultProxy(
        ais_cluster.endpoint, rewrite={ais_cluster.target_netloc: data.netloc}
    ).start()
    yield front, data
    front.stop()
    data.stop()


@pytest.fixture(scope="session")
def gcs_proxy(gcs_emulator):
    front = FaultProxy(gcs_emulator.url, rewrite={gcs_emulator.netloc: "<self>"}).start()
    front.rewrite = {gcs_emulator.netloc: front.netloc}
    yield front
    front.stop()


@pytest.fixture(params=["ais", "gcs"])
def backend(request, monkeypatch):
    if request.param == "ais":
        front, data = request.getfixturevalue("ais_proxies")
        b = AISBackend(request.getfixturevalue("ais_cluster"), front, data)
    else:
        front = request.getfixturevalue("gcs_proxy")
        b = GCSBackend(request.getfixturevalue("gcs_emulator"), front, front)
        use_gcs_endpoint(monkeypatch, front.url)
    b.clear()
    yield b
    b.clear()


class LocalRun(NamedTuple):
    paths: List[str]  # the input shards
    shards: List[bytes]  # the bytes of each output shard
    manifest: dict


# the reference job of the stores' tests: small shards, several output shards, on Beam
N_SHARDS, PER_SHARD = 3, 6
OPTS = dict(max_shard_size="5KB", type_map={"cls": "int64"})
BEAM = ["--direct_num_workers=2"]


@pytest.fixture(scope="session")
def local_run(tmp_path_factory) -> LocalRun:
    """The input shards and the output of a local-to-local run: what a run from or to a
    store must give, byte for byte."""
    from pipelines.beam.convert import convert
    from pipelines.job.kinds.tfrecord.config import ConvertConfig
    from support import shardgen

    d = tmp_path_factory.mktemp("in")
    paths = shardgen.make_shards(str(d), N_SHARDS, PER_SHARD, size=(32, 24))
    out = tmp_path_factory.mktemp("ref")
    res = convert(
        ConvertConfig(
            sources=str(d / "train-{0000..0002}.tar"),
            output=str(out / "train-{}.record"),
            progress=False,
            **OPTS,
        ),
        BEAM,
    )
    assert res.exit_code == 0 and len(res.paths) >= 3
    return LocalRun(paths, [open(p, "rb").read() for p in res.paths], res.manifest)
