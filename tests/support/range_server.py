"""A static-file HTTP/1.1 server for the tests that implements what shard readers rely on:
``HEAD``, single ``Range`` requests (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``; 206 with
``Content-Range``, 416 when unsatisfiable), ``ETag`` / ``Last-Modified`` validators
(``If-Range``, ``If-Match``, ``If-None-Match``) and ``Accept-Ranges: bytes``.

Why not ``http.server.SimpleHTTPRequestHandler``: it ignores ``Range`` and sends no
``ETag``, so a client's resume logic would never be exercised.  The ETag is nginx's shape
(``"<mtime>-<size>"``, here with the inode too), so replacing a file changes it.

``ranges=False`` makes it behave like a server without range support: no
``Accept-Ranges``, every GET answered whole with 200.  Missing files get a 404 with an
HTML body, as real web servers send.

Runs on threads of the test process, on 127.0.0.1 and a free port.
"""

from __future__ import annotations

import email.utils
import http.server
import os
import re
import socketserver
import threading
from typing import Optional, Tuple
from urllib.parse import unquote, urlsplit

_RANGE = re.compile(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*\Z")
NOT_FOUND_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>"
    b"<body><h1>Not Found</h1></body></html>\n"
)


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A test's own handler: HTTP/1.1, and no access log on the test's stderr."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_file_head(self, root: str) -> bytes:
        """The 200 head for the file under ``root`` named by the path's last part; its
        bytes, for the caller to send as it likes."""
        with open(os.path.join(root, os.path.basename(self.path)), "rb") as f:
            data = f.read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        return data


class Loopback:
    """A threaded HTTP server for a test's own handler class, on a free loopback port,
    serving until :meth:`stop`."""

    def __init__(self, handler, name: str = "loopback-http"):
        self._server = _Server(("127.0.0.1", 0), handler)
        threading.Thread(target=self._server.serve_forever, name=name, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class RangeServer:
    def __init__(self, root: str, ranges: bool = True):
        self.root, self.ranges = root, ranges
        self.requests = []  # (method, path, Range header or None, status)
        self.lock = threading.Lock()
        self._server: Optional[Loopback] = None

    @property
    def url(self) -> str:
        return self._server.url

    def start(self) -> "RangeServer":
        owner = self

        class Handler(_Handler):
            server_owner = owner

        self._server = Loopback(Handler, name="range-server")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def _note(self, method: str, path: str, rng: Optional[str], status: int) -> None:
        with self.lock:
            self.requests.append((method, path, rng, status))


def etag_of(st: os.stat_result) -> str:
    return f'"{st.st_mtime_ns:x}-{st.st_ino:x}-{st.st_size:x}"'


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_owner: RangeServer

    def log_message(self, fmt, *args):  # quiet
        pass

    def _file(self) -> Optional[str]:
        rel = unquote(urlsplit(self.path).path).lstrip("/")
        full = os.path.realpath(os.path.join(self.server_owner.root, rel))
        root = os.path.realpath(self.server_owner.root)
        if not full.startswith(root + os.sep) or not os.path.isfile(full):
            return None
        return full

    def _simple(self, status: int, body: bytes, ctype: str = "text/html", extra=()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _range(self, size: int) -> Tuple[str, Optional[Tuple[int, int]]]:
        """('full'|'part'|'bad', (first, last)) for this request's Range header."""
        value = self.headers.get("Range")
        if not value or not self.server_owner.ranges:
            return "full", None
        m = _RANGE.match(value)
        if not m or (not m.group(1) and not m.group(2)):
            return "full", None  # unsupported (e.g. several ranges): the whole body, as allowed
        if m.group(1):
            first = int(m.group(1))
            last = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            if first >= size or (m.group(2) and int(m.group(2)) < first):
                return "bad", None
        else:
            n = int(m.group(2))
            if n == 0:
                return "bad", None
            first, last = max(0, size - n), size - 1
        return "part", (first, last)

    def _serve(self) -> None:
        owner = self.server_owner
        path = self._file()
        if path is None:
            owner._note(self.command, self.path, self.headers.get("Range"), 404)
            self._simple(404, NOT_FOUND_PAGE)
            return
        f = open(path, "rb")
        try:
            st = os.fstat(f.fileno())
            etag = etag_of(st)
            modified = email.utils.formatdate(st.st_mtime, usegmt=True)
            validators = [("ETag", etag), ("Last-Modified", modified)]
            if owner.ranges:
                validators.append(("Accept-Ranges", "bytes"))
            if_match = self.headers.get("If-Match")
            if (
                if_match
                and if_match.strip() != "*"
                and etag not in [t.strip() for t in if_match.split(",")]
            ):
                owner._note(self.command, self.path, self.headers.get("Range"), 412)
                self._simple(412, b"precondition failed\n", "text/plain", validators)
                return
            kind, span = self._range(st.st_size)
            if_range = self.headers.get("If-Range")
            if kind != "full" and if_range and if_range.strip() not in (etag, modified):
                kind, span = "full", None  # the client's copy is another version: send it all
            if kind == "bad":
                owner._note(self.command, self.path, self.headers.get("Range"), 416)
                self._simple(
                    416,
                    b"",
                    "text/plain",
                    validators + [("Content-Range", f"bytes */{st.st_size}")],
                )
                return
            first, last = span if span else (0, st.st_size - 1)
            length = max(0, last - first + 1)
            status = 206 if kind == "part" else 200
            owner._note(self.command, self.path, self.headers.get("Range"), status)
            self.send_response(status)
            self.send_header("Content-Type", "application/x-tar")
            self.send_header("Content-Length", str(length))
            if status == 206:
                self.send_header("Content-Range", f"bytes {first}-{last}/{st.st_size}")
            for k, v in validators:
                self.send_header(k, v)
            self.end_headers()
            if self.command == "HEAD":
                return
            f.seek(first)
            left = length
            while left > 0:
                chunk = f.read(min(left, 64 << 10))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)
        except (ConnectionError, BrokenPipeError):
            self.close_connection = True
        finally:
            f.close()

    do_GET = do_HEAD = _serve


def replace_file(path: str, data: bytes) -> None:
    """Replace ``path`` atomically with ``data`` (a new inode: a new ETag)."""
    tmp = path + ".new"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
