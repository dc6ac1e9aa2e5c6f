"""AIStore buckets (``ais://bucket/object``) through the ``aistore`` Python SDK (2.x).

* Endpoint: ``StoreConfig.ais_endpoint`` (``--ais-endpoint`` / ``proxy_url``), else
  ``$AIS_ENDPOINT``.  An auth token is taken from ``$AIS_AUTHN_TOKEN`` on each worker and
  handed to the SDK only; it is never logged, printed or pickled.
* Every request goes to the proxy.  Object GETs and PUTs are answered with a redirect to
  the target that owns the object (AIS 5.0: 301 for GET, 307 for PUT), which the SDK
  (``requests``) follows; tar2tf never looks up or calls intra-cluster target URLs itself.
* Listing: ``list-objects`` pages, each page followed with the ``uuid`` and
  ``continuation_token`` the proxy returned (``StoreConfig.list_page_size`` names per page,
  default the server's maximum).  Two AIS 5.0 listing quirks are documented in
  docs/object-stores.md; the one about virtual directories is worked around here.
* Reads stream (``stream=True``) and resume after faults with a range read from the last
  byte handed out (``Range: bytes=N-``, see :mod:`transforms.stores.retry`).  Each response's
  object identity (``Ais-Version``, ``Ais-Checksum-Type``/``-Value``, ``ETag`` if sent,
  and the size) must equal the first response's: an object replaced between a broken GET
  and its resume fails the read (``ObjectChangedError``) instead of splicing old[:N] and
  new[N:].  (AIS 5.0 ignores ``If-Match`` -- a range GET with a wrong one still answers
  206 -- so the headers are compared here; it also sends no ``ETag``.)  With an ETL name
  (``StoreConfig.ais_etl_name``), objects are read through that existing ETL
  (``?etl_name=``); its output cannot be read from an offset, so a fault restarts the read
  from the start and skips the bytes already delivered.  The ETL path is untested here
  (AIS ETL needs Kubernetes).
* Writes: spool locally, then one PUT of the whole object (:mod:`transforms.stores.upload`).  AIS
  receives a PUT into a work file and renames it into place only when the body is
  complete, so readers never see a partial object.
* Checksums: a bucket whose ``checksum.type`` is ``crc32c`` reports each object's CRC32C
  on a HEAD (:meth:`AISStore.size_and_crc32c`), which lets ``--resume`` check finished shards
  without reading them back.

The SDK's own retries are switched off (one attempt, no status retries) so that
``transforms.stores.retry`` alone decides what is retried and for how long.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Iterator, Optional, Tuple

from transforms.stores.base import StoreConfig
from transforms.stores.remote import RemoteStore
from transforms.stores.retry import ObjectChangedError, RetryPolicy, discard, iter_pages
from transforms.stores.upload import spooled_upload

log = logging.getLogger("tar2tf.ais")
TOKEN_ENV = "AIS_AUTHN_TOKEN"
# what names one version of an object in a GET response (aisnode v1.5.0 sends the Ais-*
# ones on 200 and 206 alike; Ais-Atime changes with every read, so it is not among them)
IDENTITY_HEADERS = ("Ais-Version", "Ais-Checksum-Type", "Ais-Checksum-Value", "ETag")


def _sdk_retry_off():
    """An SDK ``RetryConfig`` that tries once: our policy does the retrying."""
    import tenacity
    from aistore.sdk.retry_config import RetryConfig
    from urllib3.util.retry import Retry

    return RetryConfig(
        http_retry=Retry(
            total=0, connect=0, read=0, status=0, status_forcelist=[], raise_on_status=False
        ),
        network_retry=tenacity.Retrying(stop=tenacity.stop_after_attempt(1), reraise=True),
    )


class AISStore(RemoteStore):
    scheme = "ais"

    def __init__(self, config: StoreConfig):
        from aistore.sdk import Client

        self.config = config
        self.endpoint = config.resolved_ais_endpoint()
        self.policy = RetryPolicy.from_config(config)
        self.client = Client(
            self.endpoint,
            timeout=(min(10.0, config.read_timeout_s), config.read_timeout_s),
            retry_config=_sdk_retry_off(),
            token=os.environ.get(TOKEN_ENV) or None,
        )

    def __repr__(self) -> str:  # never shows the token
        return f"AISStore({self.endpoint!r})"

    # -- helpers ------------------------------------------------------------------------

    def _object(self, url: str):
        bucket, name = self._split(url)
        if not name:
            raise ValueError(f"no object name in {url}")
        return self.client.bucket(bucket).object(name)

    # -- Store --------------------------------------------------------------------------

    def list(self, prefix: str) -> Iterator[str]:
        bucket, key_prefix = self._split(prefix)
        names = self._list(bucket, key_prefix)
        if key_prefix and not key_prefix.endswith("/"):
            # AIS lists a prefix that names an existing directory ("p", with "p/x" stored)
            # as that directory only, leaving out siblings such as "p-1" or "pq".  When the
            # answer shows such a directory, list its parent and filter here instead.
            names = list(names)
            dir_prefix = f"ais://{bucket}/{key_prefix}/"
            if any(n.startswith(dir_prefix) for n in names):
                parent = key_prefix.rpartition("/")[0]
                names = [
                    n
                    for n in self._list(bucket, parent + "/" if parent else "")
                    if n.startswith(prefix)
                ]
        yield from names

    def _list(self, bucket: str, key_prefix: str) -> Iterator[str]:
        bck = self.client.bucket(bucket)
        page_size = int(getattr(self.config, "list_page_size", 0) or 0)

        def page(state):
            uuid, token = state or ("", "")
            with self._errors(f"ais://{bucket}"):
                res = bck.list_objects(
                    prefix=key_prefix,
                    props="name",
                    page_size=page_size,
                    uuid=uuid,
                    continuation_token=token,
                )
            names = [f"ais://{bucket}/{e.name}" for e in res.entries]
            return names, ((res.uuid, res.continuation_token) if res.continuation_token else None)

        try:
            yield from iter_pages(page, self.policy, f"list ais://{bucket}/{key_prefix}")
        except FileNotFoundError:
            log.warning(
                "AIS bucket ais://%s does not exist (listing ais://%s/%s): nothing listed",
                bucket,
                bucket,
                key_prefix,
            )

    def _open_at(
        self, url: str, offset: int, pin: Optional["_Pin"] = None
    ) -> Tuple[Any, Optional[int], Optional[int]]:
        obj = self._object(url)
        etl = self.config.ais_etl_name
        try:
            with self._errors(url):
                if etl:
                    from aistore.sdk.etl import ETLConfig

                    raw = obj.get_reader(etl=ETLConfig(name=etl)).raw()
                    status = 200
                elif offset:
                    raw = obj.get_reader(byte_range=f"bytes={offset}-").raw()
                    status = raw.status
                else:
                    raw = obj.get_reader().raw()
                    status = raw.status
        except FileNotFoundError:
            if pin is None or pin.first is None:
                raise
            # a resumed request: the object this read started on was deleted since
            raise ObjectChangedError(
                url, f"at byte {offset}: the object is gone (HTTP 404)"
            ) from None
        headers = raw.headers
        total = _int(headers.get("Content-Length"))
        if status == 206:
            crange = headers.get("Content-Range", "")
            total = _int(crange.rpartition("/")[2])
        if pin is not None and not etl:
            try:
                pin.check(headers, total, offset)
            except ObjectChangedError:
                raw.close()
                raise
        if status != 206 and offset:
            # whole body (ETL output, or a server that ignored Range): restart from the start
            discard(raw, offset)
        return raw, total, total

    def open_read(self, url: str):
        pin = _Pin(url)  # one per reader: every reopen of this read must see the same version
        return self._open_resumable(url, lambda off: self._open_at(url, off, pin))

    def open_write(self, url: str, durable: bool = True):
        obj = self._object(url)

        def upload(path, size):
            with self._errors(url):
                obj.get_writer().put_file(path)

        return spooled_upload(url, upload, self.policy)

    def exists(self, url: str) -> bool:
        try:
            self.size(url)
            return True
        except FileNotFoundError:
            return False

    def delete(self, url: str) -> None:
        try:
            self._call(url, "delete", lambda: self._object(url).delete())
        except FileNotFoundError:
            pass

    def size(self, url: str) -> int:
        return int(self._call(url, "head", lambda: self._object(url).head().size))

    def size_and_crc32c(self, url: str) -> Tuple[int, Optional[str]]:
        """AIS keeps each object's checksum of the type its bucket is configured for
        (``checksum.type``; xxhash unless set): a bucket set to ``crc32c`` answers with the
        same 8 hex digits tar2tf computes, so no download is needed; any other type, None."""
        attrs = self._call(url, "head", lambda: self._object(url).head(props="size,checksum"))
        kind, value = (attrs.checksum_type or "").lower(), (attrs.checksum_value or "").lower()
        return int(attrs.size), (value if kind == "crc32c" and len(value) == 8 else None)


class _Pin:
    """The version a read started on, from its first response's identity headers.

    The GCS store pins a generation number in each request; AIS has no such request
    parameter (and ignores ``If-Match``), so every later response of the same read is
    compared with the first and a difference fails the read.  ETL output is not pinned:
    its headers describe the transform's output, which the tests cannot produce."""

    def __init__(self, url: str):
        self.url = url
        self.first: Optional[Tuple[Any, ...]] = None

    def check(self, headers, total: Optional[int], offset: int) -> None:
        got = tuple(headers.get(h) for h in IDENTITY_HEADERS) + (total,)
        if self.first is None:
            self.first = got
            return
        if got != self.first:
            names = IDENTITY_HEADERS + ("size",)
            diff = ", ".join(f"{n} {a} -> {b}" for n, a, b in zip(names, self.first, got) if a != b)
            raise ObjectChangedError(self.url, f"at byte {offset}: {diff}")


def _int(v) -> Optional[int]:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
