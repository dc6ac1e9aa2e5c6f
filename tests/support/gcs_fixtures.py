"""A GCS emulator for the tests: ``fake-gcs-server`` (installed by
``launch/setup.d/31-fake-gcs-server.sh``) on 127.0.0.1, driven by the real
``google-cloud-storage`` client through ``$STORAGE_EMULATOR_HOST``.

Session scope; a free port; in-memory backend; stopped by the PID started here.  Without
the binary every test using it is skipped with a loud reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid

import pytest
import requests

from support.ais_fixtures import CACHE, free_ports
from support.servers import serve_or_skip, stop_process


def emulator_binary():
    return shutil.which("fake-gcs-server") or next(
        (p for p in [os.path.join(CACHE, "bin", "fake-gcs-server")] if os.access(p, os.X_OK)), None
    )


class GCSEmulator:
    def __init__(self, binary: str):
        self.binary = binary
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        self.netloc = f"127.0.0.1:{self.port}"
        self.dir = tempfile.mkdtemp(prefix="gcsemu.")
        self.proc = None

    def start(self, timeout: float = 30.0) -> "GCSEmulator":
        out = open(os.path.join(self.dir, "emulator.log"), "wb")
        self.proc = subprocess.Popen(
            [
                self.binary,
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-port",
                str(self.port),
                "-backend",
                "memory",
                "-public-host",
                self.netloc,
                "-external-url",
                self.url,
                "-data",
                os.path.join(self.dir, "seed"),
                "-log-level",
                "error",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"fake-gcs-server exited with {self.proc.returncode}:\n{self.logs()}"
                )
            try:
                if (
                    requests.get(f"{self.url}/storage/v1/b?project=test", timeout=2).status_code
                    == 200
                ):
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"fake-gcs-server not answering after {timeout}s:\n{self.logs()}")

    def logs(self) -> str:
        with open(os.path.join(self.dir, "emulator.log"), "rb") as f:
            return f.read()[-3000:].decode(errors="replace")

    def stop(self) -> None:
        stop_process(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)

    # helpers for tests (the real client, pointed at the emulator directly)
    def client(self):
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project="test",
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.url},
        )

    def new_bucket(self, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.client().create_bucket(name)
        return name

    def put(self, bucket: str, name: str, data: bytes) -> None:
        self.client().bucket(bucket).blob(name).upload_from_string(data)

    def get(self, bucket: str, name: str) -> bytes:
        return self.client().bucket(bucket).blob(name).download_as_bytes()


def use_gcs_endpoint(monkeypatch, url: str) -> None:
    """Point tar2tf's GCS stores at ``url`` (the emulator or a fault proxy before it)."""
    from transforms.stores import registry

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
    monkeypatch.setattr(registry, "_CACHE", {})


@pytest.fixture(scope="session")
def gcs_emulator():
    """The emulator, one process for the session."""
    yield from serve_or_skip(
        emulator_binary(),
        "GCS TESTS SKIPPED: no fake-gcs-server binary (launch/setup.d/31-fake-gcs-server.sh "
        "builds it with `go` into $TAR2TF_CACHE/bin; see its warning in the bootstrap output)",
        GCSEmulator,
    )


@pytest.fixture()
def gcs(gcs_emulator, monkeypatch):
    """The emulator, with tar2tf's GCS stores pointed at it for this test."""
    use_gcs_endpoint(monkeypatch, gcs_emulator.url)
    return gcs_emulator


@pytest.fixture()
def gcs_bucket(gcs):
    return gcs.new_bucket()
