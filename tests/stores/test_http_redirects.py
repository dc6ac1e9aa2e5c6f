"""``--http-header`` values and redirects: a redirect to another origin (scheme, host or
port) gets none of the user's headers unless ``--http-header-cross-origin`` allows it; a
redirect within the origin keeps them all.  Two loopback servers on different ports: a
hub that redirects (and serves within its own origin) and a ``RangeServer`` behind a
``FaultProxy`` that records what reached it."""

from __future__ import annotations

import dataclasses
import os

import pytest
from support import shardgen
from support.cli_fixtures import cli
from support.faultproxy import FaultProxy
from support.range_server import Loopback, QuietHandler, RangeServer

from transforms.stores import StoreConfig
from transforms.stores.http import HTTPStore
from transforms.stores.http_headers import (
    CROSS_ORIGIN_ENV,
    HEADERS_ENV,
    env_cross_origin,
    headers_with,
)

USER_HEADERS = {
    "Authorization": "Bearer AUTH-SECRET-1",
    "PRIVATE-TOKEN": "PRIV-SECRET-2",
    "X-Api-Key": "KEY-SECRET-3",
    "Cookie": "session=COOKIE-SECRET-4",
}
FAST = StoreConfig(retry_attempts=2, retry_initial_s=0.01, read_timeout_s=10.0)


class _Hub:
    """``/cross/<name>``: 302 to ``target`` + ``/<name>``; ``/same/<name>``: 302 to this
    server's ``/file/<name>``; ``/file/<name>``: the file under ``root``.  Records the
    headers of every request."""

    def __init__(self, root: str, target: str):
        self.root, self.target = root, target
        self.headers = []
        hub = self

        class Handler(QuietHandler):
            def do_GET(self):
                hub.headers.append((self.path, dict(self.headers.items())))
                kind, _, name = self.path.lstrip("/").partition("/")
                if kind in ("cross", "same"):
                    base = hub.target if kind == "cross" else hub.url + "/file"
                    self.send_response(302)
                    self.send_header("Location", f"{base}/{name}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.wfile.write(self.send_file_head(hub.root))

        self.server = Loopback(Handler)

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def servers(tmp_path):
    paths = shardgen.make_shards(str(tmp_path / "www"), 2, 3, size=(32, 24))
    origin = RangeServer(str(tmp_path / "www")).start()
    other = FaultProxy(origin.url).start()  # another port: another origin
    hub = _Hub(str(tmp_path / "www"), other.url)
    yield hub, other, paths
    hub.stop()
    other.stop()
    origin.stop()


def _env(monkeypatch, cross: bool = False) -> None:
    monkeypatch.setenv(HEADERS_ENV, "\n".join(f"{k}: {v}" for k, v in USER_HEADERS.items()))
    if cross:
        monkeypatch.setenv(CROSS_ORIGIN_ENV, "1")
    else:
        monkeypatch.delenv(CROSS_ORIGIN_ENV, raising=False)


def _read(url: str) -> bytes:
    # the config made now takes its headers' defaults from the environment, as the CLI's
    with HTTPStore(
        dataclasses.replace(
            FAST, http_headers=headers_with([]), http_cross_origin=env_cross_origin()
        )
    ).open_read(url) as f:
        return f.read()


def test_no_user_header_follows_a_redirect_to_another_origin(servers, monkeypatch):
    hub, other, paths = servers
    _env(monkeypatch)
    name = os.path.basename(paths[0])
    assert _read(f"{hub.url}/cross/{name}") == open(paths[0], "rb").read()
    assert hub.headers[0][1].get("X-Api-Key") == "KEY-SECRET-3"  # the hub got them all
    assert other.headers, "the redirect was not followed"
    for got in other.headers:
        leaked = {k for k in USER_HEADERS if k.lower() in {h.lower() for h in got}}
        assert not leaked, f"sent to another origin: {sorted(leaked)}"


def test_a_redirect_within_the_origin_keeps_every_header(servers, monkeypatch):
    hub, _, paths = servers
    _env(monkeypatch)
    name = os.path.basename(paths[0])
    assert _read(f"{hub.url}/same/{name}") == open(paths[0], "rb").read()
    final = [h for path, h in hub.headers if path.startswith("/file/")]
    assert final and all(h.get(k) == v for h in final for k, v in USER_HEADERS.items()), final


def test_the_cross_origin_flag_lets_them_follow(servers, monkeypatch):
    hub, other, paths = servers
    _env(monkeypatch, cross=True)
    name = os.path.basename(paths[0])
    assert _read(f"{hub.url}/cross/{name}") == open(paths[0], "rb").read()
    assert other.headers
    assert all(h.get(k) == v for h in other.headers for k, v in USER_HEADERS.items())


@pytest.mark.parametrize("allow", [False, True], ids=["default", "cross-origin-flag"])
def test_cli_headers_and_the_cross_origin_flag(servers, tmp_path, allow):
    hub, other, _ = servers
    r = cli(
        "convert",
        f"{hub.url}/cross/train-{{0000..0001}}.tar",
        "-o",
        str(tmp_path / "o" / "t-{}.record"),
        "--http-header",
        "X-Api-Key: KEY-SECRET-3",
        *(["--http-header-cross-origin"] if allow else []),
        "--runner",
        "local",
        "--no-progress",
        env={CROSS_ORIGIN_ENV: "", HEADERS_ENV: ""},
    )
    assert r.returncode == 0, r.stderr
    assert len(other.headers) == 2
    sent = [h.get("X-Api-Key") for h in other.headers]
    assert sent == (["KEY-SECRET-3"] * 2 if allow else [None, None]), sent
    assert "KEY-SECRET-3" not in r.stdout + r.stderr
