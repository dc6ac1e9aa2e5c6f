"""S3 buckets and S3-compatible servers (``s3://bucket/key``) through ``boto3``.

* Endpoint: ``StoreConfig.s3_endpoint`` (``--s3-endpoint``), else ``$AWS_ENDPOINT_URL_S3`` /
  ``$AWS_ENDPOINT_URL`` (boto3's own rule), else AWS.  A custom endpoint is addressed
  path-style (``http://host:port/bucket/key``), which S3-compatible servers expect.
* Credentials and region: boto3's usual chain (``$AWS_ACCESS_KEY_ID`` /
  ``$AWS_SECRET_ACCESS_KEY`` / ``$AWS_SESSION_TOKEN``, ``$AWS_PROFILE`` and
  ``~/.aws/credentials``, instance roles), read on each worker and handed to boto3 only:
  never kept in :class:`StoreConfig`, so never pickled into a job graph, written into an
  artifact or printed.  Without any region configured ``us-east-1`` is used.
* Listing: ``ListObjectsV2`` pages (``StoreConfig.list_page_size`` keys per request, default
  1000), each page retried on its own and followed by its continuation token.
* Reads stream one GET of the whole object and resume after a fault with a range GET from
  the last byte handed out (``Range: bytes=N-``), pinned to the first answer's ``ETag``
  with ``If-Match``: an object replaced mid-read fails (``ObjectChangedError``, HTTP 412)
  instead of splicing two versions.
* Writes: spool locally, then on success one ``PutObject`` (below ``MULTIPART_AT``) or a
  multipart upload whose parts are retried one by one and which is completed only after
  every part is in -- S3 shows an object only then.  A failed multipart upload is aborted,
  so no parts are left behind (and billed).
* Final shards assembled from pieces (:meth:`S3Store.assemble`): a multipart upload whose
  parts are ``UploadPartCopy`` requests with a ``CopySourceRange``, so the server copies
  piece bytes without tar2tf downloading and uploading them.  Parts but the last must be
  >= 5 MiB: ranges smaller than that are downloaded and sent as ordinary parts
  (``transforms.stores.copy.plan_parts``).  A copied range whose CRC-32C the caller does
  not know (a part of a piece) is downloaded once to hash it, never uploaded.

botocore's own retries are switched off (one attempt) so that ``transforms.stores.retry`` alone
decides what is retried and for how long.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from transforms.stores import copy as store_copy
from transforms.stores import traffic
from transforms.stores.base import StoreConfig, split_url
from transforms.stores.remote import RemoteStore
from transforms.stores.retry import ObjectChangedError, RetryPolicy, ShortBodyError, iter_pages
from transforms.stores.upload import spooled_upload

log = logging.getLogger("tar2tf.s3")
MULTIPART_AT = 64 << 20  # objects from this size go up in parts
PART_SIZE = 16 << 20  # S3 wants parts of >= 5 MiB (but the last) and <= 10000 parts
POOL_CONNECTIONS = 64  # a step of pipelines.job.inflight keeps as many requests in flight
MAX_PARTS = 10_000
MIN_PART = 5 << 20  # S3's smallest part but the last
MAX_COPY_PART = 5 << 30  # S3's largest part (and UploadPartCopy range)


def _status(exc: BaseException) -> Optional[int]:
    resp = getattr(exc, "response", None)
    if isinstance(resp, dict):
        v = resp.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(v, int):
            return v
    return None


class S3StatusError(IOError):
    """A botocore ``ClientError`` with its HTTP status where the retry policy looks for it
    (``status_code``): 408/429/5xx are retried, 404/401/403 mapped, the rest final."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status_code = status


