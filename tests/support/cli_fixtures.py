"""Fixtures and helpers shared by the runners/operations tests.

``demo_output``: the embedded demo shards converted once per session on the default local
runner, with DALI index files -- the reference output the Flink, staging and verify tests
compare against.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from typing import Dict, List, Optional

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO_SHARDS = os.path.join(ROOT, "launch", "demo", "shards")
DEMO_SOURCES = os.path.join(DEMO_SHARDS, "demo-{0..3}.tar")
DEMO_ARGS = ["--max-shard-size", "200KB", "--type-map", "cls:int64", "--dali-index"]


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def crc32c_file(path: str) -> str:
    """The hex CRC32C of a whole file, as manifests record it (computed in one call, not
    through the running checksum the writer uses)."""
    import google_crc32c

    with open(path, "rb") as f:
        return f"{google_crc32c.value(f.read()):08x}"


def normalized_manifest(path: str) -> dict:
    """The manifest with the output location made relative (it names its own paths)."""
    m = json.load(open(path))
    out_dir = os.path.dirname(os.path.abspath(path))
    text = (
        json.dumps(m, sort_keys=True)
        .replace(out_dir + "/", "<out>/")
        .replace(f'"{out_dir}"', '"<out>"')
    )
    return json.loads(text)


def output_digest(out_dir: str) -> Dict[str, str]:
    """sha256 of every output file (shards, idx, rejects) + a digest of the normalized manifest."""
    d: Dict[str, str] = {}
    for name in sorted(os.listdir(out_dir)):
        p = os.path.join(out_dir, name)
        if not os.path.isfile(p):
            continue
        if name.endswith(".manifest.json"):
            d[name] = hashlib.sha256(
                json.dumps(normalized_manifest(p), sort_keys=True).encode()
            ).hexdigest()
        else:
            d[name] = sha256_file(p)
    return d


def tree_text(*roots: str) -> str:
    """Every byte of the files under ``roots`` (files or directories), as latin-1 text: to
    search a job's artifacts for a secret."""
    out = []
    for root in roots:
        if os.path.isfile(root):
            with open(root, "rb") as f:
                out.append(f.read().decode("latin-1"))
        for d, _, files in os.walk(root):
            for name in files:
                with open(os.path.join(d, name), "rb") as f:
                    out.append(f.read().decode("latin-1"))
    return "\n".join(out)


# the two drivers by the flags that select each whatever the default driver is (Beam's
# local runner by its runner's name), for tests that run a job on both
DRIVERS = {
    "local": ["--runner", "local"],
    "beam": ["--runner=FnApiRunner"],
}


def cli(
    *args: str,
    cwd: Optional[str] = None,
    env: Optional[dict] = None,
    python: Optional[str] = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess:
    """Run ``tar2tf`` in a fresh process (the way a user does)."""
    e = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    e.update(env or {})
    return subprocess.run(
        [python or sys.executable, "-m", "launch.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=e,
        timeout=timeout,
    )


def copy_dataset(src_dir: str, dst_dir: str) -> str:
    shutil.copytree(src_dir, dst_dir)
    return dst_dir


@pytest.fixture(scope="session")
def pool_shards(tmp_path_factory) -> str:
    """The template of 4 small input shards of 6 image + label records (96x64 JPEGs), for
    the worker pool's tests."""
    from support import shardgen

    d = tmp_path_factory.mktemp("pool-in")
    shardgen.make_shards(str(d), 4, 6, size=(96, 64))
    return str(d) + "/train-{0000..0003}.tar"


@pytest.fixture(scope="session")
def api_shards(tmp_path_factory) -> str:
    """A folder of 3 input shards (``train-0000.tar`` ...) of 6 image + label records
    (64x48 JPEGs), for the tests of the original Dataset API."""
    from support import shardgen

    d = tmp_path_factory.mktemp("api-shards")
    shardgen.make_shards(str(d), 3, 6, size=(64, 48))
    return str(d)


@pytest.fixture(scope="session")
def demo_output(tmp_path_factory):
    """(output dir, manifest path) of the demo shards converted on the default local runner."""
    out = tmp_path_factory.mktemp("demo-local")
    p = cli(
        "convert",
        DEMO_SOURCES,
        "--output",
        str(out / "demo-{}.record"),
        *DEMO_ARGS,
        "--no-progress",
    )
    assert p.returncode == 0, p.stderr
    return str(out), str(out / "demo.record.manifest.json")


def shard_paths(manifest_path: str) -> List[str]:
    return [s["path"] for s in json.load(open(manifest_path))["shards"]]
