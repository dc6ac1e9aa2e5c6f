"""A tar followed by an endless body: reading stops a bounded distance past the
end-of-archive marker instead of running until killed (docs/bad-input.md)."""

import gzip
import http.server
import io
import json
import time
import zlib

import pytest
from support import shardgen
from support.cli_fixtures import cli
from support.range_server import Loopback

from transforms.record_types import KEY, is_reject
from transforms.tar.damage import ShardCorrupt
from transforms.tar.grouping import iter_records
from transforms.tar.trailer import AFTER_END_COMPRESSED, AFTER_END_LIMIT

MEMBERS = [("a.txt", b"A"), ("a.cls", b"1"), ("b.txt", b"B"), ("b.cls", b"2")]


def _tar(members=MEMBERS) -> bytes:
    return shardgen.tar_bytes(members)


class ReadTooFar(Exception):
    """Not an error a reader handles: a reader that does not stop fails the test instead
    of running for ever."""


class Endless(io.RawIOBase):
    """``head``, then ``chunk()`` again and again, for ever; counts what was read, and
    raises :class:`ReadTooFar` once more than ``cap`` bytes were asked for."""

    def __init__(self, head: bytes, chunk, cap: int):
        self._buf, self._chunk, self.read_bytes, self._cap = head, chunk, 0, cap

    def readable(self):
        return True

    def readinto(self, b):
        if self.read_bytes > self._cap:
            raise ReadTooFar(f"{self.read_bytes} bytes read")
        while len(self._buf) < len(b):
            self._buf += self._chunk()
        n = len(b)
        b[:n], self._buf = self._buf[:n], self._buf[n:]
        self.read_bytes += n
        return n


def _gzip_of_tar_then_endless_deflate() -> bytes:
    """A gzip member whose data is the tar, then zeros without end: no trailer ever comes."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = z.compress(_tar()) + z.flush(zlib.Z_SYNC_FLUSH)
    block = bytes(1 << 16)
    return head, lambda: z.compress(block) or z.flush(zlib.Z_SYNC_FLUSH)


def _run(source):
    stream = io.BufferedReader(source)
    t0 = time.monotonic()
    out = list(iter_records(stream, "s.tar"))
    return out, time.monotonic() - t0


def _good(out):
    return [o[KEY] for o in out if not is_reject(o)]


@pytest.mark.parametrize(
    "tail", [b"\0", b"x", b"\0" * 9000 + b"y"], ids=["zeros", "data", "padding-then-data"]
)
def test_plain_tar_then_endless_bytes(tail):
    src = Endless(_tar(), lambda: tail * (65536 // len(tail) + 1), cap=AFTER_END_LIMIT + (1 << 20))
    out, secs = _run(src)
    assert _good(out) == ["a", "b"]
    (rej,) = [o for o in out if is_reject(o)]
    assert rej.key is None and not rej.counts_record and not isinstance(rej, ShardCorrupt)
    assert rej.kind == "stream goes on after the end-of-archive marker"
    assert f"reading stopped {AFTER_END_LIMIT} bytes past it" in rej.reason
    assert ("with data from offset" in rej.reason) == (tail != b"\0")
    assert secs < 30


def test_gzip_then_endless_zeros_after_its_trailer():
    """Python's gzip reader eats zero padding after a member a byte at a time, for ever:
    the compressed source is bounded too."""
    src = Endless(
        gzip.compress(_tar(), mtime=0), lambda: bytes(1 << 16), cap=AFTER_END_COMPRESSED + (1 << 20)
    )
    out, secs = _run(src)
    assert secs < 30
    corrupt = [o for o in out if isinstance(o, ShardCorrupt)]
    assert len(corrupt) == 1 and corrupt[0].reason.endswith("content unverified")


def test_gzip_member_that_never_ends():
    """Zeros decompressed without end after the tar (each compressed byte is ~1000 of
    them): bounded by what is decompressed, and the records are unverified."""
    head, more = _gzip_of_tar_then_endless_deflate()
    # AFTER_END_LIMIT zeros compress to a few KB: reading 1 MB of them is reading too far
    src = Endless(head, more, cap=1 << 20)
    out, secs = _run(src)
    assert secs < 30
    assert _good(out) == ["a", "b"]  # ShardCorrupt makes the converter reject them all
    corrupt = [o for o in out if isinstance(o, ShardCorrupt)]
    assert len(corrupt) == 1 and "before the gzip CRC check" in corrupt[0].reason


def test_small_padding_and_concatenated_tars_as_before():
    """Within the limit nothing changes: padding is silent, a second archive is reported
    with its exact size."""
    tar = _tar()
    out, _ = _run(io.BytesIO(tar + bytes(1 << 20)))
    assert _good(out) == ["a", "b"] and not [o for o in out if is_reject(o)]
    out, _ = _run(io.BytesIO(tar + tar))
    (rej,) = [o for o in out if is_reject(o)]
    assert rej.reason.startswith("ignored ") and "after the end-of-archive marker" in rej.reason


def _endless_server(body: bytes):
    """An HTTP server that answers every GET with ``body``, then zeros until the client
    hangs up (no Content-Length: the body ends when the connection does)."""
    sent = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/x-tar")
            self.end_headers()
            n = 0
            try:
                self.wfile.write(body)
                block = bytes(1 << 16)
                while True:
                    self.wfile.write(block)
                    n += len(block)
            except OSError:  # the client hung up
                sent.append(n)

    return Loopback(Handler), sent


@pytest.mark.parametrize(
    "flags",
    [["--runner", "local"], ["--runner=FnApiRunner"]],
    ids=["local", "beam"],
)
@pytest.mark.slow
def test_cli_job_on_an_endless_http_body_ends_with_all_records(tmp_path, flags):
    server, sent = _endless_server(_tar())
    try:
        url = f"{server.url}/s.tar"
        out = tmp_path / "o" / "t-{}.record"
        t0 = time.monotonic()
        p = cli(
            "convert",
            url,
            "-o",
            str(out),
            *flags,
            "--no-progress",
            "--max-rejects",
            "1",
            timeout=120,
        )
        secs = time.monotonic() - t0
    finally:
        server.stop()
    assert p.returncode == 0, p.stderr
    m = json.loads((tmp_path / "o" / "t.record.manifest.json").read_text())
    assert m["totals"]["records_written"] == 2
    (rej,) = [json.loads(x) for x in open(tmp_path / "o" / "t.record.rejects.jsonl")]
    assert rej["key"] is None and rej["reason"].startswith(
        "stream goes on after the end-of-archive marker"
    )
    # the server was hung up on after a few MiB, not made to send until the test ended
    assert sent and max(sent) < 64 << 20, sent
    assert secs < 90
