"""Retrying transient object-store faults, and a reader that resumes where it broke.

Which faults are transient (retried): HTTP 5xx, 408 and 429; connection refused, reset or
dropped; timeouts; a body shorter than its ``Content-Length`` (``ShortBodyError``).
Which are permanent (raised at once, never retried): 404 -> ``FileNotFoundError``,
401/403 -> ``PermissionError``, an object replaced mid-read (``ObjectChangedError``), and
anything else that is not known to be transient.

Backoff is exponential (``initial_s``, doubling, capped at ``max_s``) and bounded twice:
by ``attempts`` and by ``total_s`` seconds since the first failure.  The retry loop is
``tenacity``'s; only the classification is ours.

:class:`ResumableReader` makes a streamed object read survive faults without repeating
or dropping a byte: it counts the bytes it has handed out and, after a fault, reopens the
object at that offset (an HTTP range read).  When a source cannot read from an offset
(for instance output of an AIS ETL), the store reopens at 0 and discards what was already
delivered (restart from the start) -- the reader's position is the same either way.

Two more ways a read ends, neither retried:

* **Too slow** (``min_rate``, ``--min-read-rate``): a source that trickles a byte now
  and then never trips the read timeout, and would hold its worker for ever.  Each span of
  ``window_s`` seconds (``--read-timeout``) spent inside reads must deliver ``min_rate``
  bytes per second on average; time the caller spends between reads (converting) does not
  count.  :class:`SlowReadError`, a ``fetch`` reject like any read that failed for good.
* **Interrupted** (:func:`interrupt_reads`): Ctrl-C in a process whose threads convert
  shards.  The main thread gets the KeyboardInterrupt, but the threads would go on
  reading their slow shards, and the job waits for them before it can end.  The threads'
  reads raise :class:`ReadInterrupted`.
"""

from __future__ import annotations

import dataclasses
import http.client
import io
import logging
import socket
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Optional, Tuple

import tenacity

from transforms.stores import traffic
from transforms.stores.errors import FetchError, ObjectChangedError

log = logging.getLogger("tar2tf.retry")

TRANSIENT_STATUS = frozenset({408, 429})
READ_PIECE = 256 << 10  # bytes asked of a stream at once: a fault loses at most this much work


class TransientError(IOError):
    """A fault worth retrying that no library raised for us."""


class ShortBodyError(TransientError):
    """The server ended a body before the length it announced."""


class SlowReadError(FetchError):
    """A read delivered less than the policy's ``min_rate`` over a whole window."""


class ReadInterrupted(KeyboardInterrupt):
    """The read was ended by :func:`interrupt_reads` (Ctrl-C).  A KeyboardInterrupt, not a
    :class:`FetchError`: the shard did not fail, the job was stopped, so its conversion
    must end without a piece (a ``fetch`` reject in a piece would be kept by ``--resume``)."""


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6
    initial_s: float = 0.2
    max_s: float = 5.0
    total_s: float = 60.0
    min_rate: int = 0  # bytes per second a streamed read must keep up (0: no minimum)
    window_s: float = 60.0  # ... over each span of this many seconds spent reading

    @classmethod
    def from_config(cls, config: Any) -> "RetryPolicy":
        """From a :class:`transforms.stores.StoreConfig` (its ``retry_*`` fields, its
        ``min_read_rate`` over windows of its ``read_timeout_s``)."""
        return cls(
            attempts=max(1, int(config.retry_attempts)),
            initial_s=float(config.retry_initial_s),
            max_s=float(config.retry_max_s),
            total_s=float(config.retry_total_s),
            min_rate=int(getattr(config, "min_read_rate", 0) or 0),
            window_s=float(config.read_timeout_s),
        )

    def retrying(self, what: str = "") -> tenacity.Retrying:
        def _log(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.warning(
                "transient fault (%s), attempt %d/%d: %s: %s",
                what or "request",
                state.attempt_number,
                self.attempts,
                type(exc).__name__,
                exc,
            )

        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.attempts)
            | tenacity.stop_after_delay(self.total_s),
            wait=tenacity.wait_exponential(
                multiplier=self.initial_s, min=self.initial_s, max=self.max_s
            ),
            retry=tenacity.retry_if_exception(is_transient),
            before_sleep=_log,
            reraise=True,
        )

    def call(self, fn: Callable[[], Any], what: str = "") -> Any:
        """``fn()``, retried on transient faults; the last error escapes when the budget is spent."""
        return self.retrying(what)(fn)


# -- classification ---------------------------------------------------------------------


def status_of(exc: BaseException) -> Optional[int]:
    """The HTTP status an exception carries (AIS SDK, requests, google-api-core), if any."""
    for attr in ("status_code", "code"):
        v = getattr(exc, attr, None)
        if isinstance(v, int) and 100 <= v < 600:
            return v
    resp = getattr(exc, "response", None)
    v = getattr(resp, "status_code", None) or getattr(resp, "status", None)
    if isinstance(v, int) and 100 <= v < 600:
        return v
    return None


