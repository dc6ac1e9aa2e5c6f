"""Shards served over HTTP(S) (``https://host/path/train-000.tar``), read with ``requests``.

* No listing: HTTP has none, so a brace template's every expanded name is one shard, taken
  as it is (:meth:`HTTPStore.expand`); a shard that is not there is a ``fetch`` reject
  (``missing shard``, HTTP 404) naming its URL.  A glob (``*``, ``[..]`` in the path) cannot
  be matched without a listing: a usage error.  (``?`` starts a query string in a URL, so
  it is never a glob character here.)
* Headers (``Authorization: Bearer ...`` for a private hub) are the job's
  ``StoreConfig.http_headers``: ``--http-header`` values over the defaults
  ``$TAR2TF_HTTP_HEADERS`` holds (one ``Name: value`` per line), read once where the
  config is made.  They travel with the config to every worker (a remote one too, which
  the launcher's environment does not reach), and are never printed (the config's repr
  leaves them out), written to ``job.json`` or the manifest; errors name the URL, never
  a header.  A redirect to another origin (scheme, host or port) gets none of these
  headers (``Authorization``, ``PRIVATE-TOKEN``, ``X-Api-Key`` alike), unless
  ``http_cross_origin`` (``--http-header-cross-origin``,
  ``$TAR2TF_HTTP_HEADER_CROSS_ORIGIN=1``) allows it: a hub that redirects to its own
  CDN, say.  A redirect within the origin keeps them all.
* Reads stream (``stream=True``, ``Accept-Encoding: identity`` so lengths are the object's
  bytes) under the retry policy (:mod:`transforms.stores.retry`): connection faults, 408/429 and
  5xx are retried; a body cut short resumes at the byte reached, with ``Range: bytes=N-``
  when the first answer said ``Accept-Ranges: bytes``, else by reading again from the start
  and skipping the bytes already handed out.  Every answer of one read must name the same
  version as the first (``ETag``, ``Last-Modified``, size): a shard replaced mid-read fails
  with a ``fetch`` reject (``object changed``) instead of splicing two versions.  A server
  sending neither validator is checked on the size only.
* Read-only: writing or deleting an ``http(s)://`` URL is an error.
"""

from __future__ import annotations

import re
import threading
from typing import Dict, Iterator, List, Optional, Tuple
from urllib.parse import urlsplit

from transforms.stores.base import Store, StoreConfig
from transforms.stores.retry import ObjectChangedError, RetryPolicy, discard, open_resumable

_GLOB = re.compile(r"[*\[]")
IDENTITY_HEADERS = ("ETag", "Last-Modified")


def origin(url: str) -> Tuple[str, str, Optional[int]]:
    """(scheme, host, port) of ``url``, the port made explicit (80, 443)."""
    p = urlsplit(url)
    scheme = p.scheme.lower()
    try:
        port = p.port
    except ValueError:  # a port that is no number: an origin of its own
        port = -1
    if port is None:
        port = {"http": 80, "https": 443}.get(scheme)
    return scheme, (p.hostname or "").lower(), port


_session_class = None


def _new_session():
    """A ``requests.Session`` whose redirects carry the user's headers only within the
    origin the request started at (``start``, set before each request)."""
    global _session_class
    if _session_class is None:
        import requests

        class _Session(requests.Session):
            start: Optional[Tuple[str, str, Optional[int]]] = None
            user: Dict[str, str] = {}  # the job's headers (HTTPStore._session)
            cross_origin = False

            def rebuild_auth(self, prepared_request, response):
                # requests drops Authorization on a change of host and Cookie on every
                # redirect, but keeps every other header: a token in PRIVATE-TOKEN or
                # X-Api-Key would reach whatever host the redirect names.  Compared with
                # where the request started, not the last hop: A -> B -> B is still B.
                super().rebuild_auth(prepared_request, response)
                user = self.user
                if not user:
                    return
                if origin(prepared_request.url) == self.start or self.cross_origin:
                    prepared_request.headers.update(user)
                else:
                    for name in user:
                        prepared_request.headers.pop(name, None)

        _session_class = _Session
    return _session_class()


class HTTPStatusError(IOError):
    """An HTTP answer that is not the object: ``status_code`` lets the retry policy decide
    (408/429/5xx transient, the rest final).  The message names the URL and status only."""

    def __init__(self, url: str, status: int, reason: str):
        super().__init__(f"{url}: HTTP {status} {reason}".rstrip())
        self.status_code = status


class _Body:
    """A response's raw body (no decoding) that releases its connection on close.

    Reads return what has arrived (``read1``): urllib3's ``read(n)`` drops the bytes it
    got when the connection breaks before ``n``, which would make every resume start from
    the last piece boundary instead of the byte reached."""

    def __init__(self, resp):
        self.resp = resp

    def read(self, n: int = -1) -> bytes:
        raw = self.resp.raw
        if n is None or n < 0:
            return raw.read(decode_content=False)
        return raw.read1(n, decode_content=False)

    def close(self) -> None:
        self.resp.close()

    def abort(self) -> None:
        """From another thread: wake a read blocked on this body's socket (it then ends
        early, as at a reset).  Best effort: where the socket cannot be found, the read
        ends at its next byte or timeout."""
        import socket

        raw = self.resp.raw
        conn = getattr(raw, "_connection", None)
        sock = getattr(conn, "sock", None)
        if sock is None:  # through http.client's buffered socket file
            fp = getattr(getattr(raw, "_fp", None), "fp", None)
            sock = getattr(getattr(fp, "raw", None), "_sock", None)
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)


