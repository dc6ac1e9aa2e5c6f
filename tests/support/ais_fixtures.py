"""A real AIStore cluster for the tests: one proxy and one target (``aisnode`` binaries,
installed by ``launch/setup.d/30-aisnode.sh``) as plain processes on 127.0.0.1.

Session scope; free ports picked at start; a fresh temp root (configs, logs, the target's
``test_fspaths`` mountpath); stopped by the PIDs started here (SIGINT, then SIGKILL).
Without the binary every test using it is skipped with a loud reason.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from typing import Dict, List

import pytest
import requests

from support.servers import serve_or_skip

CACHE = os.environ.get("TAR2TF_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tar2tf"
)


def aisnode_binary():
    return shutil.which("aisnode") or next(
        (p for p in [os.path.join(CACHE, "bin", "aisnode")] if os.access(p, os.X_OK)), None
    )


def free_ports(n: int) -> List[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _global_config(primary: str) -> Dict:
    return {
        "backend": {},
        "auth": {},
        "proxy": {"primary_url": primary, "original_url": primary, "discovery_url": ""},
        "net": {
            "l4": {"proto": "tcp", "sndrcv_buf_size": 131072},
            "http": {
                "use_https": False,
                "chunked_transfer": True,
                "idle_conn_time": "6s",
                "idle_conns_per_host": 32,
                "idle_conns": 256,
            },
            "use_ipv6": False,
        },
        "timeout": {
            "cplane_operation": "2s",
            "max_keepalive": "5s",
            "max_host_busy": "20s",
            "startup_time": "30s",
            "join_startup_time": "1m",
            "send_file_time": "5m",
            "cold_get_conflict": "5s",
            "object_md": "2h",
        },
        "memsys": {
            "min_free": "256mb",
            "default_buf": "32kb",
            "to_gc": "1gb",
            "hk_time": "3m",
            "min_pct_total": 0,
            "min_pct_free": 0,
        },
        "versioning": {"enabled": True, "validate_warm_get": False},
        "resilver": {"enabled": True},
        "space": {"cleanupwm": 65, "lowwm": 90, "highwm": 96, "out_of_space": 99},
    }


def _local_config(root: str, name: str, ports, instance: int) -> Dict:
    d = os.path.join(root, name)
    return {
        "confdir": d,
        "log_dir": os.path.join(d, "log"),
        "host_net": {
            "hostname": "127.0.0.1",
            "hostname_intra_control": "127.0.0.1",
            "hostname_intra_data": "127.0.0.1",
            "port": str(ports[0]),
            "port_intra_control": str(ports[1]),
            "port_intra_data": str(ports[2]),
        },
        "fspaths": {},
        "test_fspaths": {"root": root + "/", "count": 1, "instance": instance},
    }


class AISCluster:
    def __init__(self, binary: str):
        self.binary = binary
        self.root = tempfile.mkdtemp(prefix="aistest.")
        p = free_ports(6)
        self.proxy_ports, self.target_ports = p[:3], p[3:]
        self.endpoint = f"http://127.0.0.1:{self.proxy_ports[0]}"
        self.target_netloc = f"127.0.0.1:{self.target_ports[0]}"
        self.procs: List[subprocess.Popen] = []

    def _start(self, name: str, role: str, ports, instance: int, extra=()) -> None:
        """One aisnode; ``-skip_startup`` (primary, tests only) skips its ~15 s wait for
        the cluster to settle, so readiness is: healthy and the target in the cluster map."""
        d = os.path.join(self.root, name)
        os.makedirs(os.path.join(d, "log"), exist_ok=True)
        with open(os.path.join(d, "ais.json"), "w") as f:
            json.dump(_global_config(self.endpoint), f)
        with open(os.path.join(d, "ais_local.json"), "w") as f:
            json.dump(_local_config(self.root, name, ports, instance), f)
        out = open(os.path.join(d, "stdout.log"), "wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIS_")}
        self.procs.append(
            subprocess.Popen(
                [
                    self.binary,
                    f"-config={d}/ais.json",
                    f"-local_config={d}/ais_local.json",
                    f"-role={role}",
                    *extra,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        )
        out.close()

    def start(self, timeout: float = 90.0) -> "AISCluster":
        self._start("p0", "proxy", self.proxy_ports, 0, ["-ntargets=1", "-skip_startup"])
        time.sleep(0.5)
        self._start("t0", "target", self.target_ports, 1)
        deadline = time.time() + timeout
        while time.time() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"aisnode exited with {p.returncode}:\n{self.logs()}")
            try:
                if (
                    requests.get(f"{self.endpoint}/v1/health?prr=true", timeout=2).status_code
                    == 200
                ):
                    smap = requests.get(f"{self.endpoint}/v1/daemon?what=smap", timeout=2).json()
                    if len(smap.get("tmap") or {}) >= 1:  # the target has joined
                        return self
            except (requests.RequestException, ValueError):
                pass
            time.sleep(0.3)
        raise RuntimeError(f"AIS cluster not healthy after {timeout}s:\n{self.logs()}")

    def logs(self, tail: int = 3000) -> str:
        out = []
        for name in ("p0", "t0"):
            path = os.path.join(self.root, name, "stdout.log")
            if os.path.exists(path):
                with open(path, "rb") as f:
                    out.append(f"--- {name}\n" + f.read()[-tail:].decode(errors="replace"))
        return "\n".join(out)

    def stop(self) -> None:
        for p in reversed(self.procs):  # target first, then proxy
            if p.poll() is None:
                os.kill(p.pid, signal.SIGINT)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)

    # helpers for tests
    def client(self):
        from aistore.sdk import Client

        return Client(self.endpoint)

    def new_bucket(self, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.client().bucket(name).create(exist_ok=True)
        return name

    def set_checksum(self, bucket: str, kind: str) -> None:
        """The checksum type the bucket keeps for objects PUT from now on (AIS: xxhash)."""
        r = requests.patch(
            f"{self.endpoint}/v1/buckets/{bucket}",
            timeout=10,
            json={"action": "set-bprops", "value": {"checksum": {"type": kind}}},
        )
        r.raise_for_status()

    def put(self, bucket: str, name: str, data: bytes) -> None:
        self.client().bucket(bucket).object(name).get_writer().put_content(data)

    def get(self, bucket: str, name: str) -> bytes:
        return self.client().bucket(bucket).object(name).get_reader().read_all()


@pytest.fixture(scope="session")
def ais_cluster():
    """The cluster, started by the first test that uses it, stopped at the session's end."""
    yield from serve_or_skip(
        aisnode_binary(),
        "AIS TESTS SKIPPED: no aisnode binary (launch/setup.d/30-aisnode.sh builds it "
        "with `go` into $TAR2TF_CACHE/bin; see its warning in the bootstrap output)",
        AISCluster,
    )


@pytest.fixture()
def ais_bucket(ais_cluster):
    return ais_cluster.new_bucket()
