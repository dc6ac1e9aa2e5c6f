"""A small loopback HTTP/1.1 proxy that injects faults between a client and a real server.

Why hand-written: the point is to break HTTP exchanges in precise, countable ways (a 5xx
instead of the answer, a connection reset mid-body, a body cut short of its
Content-Length, a slow answer) on 127.0.0.1 only; generic proxies do not do that.

    proxy = FaultProxy("http://127.0.0.1:8080").start()
    proxy.add("truncate", method="GET", path=r"/v1/objects/", times=2, after=1000)
    ... point the client at proxy.url ...
    proxy.stop()

Fault kinds (each rule lets ``skip`` matching requests pass, fires on the next ``times``,
then is spent):
``status``   answer ``status`` (default 503) without forwarding;
``reset``    forward, send the headers and ``after`` body bytes, then reset (RST) the connection;
``truncate`` forward, send the headers (full Content-Length) and ``after`` body bytes, then close;
``slow``     forward, but wait ``delay`` seconds before answering.

A ``status`` rule answers ``body`` (default a short text) with ``content_type``; any rule
may run ``then()`` when it fires (a ``reset``/``truncate`` one after its ``after`` bytes,
before the break), e.g. to replace the object upstream before the client resumes.

``rewrite`` maps upstream ``host:port`` to another proxy's ``host:port`` in ``Location``
headers, so redirects (AIS proxy -> target) also pass through a fault proxy.
"""

from __future__ import annotations

import http.client
import http.server
import re
import socket
import socketserver
import struct
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
}