class HTTPStore(Store):
    scheme = "http"
    listable = False  # see transforms.tar.sources: templates are expanded, never listed

    def __init__(self, config: StoreConfig):
        self.config = config
        self.policy = RetryPolicy.from_config(config)
        self.timeout = (min(10.0, config.read_timeout_s), config.read_timeout_s)
        self._local = threading.local()  # a requests.Session per thread (connection reuse)

    def __repr__(self) -> str:  # never shows a header
        return "HTTPStore()"

    def endpoint_name(self) -> str:
        return ""

    def _session(self):
        s = getattr(self._local, "session", None)
        if s is None:
            s = self._local.session = _new_session()
            s.user = dict(self.config.http_headers)
            s.cross_origin = self.config.http_cross_origin
        return s

    def _request(self, method: str, url: str, offset: int = 0):
        headers = {"Accept-Encoding": "identity", **dict(self.config.http_headers)}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        session = self._session()
        session.start = origin(url)  # the origin the headers were given for
        resp = session.request(
            method, url, headers=headers, stream=True, timeout=self.timeout, allow_redirects=True
        )
        status = resp.status_code
        if status in (200, 206):
            return resp
        resp.close()
        if status == 404 or status == 410:
            raise FileNotFoundError(f"{url}: not found (HTTP {status})")
        if status in (401, 403):
            raise PermissionError(f"{url}: access denied (HTTP {status})")
        raise HTTPStatusError(url, status, resp.reason or "")

    # -- templates ----------------------------------------------------------------------

    @staticmethod
    def expand(template: str, names: List[str]) -> List[str]:
        """The shard URLs of a template's expanded ``names``: each one as it is."""
        for n in names:
            if _GLOB.search(urlsplit(n).path):
                raise ValueError(
                    f"{template}: a glob needs a listing and HTTP has none; "
                    "name the shards with a brace range instead, e.g. train-{000..099}.tar"
                )
        return list(names)

    # -- Store --------------------------------------------------------------------------

    def list(self, prefix: str) -> Iterator[str]:
        # reached for an output or work directory (sources never list: see expand)
        raise ValueError(
            f"{prefix}: http(s):// shards can be read one by one, not listed or written; "
            "write outputs to a local path, gs://, ais:// or s3://"
        )

    def open_read(self, url: str):
        pin = _Pin(url)

        def open_at(offset: int):
            try:
                resp = self._request("GET", url, offset if pin.ranges else 0)
            except FileNotFoundError:
                if pin.first is None:
                    raise
                raise ObjectChangedError(url, f"at byte {offset}: it is gone (HTTP 404)") from None
            try:
                total = _int(resp.headers.get("Content-Length"))
                start = 0
                if resp.status_code == 206:
                    start, total = _content_range(resp.headers.get("Content-Range", ""))
                pin.check(resp.headers, total, offset)
                if resp.status_code == 206 and start != offset:
                    raise ObjectChangedError(
                        url, f"asked for byte {offset}, the server sent from byte {start}"
                    )
                body = _Body(resp)
                if resp.status_code != 206 and offset:
                    discard(
                        body, offset
                    )  # no ranges: read again from the start, skip what was delivered
            except BaseException:
                resp.close()
                raise
            return body, total, total

        return _open_checked(url, open_at, self.policy)

    def _head(self, url: str):
        def attempt():
            resp = self._request("HEAD", url)
            resp.close()
            return resp

        return self.policy.call(attempt, f"head {url}")

    def exists(self, url: str) -> bool:
        try:
            self._head(url)
            return True
        except FileNotFoundError:
            return False

    def size(self, url: str) -> int:
        n = _int(self._head(url).headers.get("Content-Length"))
        if n is None:
            raise OSError(f"{url}: the server sent no Content-Length")
        return n

    def open_write(self, url: str, durable: bool = True):
        raise ValueError(
            f"{url}: http(s):// is read-only here; write to a local path, gs://, ais:// or s3://"
        )

    def delete(self, url: str) -> None:
        raise ValueError(f"{url}: http(s):// is read-only here")


def _open_checked(url: str, open_at, policy: RetryPolicy):
    """A resumable reader with its first request made now, so that 404/403 surface here."""
    reader = open_resumable(open_at, policy, url)
    try:
        reader.raw.open()
    except BaseException:
        reader.close()
        raise
    return reader


class _Pin:
    """The version a read started on (its first answer's validators and size), and whether
    that server takes range requests; every later answer must name the same version."""

    def __init__(self, url: str):
        self.url = url
        self.first: Optional[Tuple] = None
        self.ranges = False

    def check(self, headers, total: Optional[int], offset: int) -> None:
        got = tuple(headers.get(h) for h in IDENTITY_HEADERS) + (total,)
        if self.first is None:
            self.first = got
            self.ranges = "bytes" in (headers.get("Accept-Ranges") or "").lower()
            return
        if got != self.first:
            names = IDENTITY_HEADERS + ("size",)
            diff = ", ".join(f"{n} {a} -> {b}" for n, a, b in zip(names, self.first, got) if a != b)
            raise ObjectChangedError(self.url, f"at byte {offset}: {diff}")


def _content_range(value: str) -> Tuple[int, Optional[int]]:
    """``bytes 100-199/1000`` -> (100, 1000); the total is None for ``*``."""
    m = re.match(r"\s*bytes\s+(\d+)-\d+/(\d+|\*)\s*\Z", value)
    if not m:
        raise OSError(f"unreadable Content-Range {value!r}")
    return int(m.group(1)), (None if m.group(2) == "*" else int(m.group(2)))


def _int(v) -> Optional[int]:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
