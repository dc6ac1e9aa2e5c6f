"""A real S3-compatible server for the tests: moto's standalone server (``moto[server]``,
a test dependency) as a process on 127.0.0.1 and a free port, started and stopped by its
PID, once per session (tests/support/servers.py).

It answers the S3 REST API over HTTP as S3 does: ListObjectsV2 pages, ranged GETs,
``If-Match`` preconditions, PUT, and multipart uploads (parts of >= 5 MiB but the last).
Without moto the tests skip loudly, and fail when ``$CI`` is set (CI must run them).

The aisnode the AIS tests start also speaks S3 (under ``/s3``), but its proxy answers
object GETs and PUTs with 307 redirects to the target, which botocore does not follow
unless it is patched or the cluster runs with the ``S3-Reverse-Proxy`` feature; moto
answers S3 requests itself, as S3 does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid

import pytest
import requests

from support.ais_fixtures import free_ports
from support.servers import serve, stop_process

# distinctive values, so a test can look for them in every file a job writes
ACCESS_KEY = "AKIATAR2TFTESTKEY0042"
SECRET_KEY = "tar2tf-test-secret/do-not-print-3f9c1e"


class MotoServer:
    def __init__(self):
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="moto-", suffix=".log", delete=False)
        self.proc = None

    def start(self, timeout: float = 60.0) -> "MotoServer":
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"moto server exited with {self.proc.returncode}:\n{self.logs()}"
                )
            try:
                if requests.get(f"{self.url}/moto-api/data.json", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"moto server not answering after {timeout}s:\n{self.logs()}")

    def logs(self) -> str:
        with open(self.log.name, "rb") as f:
            return f.read()[-3000:].decode(errors="replace")

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()
        os.unlink(self.log.name)

    # helpers for tests: a plain boto3 client straight to the server
    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    def new_bucket(self) -> str:
        name = f"t-{uuid.uuid4().hex[:10]}"
        self.client().create_bucket(Bucket=name)
        return name

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.client().put_object(Bucket=bucket, Key=key, Body=data)

    def get(self, bucket: str, key: str) -> bytes:
        return self.client().get_object(Bucket=bucket, Key=key)["Body"].read()

    def keys(self, bucket: str):
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return sorted(o["Key"] for p in pages for o in p.get("Contents", []))

    def uploads_in_progress(self, bucket: str):
        return self.client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])


def _missing(why: str):
    msg = (
        f"S3 TESTS SKIPPED: {why} (pip install 'moto[server]': a test dependency in pyproject.toml)"
    )
    if os.environ.get("CI"):
        pytest.fail(msg.replace("SKIPPED", "CANNOT RUN") + "; CI must run them")
    pytest.skip(msg)


@pytest.fixture(scope="session")
def moto_server():
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError as e:
        _missing(str(e))
    yield from serve(MotoServer())


@pytest.fixture()
def s3_env(monkeypatch):
    """The usual AWS variables a user sets, with the test credentials."""
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