def _transient_types() -> Tuple[type, ...]:
    types: list = [
        ConnectionError,
        TimeoutError,
        socket.timeout,
        http.client.IncompleteRead,
        http.client.RemoteDisconnected,
        TransientError,
    ]
    try:
        import requests.exceptions as rex

        types += [rex.ConnectionError, rex.ChunkedEncodingError, rex.Timeout]
    except ImportError:  # pragma: no cover - requests is a dependency
        pass
    try:
        import urllib3.exceptions as uex

        types += [uex.ProtocolError, uex.TimeoutError, uex.IncompleteRead, uex.NewConnectionError]
    except ImportError:  # pragma: no cover
        pass
    try:
        import google.auth.exceptions as gex

        types.append(gex.TransportError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(types)


_TRANSIENT = None


def is_transient(exc: BaseException) -> bool:
    """True for faults that may go away on retry (see the module docstring)."""
    global _TRANSIENT
    if _TRANSIENT is None:
        _TRANSIENT = _transient_types()
    seen = 0
    e: Optional[BaseException] = exc
    while e is not None and seen < 6:
        if isinstance(
            e,
            (
                FileNotFoundError,
                PermissionError,
                ObjectChangedError,
                SlowReadError,
                ReadInterrupted,
            ),
        ):
            return False
        status = status_of(e)
        if status is not None:
            return status in TRANSIENT_STATUS or status >= 500
        if isinstance(e, _TRANSIENT):
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False


def permanent_error(exc: BaseException, url: str) -> Optional[OSError]:
    """404 -> FileNotFoundError, 401/403 -> PermissionError (with ``url``), else None."""
    status = status_of(exc)
    if status == 404:
        return FileNotFoundError(f"{url}: not found (HTTP 404)")
    if status in (401, 403):
        return PermissionError(f"{url}: access denied (HTTP {status})")
    return None


# -- resumable reads --------------------------------------------------------------------

Opener = Callable[[int], Tuple[Any, int, int]]
"""``open_at(offset) -> (stream, end, total)``: a binary stream delivering bytes from
``offset`` up to ``end`` (exclusive), and the object's total size."""


_open_readers: "weakref.WeakSet[ResumableReader]" = weakref.WeakSet()
_readers_lock = threading.Lock()


def interrupt_reads() -> int:
    """End every streamed read open in this process now: each raises
    :class:`ReadInterrupted` at its next read (a read blocked on its socket is woken where
    the stream can be aborted: HTTP).  For Ctrl-C in a process whose threads read shards
    (the in-process driver): they end within about a second instead of at their shard's
    end.  Reads opened later are not affected.  The number of reads interrupted."""
    with _readers_lock:
        readers = list(_open_readers)
    for r in readers:
        r.interrupt()
    return len(readers)


def discard(stream, n: int, chunk: int = 1 << 20) -> None:
    """Read and drop ``n`` bytes (restart-from-start for sources without range reads)."""
    while n > 0:
        got = stream.read(min(chunk, n))
        if not got:
            raise ShortBodyError(f"stream ended {n} bytes before the resume offset")
        n -= len(got)


class ResumableReader(io.RawIOBase):
    """A seekable, read-only raw stream over ``open_at`` that retries and resumes.

    Each ``readinto`` that hits a transient fault (including a body that ends before the
    announced ``end``) closes the broken stream, backs off, and reopens at the current
    position; the bytes returned across reopenings are exactly the object's bytes once.
    """

    def __init__(self, open_at: Opener, policy: RetryPolicy, name: str, count: bool = True):
        super().__init__()
        self._open_at, self._policy, self.name = open_at, policy, name
        # traffic counts the bytes handed out, unless the store counts what it downloads
        self._scheme = traffic.scheme_of(name) if count else None
        self._stream = None
        self._pos = 0
        self._end: Optional[int] = None  # where the current stream should stop (None: its EOF)
        self._total: Optional[int] = None  # object size (None: not known, e.g. chunked ETL output)
        self._opened = False
        self.reopens = 0  # how many times a fault made it reopen (observable in tests)
        self._interrupted = False
        self._window = (0.0, 0)  # (seconds spent reading, bytes got) in the current window
        with _readers_lock:
            _open_readers.add(self)

    def interrupt(self) -> None:
        """End this read (:func:`interrupt_reads`); from any thread."""
        self._interrupted = True
        stream = self._stream
        abort = getattr(stream, "abort", None)
        if abort is not None:
            try:
                abort()  # wakes a read blocked on the socket
            except Exception:
                pass

    def _check_interrupted(self) -> None:
        if self._interrupted:
            raise ReadInterrupted(f"{self.name}: read interrupted at byte {self._pos}")

    # io plumbing
    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._pos
        elif whence == io.SEEK_END:
            offset += self.size()
        if offset < 0:
            raise ValueError("negative seek position")
        if offset != self._pos:
            self._drop()
            self._pos = offset
        return self._pos

    def open(self) -> None:
        """Make the first request now (retried), so a missing or refused object fails here."""
        if not self._opened:
            self._policy.call(self._ensure_open, f"open {self.name}")

    def size(self) -> int:
        self.open()
        if self._total is None:
            raise io.UnsupportedOperation(f"{self.name}: size not known")
        return self._total

    def close(self) -> None:
        self._drop()
        traffic.flush()
        with _readers_lock:
            _open_readers.discard(self)
        super().close()

    def _drop(self) -> None:
        if self._stream is not None:
            try:
                self._stream.close()
            except Exception:
                pass
            self._stream = None

    def _ensure_open(self) -> None:
        self._check_interrupted()
        if self._stream is None:
            self._stream, self._end, self._total = self._open_at(self._pos)
            self._opened = True

    def readinto(self, b) -> int:
        if self._total is not None and self._pos >= self._total:
            return 0
        view = memoryview(b).cast("B")
        if not len(view):
            return 0
        start = time.monotonic()
        try:
            n = self._policy.call(lambda: self._read_once(view), f"read {self.name}")
        except FetchError:
            raise
        except Exception as e:
            # OSErrors too (requests' and socket errors, a body cut short again and again, a
            # 403 mid-read): whatever the library, the store failed this read mid-object,
            # which the tar reader reports as a fetch reject, not as a damaged archive
            how = "retries spent" if is_transient(e) else "not retryable"
            raise FetchError(
                f"{self.name}: read failed at byte {self._pos} ({how}): {type(e).__name__}: {e}"
            ) from e
        if self._policy.min_rate:
            self._pace(n, time.monotonic() - start)
        return n

    def _pace(self, n: int, took: float) -> None:
        """Count a read of ``n`` bytes that took ``took`` seconds; a window of
        ``window_s`` seconds of reading below ``min_rate`` on average fails the read."""
        spent, got = self._window
        spent, got = spent + took, got + n
        if spent < self._policy.window_s:
            self._window = (spent, got)
            return
        self._window = (0.0, 0)
        if got < self._policy.min_rate * spent:
            self._drop()
            raise SlowReadError(
                f"{self.name}: read too slow at byte {self._pos}: {got} bytes in "
                f"{spent:.1f} s of reading, under the minimum of {self._policy.min_rate} "
                "bytes/s (--min-read-rate)"
            )

    def _read_once(self, view: memoryview) -> int:
        first = True
        while True:
            self._check_interrupted()
            try:
                self._ensure_open()
                if self._total is not None and self._pos >= self._total:
                    return 0
                want = min(len(view), READ_PIECE)
                if self._end is not None:
                    want = min(want, self._end - self._pos)
                data = self._stream.read(want)
            except BaseException as e:
                self._check_interrupted()  # a read woken by interrupt(): say so, no retry
                if is_transient(e):
                    self._drop()
                    self.reopens += 1
                raise
            if data:
                n = len(data)
                view[:n] = data
                self._pos += n
                if self._scheme is not None:
                    traffic.add(self._scheme, "read", n)
                return n
            # EOF of this stream (or one that interrupt() aborted)
            self._check_interrupted()
            self._drop()
            if self._end is not None and self._pos < self._end:
                self.reopens += 1
                raise ShortBodyError(
                    f"{self.name}: body ended at byte {self._pos}, expected {self._end}"
                )
            if self._total is None:  # a clean end of a body of unknown length: now it is known
                self._total = self._pos
                return 0
            if self._pos >= self._total:
                return 0
            if not first:  # a stream that delivers nothing twice in a row: give up cleanly
                raise ShortBodyError(f"{self.name}: no data at byte {self._pos} of {self._total}")
            first = False  # chunked source: the next chunk starts here


def open_resumable(
    open_at: Opener, policy: RetryPolicy, name: str, buffer_size: int = 1 << 20, count: bool = True
) -> io.BufferedReader:
    """A buffered, seekable binary file over :class:`ResumableReader`."""
    return io.BufferedReader(ResumableReader(open_at, policy, name, count), buffer_size=buffer_size)


def iter_pages(
    fetch_page: Callable[[Any], Tuple[Iterable[str], Any]], policy: RetryPolicy, what: str
):
    """Follow continuation tokens: ``fetch_page(token) -> (names, next_token)`` (token None
    first; a false next token ends); each page is retried on its own, so a fault never
    repeats or skips names."""
    token: Any = None
    while True:
        names, token = policy.call(lambda t=token: fetch_page(t), what)
        yield from names
        if not token:
            return
