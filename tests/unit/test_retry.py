"""The retry policy and the resumable reader on their own (the stores' tests run them
against real servers; these pin down classification, bounds and both resume strategies)."""

from __future__ import annotations

import io
import random
import time

import pytest
import requests

from transforms.stores.retry import (
    FetchError,
    ResumableReader,
    RetryPolicy,
    ShortBodyError,
    discard,
    is_transient,
    open_resumable,
    permanent_error,
)

FAST = RetryPolicy(attempts=8, initial_s=0.001, max_s=0.005, total_s=10)


class _Status(Exception):
    def __init__(self, code):
        super().__init__(f"HTTP {code}")
        self.status_code = code


@pytest.mark.parametrize(
    "exc,transient",
    [
        (_Status(500), True),
        (_Status(503), True),
        (_Status(429), True),
        (_Status(408), True),
        (_Status(404), False),
        (_Status(403), False),
        (_Status(400), False),
        (ConnectionResetError(), True),
        (TimeoutError(), True),
        (ShortBodyError("x"), True),
        (requests.exceptions.ChunkedEncodingError(), True),
        (requests.exceptions.ReadTimeout(), True),
        (FileNotFoundError(), False),
        (PermissionError(), False),
        (ValueError("bad"), False),
    ],
)
def test_classification(exc, transient):
    assert is_transient(exc) is transient


def test_permanent_error_mapping():
    assert isinstance(permanent_error(_Status(404), "u"), FileNotFoundError)
    assert isinstance(permanent_error(_Status(403), "u"), PermissionError)
    assert permanent_error(_Status(500), "u") is None


def test_policy_is_bounded_by_attempts_and_by_time():
    calls = []

    def fail():
        calls.append(1)
        raise _Status(503)

    with pytest.raises(_Status):
        RetryPolicy(attempts=3, initial_s=0.001, max_s=0.001, total_s=100).call(fail)
    assert len(calls) == 3
    calls.clear()
    t0 = time.time()
    with pytest.raises(_Status):
        RetryPolicy(attempts=10_000, initial_s=0.05, max_s=0.05, total_s=0.3).call(fail)
    # 10,000 attempts would take ~500 s; the margin over 0.3 s is for a loaded machine
    assert time.time() - t0 < 10 and 2 <= len(calls) < 20
    calls.clear()
    with pytest.raises(_Status):  # permanent: one call only
        FAST.call(lambda: (calls.append(1), (_ for _ in ()).throw(_Status(404))))
    assert len(calls) == 1


class _Flaky(io.RawIOBase):
    """A body that breaks (reset or early EOF) after ``cut`` bytes."""

    def __init__(self, data, cut, how):
        self.data, self.pos, self.cut, self.how = data, 0, cut, how

    def readable(self):
        return True

    def read(self, n=-1):
        if self.pos >= self.cut:
            if self.how == "reset" and self.cut < len(self.data):
                raise ConnectionResetError("reset by peer")
            return b""  # short body
        n = len(self.data) - self.pos if n < 0 else n
        out = self.data[self.pos : min(self.pos + n, self.cut)]
        self.pos += len(out)
        return out


@pytest.mark.parametrize("strategy", ["range", "restart"])
@pytest.mark.parametrize("known_size", [True, False])
def test_resumable_reader_never_repeats_or_drops(strategy, known_size):
    data = random.Random(1).randbytes(200_000)
    rng = random.Random(2)
    opens = []

    def open_at(offset):
        opens.append(offset)
        broken = len(opens) <= 6
        if strategy == "range":
            body = data[offset:]
            stream = _Flaky(
                body,
                rng.randrange(1, len(body)) if broken else len(body),
                rng.choice(["reset", "eof"]),
            )
        else:  # no range support: the whole object again, the first ``offset`` bytes skipped
            stream = _Flaky(
                data, rng.randrange(offset + 1, len(data)) if broken else len(data), "reset"
            )
            discard(stream, offset)
        if not known_size:  # unknown length: only resets can be noticed
            stream.how = "reset"
            return stream, None, None
        return stream, len(data), len(data)

    with open_resumable(open_at, FAST, "obj") as f:
        got = b"".join(iter(lambda: f.read(rng.randrange(1, 9000)), b""))
    assert got == data and len(opens) == 7


def test_reader_seek_and_failure_reports():
    data = bytes(range(256)) * 100

    def open_at(offset):
        return io.BytesIO(data[offset:]), len(data), len(data)

    r = ResumableReader(open_at, FAST, "obj")
    r.seek(1000)
    assert r.read(10) == data[1000:1010] and r.tell() == 1010
    assert r.seek(-5, io.SEEK_END) == len(data) - 5 and r.read() == data[-5:]

    def refused(offset):
        raise _Status(400)

    bad = ResumableReader(refused, FAST, "obj")
    with pytest.raises(FetchError, match="not retryable"):
        bad.read(10)


@pytest.mark.parametrize(
    "how,says",
    [
        ("reset", "(retries spent): ConnectionResetError"),
        ("eof", "(retries spent): ShortBodyError"),
        ("denied", "(not retryable): PermissionError"),
    ],
)
def test_a_read_failing_mid_object_is_a_fetch_error_whatever_its_type(how, says):
    """OSErrors (a reset, a body cut short at every try, a 403 mid-read) escaped the reader
    as themselves, so the tar reader took them for a damaged archive (`tar` rejects): they
    are FetchErrors saying where and why, as the SDKs' own errors already were."""
    data = bytes(range(256)) * 100

    def open_at(offset):
        if offset and how == "denied":
            raise PermissionError("obj: access denied (HTTP 403)")
        return (
            _Flaky(data[offset:], 0 if offset else 1000, "eof" if how == "eof" else "reset"),
            len(data),
            len(data),
        )

    r = ResumableReader(
        open_at, RetryPolicy(attempts=3, initial_s=0.001, max_s=0.001, total_s=10), "obj"
    )
    assert r.read(1000) == data[:1000]
    with pytest.raises(FetchError) as err:
        r.read(10)
    assert str(err.value).startswith("obj: read failed at byte 1000 ") and says in str(err.value)


@pytest.mark.parametrize(
    "field", ["retry_initial_s", "retry_max_s", "retry_total_s", "read_timeout_s"]
)
def test_store_config_refuses_seconds_out_of_range(field):
    """The Python API's StoreConfig holds its seconds to the CLI's bounds when built, so a
    job never starts with a wait that overflows the clocks (``inf``, ``1e10``), none, or
    one that is not a number."""
    from transforms.stores import StoreConfig
    from transforms.stores.base import MAX_SECONDS

    StoreConfig(**{field: MAX_SECONDS})
    for bad in (float("inf"), float("nan"), 1e10, MAX_SECONDS + 1, 0, -1.0):
        with pytest.raises(ValueError, match=f"StoreConfig {field} must be seconds > 0"):
            StoreConfig(**{field: bad})
    for bad in ("60", None, True):
        with pytest.raises(TypeError, match=f"StoreConfig {field} must be a number of seconds"):
            StoreConfig(**{field: bad})