class S3Store(RemoteStore):
    scheme = "s3"

    def __init__(self, config: StoreConfig):
        self.config = config
        self.policy = RetryPolicy.from_config(config)
        self.endpoint = (
            getattr(config, "s3_endpoint", None)
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
            or None
        )
        self.part_size = PART_SIZE
        self.multipart_at = MULTIPART_AT
        self._client = None
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:  # never shows a credential
        return f"S3Store({self.endpoint!r})"

    def endpoint_name(self) -> str:
        return self.endpoint or "AWS S3"

    @property
    def client(self):
        """One boto3 client for every thread of the process: boto3 clients are thread-safe
        (their sessions are not: the one session is used once, under a lock).  A client
        costs about 0.1 s of CPU to build, so one per thread made a step that keeps 64
        requests in flight (``pipelines.job.inflight``) spend seconds building them; its
        connection pool holds as many connections as such a step keeps in flight."""
        c = self._client
        if c is None:
            with self._client_lock:
                c = self._client
                if c is None:
                    c = self._client = self._new_client()
        return c

    def _new_client(self):
        import boto3
        from botocore.config import Config

        t = self.config.read_timeout_s
        cfg = Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=min(10.0, t),
            read_timeout=t,
            s3={"addressing_style": "path"} if self.endpoint else None,
            max_pool_connections=POOL_CONNECTIONS,
        )
        session = boto3.session.Session()
        region = session.region_name or "us-east-1"
        return session.client("s3", endpoint_url=self.endpoint, region_name=region, config=cfg)

    def _key(self, url: str) -> Tuple[str, str]:
        bucket, key = self._split(url)
        if not key:
            raise ValueError(f"no object name in {url}")
        return bucket, key

    def _errors(self, url: str):
        return _S3Errors(self, url)

    # -- Store --------------------------------------------------------------------------

    def list(self, prefix: str) -> Iterator[str]:
        bucket, key_prefix = self._split(prefix)
        page_size = int(getattr(self.config, "list_page_size", 0) or 1000)

        def page(token):
            kw = {"Bucket": bucket, "Prefix": key_prefix, "MaxKeys": page_size}
            if token:
                kw["ContinuationToken"] = token
            with self._errors(f"s3://{bucket}"):
                res = self.client.list_objects_v2(**kw)
            names = [f"s3://{bucket}/{o['Key']}" for o in res.get("Contents", [])]
            return names, (res.get("NextContinuationToken") if res.get("IsTruncated") else None)

        try:
            yield from iter_pages(page, self.policy, f"list s3://{bucket}/{key_prefix}")
        except FileNotFoundError:
            log.warning(
                "S3 bucket s3://%s does not exist (listing %s): nothing listed", bucket, prefix
            )

    def open_read(self, url: str):
        bucket, key = self._key(url)
        pin = {}

        def open_at(offset: int):
            kw = {"Bucket": bucket, "Key": key}
            if offset:
                kw["Range"] = f"bytes={offset}-"
            if pin.get(
                "etag"
            ):  # some S3-compatible servers send no ETag: then the size is the check
                kw["IfMatch"] = pin["etag"]
            try:
                with self._errors(url):
                    res = self.client.get_object(**kw)
            except FileNotFoundError:
                if "etag" not in pin:
                    raise
                raise ObjectChangedError(
                    url, f"at byte {offset}: the object is gone (HTTP 404)"
                ) from None
            except S3StatusError as e:
                if e.status_code == 412:
                    raise ObjectChangedError(
                        url,
                        f"at byte {offset}: ETag {pin.get('etag')} no longer matches (HTTP 412)",
                    ) from None
                raise
            body = res["Body"]
            length = int(res.get("ContentLength") or 0)
            total = offset + length
            crange = res.get("ContentRange") or ""
            if crange and "/" in crange and crange.rpartition("/")[2].isdigit():
                total = int(crange.rpartition("/")[2])
            if "etag" not in pin:
                pin["etag"], pin["size"] = res.get("ETag"), total
            elif pin["size"] != total:
                body.close()
                raise ObjectChangedError(url, f"at byte {offset}: size {pin['size']} -> {total}")
            return _Body(body), offset + length, total

        return self._open_resumable(url, open_at)

    def open_write(self, url: str, durable: bool = True):
        bucket, key = self._key(url)

        def upload(path: str, size: int) -> None:
            if size < self.multipart_at:
                with open(path, "rb") as f:
                    data = f.read()
                with self._errors(url):
                    self.client.put_object(Bucket=bucket, Key=key, Body=data)
            else:
                self._multipart(url, bucket, key, path, size)

        # parts are retried one by one inside; the small PUT by the spool's own policy
        return spooled_upload(url, upload, self.policy)

    def _multipart(self, url: str, bucket: str, key: str, path: str, size: int) -> None:
        part = max(self.part_size, -(-size // MAX_PARTS))
        upload_id = self._start_upload(url, bucket, key)
        try:
            parts = []
            with open(path, "rb") as f:
                number = 1
                for start in range(0, size, part):
                    f.seek(start)
                    data = f.read(part)
                    n = number
                    etag = self._upload_part(url, bucket, key, upload_id, n, data)
                    parts.append({"PartNumber": n, "ETag": etag})
                    number += 1
            self._complete_upload(url, bucket, key, upload_id, parts)
        except BaseException:
            self._abort(url, bucket, key, upload_id)
            raise

    def assemble(
        self, url: str, ranges: Sequence[Tuple[str, int, int]], crcs: Sequence[Optional[int]]
    ) -> Optional[str]:
        """The object ``url`` as the concatenation of ``ranges`` of other objects of this
        store, with server-side part copies where the part-size rules allow; its CRC-32C.
        None (the caller copies) when no part could be copied by the server."""
        from transforms.tfrecord import digests

        if not store_copy.enabled() or any(split_url(r[0])[0] != "s3" for r in ranges):
            return None
        parts = store_copy.plan_parts(ranges, MIN_PART, MAX_COPY_PART)
        copied = sum(p.length for p in parts if p.copy)
        if copied < MIN_PART or len(parts) > MAX_PARTS:
            return None  # a small shard: one PUT costs less than a multipart upload
        known = {tuple(r): c for r, c in zip(ranges, crcs) if c is not None}
        seen: dict = {}  # ranges downloaded for an uploaded part -> their CRC-32C
        bucket, key = self._key(url)
        upload_id = self._start_upload(url, bucket, key)
        try:
            done: List[dict] = []
            crc = 0
            for n, part in enumerate(parts, 1):
                if part.copy:
                    src, off, length = part.copy
                    src_bucket, src_key = self._key(src)
                    etag = self._call(
                        url,
                        f"copy part {n}",
                        lambda n=n, sb=src_bucket, sk=src_key, off=off, length=length: (
                            self.client.upload_part_copy(
                                Bucket=bucket,
                                Key=key,
                                UploadId=upload_id,
                                PartNumber=n,
                                CopySource={"Bucket": sb, "Key": sk},
                                CopySourceRange=f"bytes={off}-{off + length - 1}",
                            )["CopyPartResult"]["ETag"]
                        ),
                    )
                    traffic.add("s3", "copy", length)
                    part_crc = known.get(part.copy)
                    if part_crc is None:
                        part_crc = _suffix_crc(part.copy, known, seen)
                    if part_crc is None:
                        part_crc = digests.crc32c_of(self._hash_range(src, off, length))
                else:
                    chunks, part_crc = [], 0
                    for r in part.ranges:
                        chunks.append(self._read_range(*r))
                        seen[r] = digests.crc32c_of(_crc(chunks[-1]))
                        part_crc = digests.crc32c_combine(part_crc, seen[r], r[2])
                    data = b"".join(chunks)
                    length = len(data)
                    etag = self._upload_part(url, bucket, key, upload_id, n, data)
                    traffic.add("s3", "write", length)
                done.append({"PartNumber": n, "ETag": etag})
                crc = digests.crc32c_combine(crc, part_crc, length)
            self._complete_upload(url, bucket, key, upload_id, done)
        except BaseException:
            self._abort(url, bucket, key, upload_id)
            raise
        finally:
            traffic.flush()
        return f"{crc:08x}"

    def _get_range(self, url: str, offset: int, length: int, sink) -> None:
        """Hand ``length`` bytes at ``offset`` of ``url`` to ``sink``, with one GET of
        exactly that range (an open-ended read would have the server send the rest of the
        piece); a fault resumes from the last byte handed over."""
        bucket, key = self._key(url)
        end = offset + length
        pos = [offset]

        def attempt() -> None:
            with self._errors(url):
                res = self.client.get_object(
                    Bucket=bucket, Key=key, Range=f"bytes={pos[0]}-{end - 1}"
                )
            body = _Body(res["Body"])
            try:
                while pos[0] < end:
                    chunk = body.read(min(1 << 20, end - pos[0]))
                    if not chunk:
                        raise ShortBodyError(f"{url}: body ended at byte {pos[0]} of {end}")
                    sink(chunk)
                    traffic.add("s3", "read", len(chunk))
                    pos[0] += len(chunk)
            finally:
                body.close()

        if length:
            self.policy.call(attempt, f"read {url}")

    def _read_range(self, url: str, offset: int, length: int) -> bytes:
        chunks: List[bytes] = []
        self._get_range(url, offset, length, chunks.append)
        return b"".join(chunks)

    def _hash_range(self, url: str, offset: int, length: int):
        """A running CRC-32C of ``length`` bytes at ``offset`` of ``url`` (downloaded)."""
        digest = _crc(b"")
        self._get_range(url, offset, length, digest.update)
        return digest

    def _start_upload(self, url: str, bucket: str, key: str) -> str:
        return self._call(
            url,
            "start upload",
            lambda: self.client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"],
        )

    def _upload_part(self, url: str, bucket: str, key: str, upload_id: str, n: int, data) -> str:
        """Part ``n`` of a multipart upload sent from ``data``; its ETag (retried alone)."""
        return self._call(
            url,
            f"upload part {n}",
            lambda: self.client.upload_part(
                Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=data
            )["ETag"],
        )

    def _complete_upload(self, url: str, bucket: str, key: str, upload_id: str, parts) -> None:
        self._call(
            url,
            "complete upload",
            lambda: self.client.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            ),
        )

    def _abort(self, url: str, bucket: str, key: str, upload_id: str) -> None:
        try:
            self._call(
                url,
                "abort upload",
                lambda: self.client.abort_multipart_upload(
                    Bucket=bucket, Key=key, UploadId=upload_id
                ),
            )
        except Exception as e:
            log.warning("could not abort the multipart upload of %s: %s", url, e)

    def _head(self, url: str):
        bucket, key = self._key(url)
        return self._call(url, "head", lambda: self.client.head_object(Bucket=bucket, Key=key))

    def exists(self, url: str) -> bool:
        try:
            self._head(url)
            return True
        except FileNotFoundError:
            return False

    def delete(self, url: str) -> None:
        bucket, key = self._key(url)
        try:
            self._call(url, "delete", lambda: self.client.delete_object(Bucket=bucket, Key=key))
        except FileNotFoundError:
            pass

    def delete_many(self, urls: Sequence[str]) -> None:
        # DeleteObjects: up to 1,000 keys of one bucket a request; a missing key is no error
        by_bucket: Dict[str, List[str]] = {}
        for url in urls:
            bucket, key = self._key(url)
            by_bucket.setdefault(bucket, []).append(key)
        for bucket, keys in by_bucket.items():
            for i in range(0, len(keys), 1000):
                batch = {"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True}
                got = self._call(
                    f"s3://{bucket}/",
                    "delete",
                    lambda b=bucket, d=batch: self.client.delete_objects(Bucket=b, Delete=d),
                )
                failed = got.get("Errors") or []
                if failed:
                    e = failed[0]
                    raise OSError(
                        f"could not delete s3://{bucket}/{e.get('Key')}: {e.get('Code')} "
                        f"{e.get('Message')} ({len(failed)} keys not deleted)"
                    )

    def size(self, url: str) -> int:
        return int(self._head(url)["ContentLength"])


def _suffix_crc(rng, known: dict, seen: dict) -> Optional[int]:
    """The CRC-32C of ``rng`` when it is the rest of a range whose CRC-32C is known after
    a head that was downloaded (a small part before it took that head): crc(whole) =
    combine(crc(head), crc(rest)), and combine is linear, so crc(rest) = crc(whole) xor
    combine(crc(head), 0, len(rest)).  None otherwise (the range is read to hash it)."""
    from transforms.tfrecord import digests

    url, off, n = rng
    for (u, o0, n0), c in known.items():
        head = (u, o0, off - o0)
        if u == url and o0 < off and o0 + n0 == off + n and head in seen:
            return c ^ digests.crc32c_combine(seen[head], 0, n)
    return None


def _crc(data: bytes):
    from transforms.tfrecord import digests

    d = digests.new("crc32c")
    d.update(data)
    return d


def _redirect_hint(url: str, status: int, code: str) -> str:
    """What to do about a redirect, which S3 clients do not follow.  AIStore's S3 API
    redirects every object request from its proxy to the target holding the object unless
    the cluster reverse-proxies them (docs/object-stores.md); AWS answers 301 for a bucket
    asked for in another region (``PermanentRedirect``)."""
    said = f"{url}: redirected (HTTP {status}{', ' + code if code else ''}), which S3 clients do not follow"
    if code == "PermanentRedirect":
        return f"{said}: the bucket is in another region; set AWS_DEFAULT_REGION to it"
    return (
        f"{said}: on AIStore's S3 API turn on the cluster feature S3-Reverse-Proxy "
        "(ais config cluster features S3-Reverse-Proxy), or read ais:// directly"
    )


class _S3Errors:
    """botocore errors -> the Store contract: 404 (``NoSuchKey``, ``NoSuchBucket``, a HEAD's
    bare 404) -> FileNotFoundError, 401/403 -> PermissionError, other statuses ->
    :class:`S3StatusError` (the retry policy decides by its status); connection errors pass
    unchanged (botocore's are transient to the policy through their urllib3 cause)."""

    def __init__(self, store: S3Store, url: str):
        self.store, self.url = store, url

    def __enter__(self):
        return self

    def __exit__(self, et, e, tb):
        if e is None or isinstance(e, (FileNotFoundError, PermissionError, ObjectChangedError)):
            return False
        from botocore.exceptions import (
            ClientError,
            ConnectionClosedError,
            EndpointConnectionError,
            ReadTimeoutError,
            ResponseStreamingError,
        )

        if isinstance(e, ClientError):
            status = _status(e) or 0
            code = e.response.get("Error", {}).get("Code", "")
            if status == 404 or code in ("NoSuchKey", "NoSuchBucket", "NotFound"):
                raise FileNotFoundError(
                    f"{self.url}: not found (HTTP 404{', ' + code if code else ''})"
                ) from e
            if status in (401, 403):
                raise PermissionError(f"{self.url}: access denied (HTTP {status}, {code})") from e
            if status in (301, 302, 303, 307, 308):
                raise S3StatusError(_redirect_hint(self.url, status, code), status) from e
            raise S3StatusError(f"{self.url}: {code or 'error'} (HTTP {status})", status) from e
        if isinstance(
            e,
            (
                ConnectionClosedError,
                EndpointConnectionError,
                ReadTimeoutError,
                ResponseStreamingError,
            ),
        ):
            raise ConnectionError(f"{self.url}: {type(e).__name__}: {e}") from e
        return False


class _Body:
    """A GetObject body read raw; botocore's own errors mid-body become ConnectionError (a
    transient fault the resumable reader recovers from)."""

    def __init__(self, body):
        self.body = body

    def read(self, n: int = -1) -> bytes:
        from botocore.exceptions import (
            ConnectionClosedError,
            IncompleteReadError,
            ReadTimeoutError,
            ResponseStreamingError,
        )

        try:
            return self.body.read(None if n is None or n < 0 else n)
        except (
            ConnectionClosedError,
            IncompleteReadError,
            ReadTimeoutError,
            ResponseStreamingError,
        ) as e:
            raise ConnectionError(f"{type(e).__name__}: {e}") from e

    def close(self) -> None:
        self.body.close()
