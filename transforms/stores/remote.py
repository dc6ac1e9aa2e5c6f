"""What the AIS and GCS stores share: SDK errors mapped onto the Store contract, and every
SDK call run under the one retry policy (``transforms.stores.retry``).

404/401/403 become ``FileNotFoundError``/``PermissionError`` (final, never retried); transient
faults are retried by :class:`~transforms.stores.retry.RetryPolicy`; anything else escapes as is.
"""

from __future__ import annotations

import contextlib
from typing import Tuple

from transforms.stores.base import Store, split_url
from transforms.stores.retry import RetryPolicy, is_transient, open_resumable, permanent_error


class RemoteStore(Store):
    policy: RetryPolicy
    scheme: str  # "ais", "gs"
    # the store counts the bytes it downloads itself (transforms.stores.traffic): its
    # requests fetch whole chunks, more than a read that stops early hands out
    counts_reads = False

    @classmethod
    def _split(cls, url: str) -> Tuple[str, str]:
        """``scheme://bucket/name`` -> (bucket, name); a URL of another scheme is an error."""
        scheme, bucket, name = split_url(url)
        if scheme != cls.scheme or not bucket:
            raise ValueError(f"not an object URL of the form {cls.scheme}://bucket/name: {url}")
        return bucket, name

    @contextlib.contextmanager
    def _errors(self, url: str):
        """Map 404/401/403 to FileNotFoundError/PermissionError; leave the rest alone."""
        try:
            yield
        except (FileNotFoundError, PermissionError):
            raise
        except Exception as e:
            perm = None if is_transient(e) else permanent_error(e, url)
            if perm is not None:
                raise perm from e
            raise

    def _call(self, url: str, what: str, fn):
        """``fn()`` under the retry policy, its errors mapped as above."""

        def attempt():
            with self._errors(url):
                return fn()

        return self.policy.call(attempt, f"{what} {url}")

    def endpoint_name(self) -> str:
        """Where requests go (AIS: the proxy URL; GCS: the client's API endpoint, an
        emulator's when one is set), for error messages that must say which server failed."""
        return (
            getattr(self, "endpoint", None)
            or getattr(getattr(self, "client", None), "api_endpoint", None)
            or ""
        )

    def _open_resumable(self, url: str, open_at):
        """A resumable reader over ``open_at(offset)``, with its first request made now so
        that 404/403 surface here (as fetch rejects), not at the first read."""
        reader = open_resumable(open_at, self.policy, url, count=not self.counts_reads)
        try:
            reader.raw.open()
        except BaseException:
            reader.close()
            raise
        return reader
