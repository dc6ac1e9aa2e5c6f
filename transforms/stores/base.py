"""The store contract every backend implements: :class:`StoreConfig`, URL helpers and the
:class:`Store` base class (the contract itself is described in :mod:`transforms.stores`).

Backends (``store_ais``, ``store_gcs``) import this module, never ``transforms.stores``,
so that the registry in ``stores`` can import them lazily without an import cycle.
"""

from __future__ import annotations

import dataclasses
import os
from typing import BinaryIO, Iterator, Optional, Sequence, Tuple
from urllib.parse import urlsplit

from transforms.stores import http_headers

#: the longest a seconds setting of :class:`StoreConfig` may be (7 days): enough for any
#: retry or read wait, and far from where the clocks' arithmetic overflows (``inf``, or
#: about 9.2e9 s, made every read fail with "timestamp out of range")
MAX_SECONDS = 7 * 24 * 3600
_SECONDS = ("retry_initial_s", "retry_max_s", "retry_total_s", "read_timeout_s")


@dataclasses.dataclass(frozen=True)
class StoreConfig:
    """Picklable settings for building stores on any worker.

    ``ais_endpoint`` falls back to ``$AIS_ENDPOINT``.  The AIS auth token is read from
    ``$AIS_AUTHN_TOKEN`` on the worker and is never stored here (so it is never pickled
    into a job graph nor printed).  ``retry_*`` bound the retry of transient faults;
    ``list_page_size`` is the number of names per listing request (AIS, GCS, S3; 0: the
    server's maximum).  ``s3_endpoint`` falls back to boto3's own (``$AWS_ENDPOINT_URL``);
    S3 credentials and HTTP headers are read from the environment on the worker, never
    kept here (``transforms.stores.s3``, ``transforms.stores.http``).
    """

    ais_endpoint: Optional[str] = None
    gcs_project: Optional[str] = None
    retry_attempts: int = 6
    retry_initial_s: float = 0.2
    retry_max_s: float = 5.0
    retry_total_s: float = 60.0
    read_timeout_s: float = 60.0
    # bytes/s a streamed read must average over each read_timeout_s spent reading (0: any
    # rate); slower is a fetch reject (transforms.stores.retry, --min-read-rate)
    min_read_rate: int = 0
    ais_etl_name: Optional[str] = None
    list_page_size: int = 0
    s3_endpoint: Optional[str] = None
    # http(s):// request headers ((name, value) pairs) and whether they follow a redirect
    # to another origin (transforms.stores.http); the defaults come from
    # $TAR2TF_HTTP_HEADERS / $TAR2TF_HTTP_HEADER_CROSS_ORIGIN where the config is made.
    # Never in the repr: a header may be a credential
    http_headers: Tuple[Tuple[str, str], ...] = dataclasses.field(
        default_factory=lambda: _default_headers(), repr=False
    )
    http_cross_origin: bool = dataclasses.field(default_factory=lambda: _default_cross_origin())

    def __post_init__(self):
        for name in _SECONDS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"StoreConfig {name} must be a number of seconds, not {v!r}")
            if not 0 < v <= MAX_SECONDS:  # nan too
                raise ValueError(
                    f"StoreConfig {name} must be seconds > 0 and at most {MAX_SECONDS}, not {v!r}"
                )

    def resolved_ais_endpoint(self) -> str:
        ep = self.ais_endpoint or os.environ.get("AIS_ENDPOINT")
        if not ep:
            raise ValueError("no AIS endpoint: pass --ais-endpoint / proxy_url or set AIS_ENDPOINT")
        if "://" not in ep:  # "localhost:8080", as AIS's own CLI config often holds it
            ep = "http://" + ep
        return ep.rstrip("/")


def _default_headers() -> Tuple[Tuple[str, str], ...]:
    return http_headers.headers_with([])


def _default_cross_origin() -> bool:
    return http_headers.env_cross_origin()


def split_url(url: str) -> Tuple[str, str, str]:
    """``scheme://bucket/path`` -> (scheme, bucket, path); local paths give ('', '', path)."""
    if "://" not in url:
        return "", "", url
    parts = urlsplit(url)
    if parts.scheme == "file":
        return "", "", parts.path
    path = url.split("://", 1)[1]
    bucket, _, key = path.partition("/")
    return parts.scheme, bucket, key


def join(base: str, name: str) -> str:
    """Join a directory-ish URL and a relative name."""
    if not base:
        return name
    if "://" in base:
        return base.rstrip("/") + "/" + name.lstrip("/")
    return os.path.join(base, name)


def dirname(url: str) -> str:
    if "://" in url:
        head, _, _ = url.rstrip("/").rpartition("/")
        return head if "://" in head else url.rstrip("/")
    return os.path.dirname(url) or "."


def basename(url: str) -> str:
    return url.rstrip("/").rpartition("/")[2]


class Store:
    """Base class; see the module docstring for the contract."""

    def list(self, prefix: str) -> Iterator[str]:
        raise NotImplementedError

    def open_read(self, url: str) -> BinaryIO:
        raise NotImplementedError

    def open_write(self, url: str, durable: bool = True):
        raise NotImplementedError

    def exists(self, url: str) -> bool:
        raise NotImplementedError

    def delete(self, url: str) -> None:
        raise NotImplementedError

    def delete_many(self, urls: Sequence[str]) -> None:
        """Delete these objects (a missing one is no error).  One at a time here; a store
        with a multi-object delete sends it as one request (S3's DeleteObjects), and a
        caller with many runs several calls at once (``pipelines.job.inflight``)."""
        for url in urls:
            self.delete(url)

    def size(self, url: str) -> int:
        raise NotImplementedError

    def size_and_crc32c(self, url: str) -> Tuple[int, Optional[str]]:
        """The object's size and its CRC32C (8 hex digits) as the store keeps it, None when
        the store keeps none (then a caller that needs it reads the bytes); one metadata
        request where the store answers both at once."""
        return self.size(url), None

    def assemble(
        self, url: str, ranges: Sequence[Tuple[str, int, int]], crcs: Sequence[Optional[int]]
    ) -> Optional[str]:
        """Write the object ``url`` as the concatenation of ``ranges`` (``(source URL,
        offset, length)``, sources in this store) with the store copying the bytes itself
        where it can, atomically; return its CRC-32C (8 hex digits).  ``crcs[i]``: the
        CRC-32C of range ``i`` where the caller knows it, else None (the store reads the
        range to hash it, or takes the value it keeps).  None: this store does not copy
        these ranges itself (the caller copies them; ``transforms.stores.copy``)."""
        return None

    def read_bytes(self, url: str) -> bytes:
        with self.open_read(url) as f:
            return f.read()

    def write_bytes(self, url: str, data: bytes) -> None:
        with self.open_write(url) as f:
            f.write(data)
