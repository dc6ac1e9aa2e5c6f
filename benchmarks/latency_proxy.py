"""A loopback HTTP reverse proxy that delays every request/response turn and counts them.

Put in front of an S3-compatible server (moto in ``benchmarks.latency``), it makes the
store look like a bucket far away: each request waits ``delay_s`` before it is forwarded,
as a round trip to a real bucket would, while requests on other connections wait at the
same time -- so a job that keeps many requests in flight pays the delay once per wave,
and a job that sends them one after another pays it per request.

It counts every request by method, by S3 operation kind (:func:`s3_kind`) and by area
(the key with its numbers and ids blanked: ``in/shard-#.tar``, ``work/...``), with
the time of the first and last request of each burst of one (kind, area): the requests
of one step of a job share a kind and an area, so these give the steps' times as the
store saw them.

Bodies pass through unchanged and streamed, in both directions: a request body with
``Content-Length`` is copied that many bytes, a ``Transfer-Encoding: chunked`` one (S3's
``aws-chunked`` uploads ride on it) chunk by chunk with its framing and trailers as they
came.  The client's headers go upstream as sent, ``Host`` included: SigV4 signs ``Host``,
so a client signs for the proxy's address and the signature still matches what it
signed (moto checks no signatures unless told to).

``python -m benchmarks.latency_proxy --upstream http://127.0.0.1:5000 --delay-ms 25``
runs one until Ctrl-C and prints its counts as JSON on exit.
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import re
import socket
import threading
import time
import urllib.parse
from typing import Dict, List, Optional, Tuple

# hop-by-hop headers: they describe one connection, not the request (RFC 9110 7.6.1).
# Transfer-Encoding is kept: a chunked body is forwarded with its framing as it came.
# Expect is dropped: the proxy answers 100-continue itself and has the body to send.
_HOP = {"connection", "keep-alive", "proxy-connection", "te", "upgrade", "expect"}
_COPY = 1 << 16
_WORD = re.compile(r"[0-9A-Za-z]+")
_HEX = re.compile(r"[0-9a-f]{4,}")


def _shape(key: str) -> str:
    """A key with its numbers and ids blanked (``work/p/piece-000012.json`` ->
    ``work/p/piece-#.json``): the requests of one step for many shards share a shape."""

    def blank(m: "re.Match") -> str:
        w = m.group(0)
        if w.isdigit():
            return "#"
        if _HEX.fullmatch(w) and not w.isalpha():
            return "*"  # an id (hex digest, uuid part)
        return w

    return _WORD.sub(blank, key)


def s3_kind(method: str, path: str, headers=None) -> Tuple[str, str]:
    """(operation kind, area) of a path-style S3 request: kind from the method, whether a
    key is named, the query's sub-resources and the headers that change what a GET or PUT
    does (``Range``, ``x-amz-copy-source``); area = the key (the listed prefix for a
    listing) with numbers and ids blanked, '' for requests on the
    bucket itself."""
    headers = headers or {}
    copy = headers.get("x-amz-copy-source") is not None
    ranged = headers.get("Range") is not None
    parts = urllib.parse.urlsplit(path)
    query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
    segments = parts.path.lstrip("/").split("/", 1)
    key = urllib.parse.unquote(segments[1]) if len(segments) > 1 else ""
    if not key and "prefix" in query:
        key = query["prefix"][0]
    area = _shape(key)
    named = len(segments) > 1 and segments[1] != ""
    if not named:  # requests on a bucket
        if method == "GET":
            kind = "list-uploads" if "uploads" in query else "list"
        elif method == "POST" and "delete" in query:
            kind = "delete-multi"
        else:
            kind = f"bucket-{method.lower()}"
    elif "uploadId" in query:
        kind = {
            "PUT": "mpu-part-copy" if copy else "mpu-part",
            "POST": "mpu-complete",
            "DELETE": "mpu-abort",
            "GET": "mpu-list-parts",
        }.get(method, "mpu-other")
    elif method == "POST" and "uploads" in query:
        kind = "mpu-create"
    elif method == "PUT" and copy:
        kind = "copy"
    elif method == "GET" and ranged:
        kind = "get-range"
    else:
        kind = {"GET": "get", "HEAD": "head", "PUT": "put", "DELETE": "delete"}.get(
            method, method.lower()
        )
    return kind, area


GAP_S = 2.0  # a pause this long in one (kind, area)'s requests ends a burst of them


class Counts:
    """Thread-safe tallies: by method, by kind, by (kind, area) in bursts, and the most
    requests in flight at once.  A burst is a run of one (kind, area)'s requests with no
    pause over ``GAP_S``: a step that reads every piece twice, at two points of the job,
    shows as two bursts."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.t0 = time.monotonic()
            self.total = 0
            self.methods: Dict[str, int] = {}
            self.kinds: Dict[str, int] = {}
            self.areas: Dict[Tuple[str, str], List[float]] = {}  # -> request start times
            self.statuses: Dict[int, int] = {}
            self.in_flight = 0
            self.max_in_flight = 0

    def begin(self, method: str, path: str, headers=None) -> None:
        kind, area = s3_kind(method, path, headers)
        now = time.monotonic() - self.t0
        with self.lock:
            self.total += 1
            self.methods[method] = self.methods.get(method, 0) + 1
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            self.areas.setdefault((kind, area), []).append(now)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def end(self, status: int) -> None:
        with self.lock:
            self.in_flight -= 1
            self.statuses[status] = self.statuses.get(status, 0) + 1

    def snapshot(self) -> dict:
        with self.lock:
            return {
                "total": self.total,
                "by_method": dict(sorted(self.methods.items())),
                "by_kind": dict(sorted(self.kinds.items())),
                "by_kind_area": sorted(
                    (b for (k, a), times in self.areas.items() for b in _bursts(k, a, times)),
                    key=lambda b: (b["first_s"], b["last_s"]),
                ),
                "by_status": {str(s): n for s, n in sorted(self.statuses.items())},
                "max_in_flight": self.max_in_flight,
            }


def _bursts(kind: str, area: str, times: List[float]) -> List[dict]:
    out: List[dict] = []
    for t in sorted(times):
        if out and t - out[-1]["last_s"] <= GAP_S:
            out[-1]["count"] += 1
            out[-1]["last_s"] = t
        else:
            out.append({"kind": kind, "area": area, "count": 1, "first_s": t, "last_s": t})
    for b in out:
        b["first_s"], b["last_s"] = round(b["first_s"], 3), round(b["last_s"], 3)
    return out


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a client reuses its connections, as with S3
    # headers and body go out in separate writes: with Nagle's algorithm the body would
    # wait for the client's (delayed) ACK of the headers, tens of ms a request
    disable_nagle_algorithm = True
    server: "_Server"

    def log_message(self, format, *args):  # one line per request would be noise here
        pass

    def _upstream(self) -> http.client.HTTPConnection:
        """This connection's own upstream connection, reused while the client keeps its
        connection (one upstream request at a time, as on the client's side)."""
        conn = getattr(self, "_conn", None)
        if conn is None:
            host, port = self.server.upstream
            conn = self._conn = http.client.HTTPConnection(host, port, timeout=300)
            conn.connect()
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as above
        return conn

    def _drop_upstream(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()
            self._conn = None

    def finish(self):
        self._drop_upstream()
        super().finish()

    def _forward(self) -> None:
        counts = self.server.counts
        counts.begin(self.command, self.path, self.headers)
        status = 0
        try:
            status = self._relay()
        finally:
            counts.end(status)

    def _relay(self) -> int:
        if self.server.delay_s:
            time.sleep(self.server.delay_s)  # the round trip to a bucket far away
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in _HOP]
        chunked = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
        length = int(self.headers.get("Content-Length") or 0)
        conn = self._upstream()
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for k, v in headers:
                conn.putheader(k, v)
            conn.endheaders()
            if chunked:
                self._copy_chunked(conn.send)
            else:
                self._copy_exact(length, conn.send)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException):
            # the upstream closed a kept-alive connection, or failed: the client sees a
            # reset and retries, as it would with the server itself
            self._drop_upstream()
            self.close_connection = True
            raise
        self.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP and k.lower() != "transfer-encoding":
                self.send_header(k, v)
        no_body = self.command == "HEAD" or resp.status in (204, 304) or resp.status < 200
        # The client's connection stays open whatever the upstream does with its own
        # (moto's server closes every connection; S3 keeps them): a client reconnecting
        # per request is not what it does with a bucket.  A body of unknown length (the
        # upstream's chunks, which http.client takes off, or one that ends with the
        # connection) goes to the client in new chunks of the same bytes.
        out_chunked = not no_body and resp.getheader("Content-Length") is None
        if out_chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if not no_body:
            while True:
                block = resp.read1(_COPY)
                if not block:
                    break
                if out_chunked:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
                else:
                    self.wfile.write(block)
            if out_chunked:
                self.wfile.write(b"0\r\n\r\n")
        else:
            resp.read()
        self.wfile.flush()
        if resp.will_close:
            self._drop_upstream()
        return resp.status

    def _copy_exact(self, n: int, send) -> None:
        while n > 0:
            block = self.rfile.read(min(_COPY, n))
            if not block:
                raise ConnectionError("client body ended early")
            send(block)
            n -= len(block)

    def _copy_chunked(self, send) -> None:
        """Forward a chunked body byte for byte: size lines, data, the last chunk and its
        trailers (where aws-chunked uploads may put their checksum)."""
        while True:
            line = self.rfile.readline(_COPY)
            if not line:
                raise ConnectionError("client chunked body ended early")
            send(line)
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                break
            self._copy_exact(size + 2, send)  # the data and its CRLF
        while True:  # trailers, then the empty line that ends the body
            line = self.rfile.readline(_COPY)
            send(line)
            if line in (b"\r\n", b"\n", b""):
                break

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True  # a client that keeps a connection open does not hold up stop()
    request_queue_size = 256  # Beam's workers open many connections at once

    def __init__(self, addr, upstream: Tuple[str, int], delay_s: float):
        self.upstream = upstream
        self.delay_s = delay_s
        self.counts = Counts()
        super().__init__(addr, _Handler)

    def handle_error(self, request, client_address):
        # a client that hung up or an upstream reset: the client sees it and retries;
        # a traceback per such connection would bury the job's own output
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class LatencyProxy:
    """``LatencyProxy(upstream_url, delay_s).start()`` serves on 127.0.0.1 on a free port
    (``.url``) from a thread of this process; ``.counts()``, ``.reset()``, ``.stop()``."""

    def __init__(self, upstream: str, delay_s: float = 0.025, port: int = 0):
        u = urllib.parse.urlsplit(upstream)
        self.server = _Server(("127.0.0.1", port), (u.hostname, u.port or 80), delay_s)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread: Optional[threading.Thread] = None

    @property
    def delay_s(self) -> float:
        return self.server.delay_s

    @delay_s.setter
    def delay_s(self, value: float) -> None:
        self.server.delay_s = value

    def start(self) -> "LatencyProxy":
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="latency-proxy", daemon=True
        )
        self.thread.start()
        return self

    def counts(self) -> dict:
        return self.server.counts.snapshot()

    def reset(self) -> None:
        self.server.counts.reset()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self.thread is not None:
            self.thread.join(10)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--upstream", required=True, help="the server's URL, http://host:port")
    p.add_argument("--delay-ms", type=float, default=25.0, help="delay per request (ms)")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: free)")
    args = p.parse_args(argv)
    proxy = LatencyProxy(args.upstream, args.delay_ms / 1000, args.port).start()
    print(f"proxy {proxy.url} -> {args.upstream}, {args.delay_ms} ms a request", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        proxy.stop()
        print(json.dumps(proxy.counts(), indent=1))


if __name__ == "__main__":
    main()