class Rule:
    def __init__(
        self,
        kind: str,
        method: Optional[str],
        path: Optional[str],
        times: int,
        status: int,
        after: int,
        delay: float,
        skip: int = 0,
        body: Optional[bytes] = None,
        content_type: str = "text/plain",
        then: Optional[Callable[[], None]] = None,
    ):
        if kind not in ("status", "reset", "truncate", "slow"):
            raise ValueError(kind)
        self.kind, self.method, self.times = kind, method, times
        self.path = re.compile(path) if path else None
        self.status, self.after, self.delay = status, after, delay
        self.fired = 0
        self.skip = skip  # let this many matching requests through first
        self.body, self.content_type, self.then = body, content_type, then

    def matches(self, method: str, path: str) -> bool:
        if not (
            self.fired < self.times
            and (self.method is None or self.method == method)
            and (self.path is None or bool(self.path.search(path)))
        ):
            return False
        if self.skip > 0:
            self.skip -= 1
            return False
        return True


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class FaultProxy:
    def __init__(
        self, upstream: str, rewrite: Optional[Dict[str, str]] = None, timeout: float = 30.0
    ):
        u = urlsplit(upstream)
        self.upstream_host, self.upstream_port = u.hostname, u.port or 80
        self.rewrite = dict(rewrite or {})
        self.timeout = timeout
        self.rules: List[Rule] = []
        self.log: List[Tuple[str, str, int, str]] = []  # (method, path, status, fault or "")
        self.headers: List[Dict[str, str]] = []  # request headers, in arrival order
        self.lock = threading.Lock()
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None

    # -- control ------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def netloc(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.netloc}"

    def start(self) -> "FaultProxy":
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="faultproxy", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def add(
        self,
        kind: str,
        method: Optional[str] = None,
        path: Optional[str] = None,
        times: int = 1,
        status: int = 503,
        after: int = 0,
        delay: float = 0.0,
        skip: int = 0,
        body: Optional[bytes] = None,
        content_type: str = "text/plain",
        then: Optional[Callable[[], None]] = None,
    ) -> Rule:
        rule = Rule(kind, method, path, times, status, after, delay, skip, body, content_type, then)
        with self.lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self.lock:
            self.rules.clear()
            self.log.clear()
            self.headers.clear()

    def faults(self) -> int:
        """Faults injected so far (counted when a rule fires)."""
        with self.lock:
            return sum(r.fired for r in self.rules)

    def count(self, method: Optional[str] = None, path: Optional[str] = None) -> int:
        pat = re.compile(path) if path else None
        with self.lock:
            return sum(
                1
                for m, p, _, _ in self.log
                if (method is None or m == method) and (pat is None or pat.search(p))
            )

    def _take(self, method: str, path: str) -> Optional[Rule]:
        with self.lock:
            for r in self.rules:
                if r.matches(method, path):
                    r.fired += 1
                    return r
        return None

    def _record(self, method: str, path: str, status: int, fault: str) -> None:
        with self.lock:
            self.log.append((method, path, status, fault))


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: FaultProxy

    def log_message(self, fmt, *args):  # quiet
        pass

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except (ValueError, OSError):  # the connection was reset on purpose (or by the client)
            self.close_connection = True

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            out = bytearray()
            while True:
                line = self.rfile.readline()
                n = int(line.split(b";")[0].strip() or b"0", 16)
                if n == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(n)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _reset(self) -> None:
        """Abort the connection with a TCP RST (SO_LINGER 0)."""
        try:
            self.wfile.flush()
        except OSError:
            pass
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.wfile.close()
        self.rfile.close()
        self.connection.close()
        self.close_connection = True

    def _proxy(self) -> None:
        p = self.owner
        method, path = self.command, self.path
        body = self._body()
        with p.lock:
            p.headers.append(dict(self.headers.items()))
        rule = p._take(method, path)
        if rule is not None and rule.kind == "status":
            msg = rule.body if rule.body is not None else f"injected fault {rule.status}".encode()
            self.send_response(rule.status)
            self.send_header("Content-Type", rule.content_type)
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(msg)
            p._record(method, path, rule.status, "status")
            if rule.then is not None:
                rule.then()
            return
        if rule is not None and rule.kind == "slow":
            time.sleep(rule.delay)
        conn = http.client.HTTPConnection(p.upstream_host, p.upstream_port, timeout=p.timeout)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            if body or method in ("POST", "PUT", "PATCH"):
                headers["Content-Length"] = str(len(body))
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            length = resp.getheader("Content-Length")
            no_body = method == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200
            data = None
            if not no_body and length is None:
                data = (
                    resp.read()
                )  # chunked / close-delimited upstream: small; re-sent with a length
            self.send_response_only(resp.status, resp.reason)
            for k, v in resp.getheaders():
                kl = k.lower()
                if kl in HOP or (data is not None and kl == "content-length"):
                    continue
                if kl == "location":
                    for src, dst in p.rewrite.items():
                        v = v.replace(f"//{src}/", f"//{dst}/").replace(f"//{src}?", f"//{dst}?")
                self.send_header(k, v)
            if data is not None:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            fault = rule.kind if rule is not None else ""
            p._record(method, path, resp.status, fault)
            if no_body:
                return
            if rule is not None and rule.kind in ("reset", "truncate"):
                left = rule.after
                src = resp if data is None else _Bytes(data)
                while left > 0:
                    chunk = src.read(min(left, 65536))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    left -= len(chunk)
                if (
                    rule.then is not None
                ):  # before the break: the client's retry must see its effect
                    self.wfile.flush()
                    rule.then()
                if rule.kind == "reset":
                    self._reset()
                else:
                    self.wfile.flush()
                    self.close_connection = True
                return
            if data is not None:
                self.wfile.write(data)
                return
            while True:
                chunk = resp.read(65536)
                if not chunk:
                    break
                self.wfile.write(chunk)
        except (ConnectionError, socket.timeout, http.client.HTTPException) as e:
            p._record(method, path, 502, f"upstream: {e.__class__.__name__}")
            self.close_connection = True
            try:
                self._reset()
            except OSError:
                pass
        finally:
            conn.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _proxy


class _Bytes:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def read(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        self.pos += len(out)
        return out
