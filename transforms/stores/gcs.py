"""Google Cloud Storage buckets (``gs://bucket/object``) through ``google-cloud-storage``.

* Credentials: application default credentials (``gcloud auth application-default login``,
  a service account, or the metadata server), project from ``StoreConfig.gcs_project`` or
  ADC.  With ``$STORAGE_EMULATOR_HOST`` set, the client talks to that emulator anonymously
  (the library's own rule).
* Listing: the library's page iterator, one page (``StoreConfig.list_page_size`` names)
  per request, each page retried on its own and followed by its ``nextPageToken``.
* Reads stream as ranged downloads of ``read_chunk`` bytes (8 MiB) of one pinned object
  generation, so a shard is never held whole in memory and an object replaced mid-read
  fails (``ObjectChangedError``: the generation is gone) instead of mixing two versions.
  A fault retries the chunk from the last byte handed out (:mod:`transforms.stores.retry`).
* Writes: spool locally, then one upload of the whole object (multipart below 8 MiB,
  resumable above; :mod:`transforms.stores.upload`).  GCS makes an object visible only when its
  upload is finalized, so readers never see a partial object; a failed upload is started
  again from its first byte.
* Final shards assembled from pieces (:meth:`GCSStore.assemble`): ``compose`` of whole
  objects, up to 32 per request (a second level above that), so a range that is a whole
  piece is never downloaded nor uploaded.  A range that is part of a piece is downloaded
  and uploaded as a temporary object first (deleted after).  The composite's CRC-32C,
  which GCS computes, must equal the one combined from the ranges' (sidecars', stored or
  hashed): a difference fails the shard.

The library's own retries are switched off (``retry=None``) so that ``transforms.stores.retry``
alone decides what is retried and for how long.
"""

from __future__ import annotations

import base64
import io
import logging
import uuid
from typing import Iterator, List, Optional, Sequence, Tuple

from transforms.stores import copy as store_copy
from transforms.stores import traffic
from transforms.stores.base import StoreConfig
from transforms.stores.remote import RemoteStore
from transforms.stores.retry import ObjectChangedError, RetryPolicy, iter_pages
from transforms.stores.upload import spooled_upload

log = logging.getLogger("tar2tf.gcs")
READ_CHUNK = 8 << 20
COMPOSE_MAX = 32  # source objects per compose request


class GCSStore(RemoteStore):
    scheme = "gs"
    counts_reads = True

    def __init__(self, config: StoreConfig):
        from google.cloud import storage

        self.config = config
        self.policy = RetryPolicy.from_config(config)
        self.timeout = config.read_timeout_s
        self.client = storage.Client(project=config.gcs_project)
        self.read_chunk = READ_CHUNK
        self.upload_chunk = None  # None: the library's default (resumable uploads above 8 MiB)

    def __repr__(self) -> str:
        return "GCSStore()"

    def _blob(self, url: str, **kw):
        bucket, name = self._split(url)
        if not name:
            raise ValueError(f"no object name in {url}")
        return self.client.bucket(bucket).blob(name, **kw)

    # -- Store --------------------------------------------------------------------------

    def list(self, prefix: str) -> Iterator[str]:
        bucket, key_prefix = self._split(prefix)
        page_size = int(getattr(self.config, "list_page_size", 0) or 1000)

        def page(token):
            with self._errors(f"gs://{bucket}"):
                it = self.client.list_blobs(
                    bucket,
                    prefix=key_prefix or None,
                    page_size=page_size,
                    page_token=token,
                    fields="items(name),nextPageToken",
                    retry=None,
                    timeout=self.timeout,
                )
                first = next(it.pages, None)
                names = [f"gs://{bucket}/{b.name}" for b in first] if first is not None else []
            return names, it.next_page_token

        try:
            yield from iter_pages(page, self.policy, f"list gs://{bucket}/{key_prefix}")
        except FileNotFoundError:
            log.warning(
                "GCS bucket gs://%s does not exist (listing %s): nothing listed", bucket, prefix
            )

    def _stat(self, url: str):
        bucket, name = self._split(url)
        blob = self._call(
            url,
            "stat",
            lambda: self.client.bucket(bucket).get_blob(name, retry=None, timeout=self.timeout),
        )
        if blob is None:
            raise FileNotFoundError(f"{url}: not found (HTTP 404)")
        return blob

    def open_read(self, url: str):
        meta = self._stat(url)
        size, generation = int(meta.size or 0), meta.generation
        pinned = self._blob(url, generation=generation)
        chunk = max(1, int(self.read_chunk))

        def open_at(offset: int):
            if offset >= size:
                return io.BytesIO(b""), size, size
            end = min(size, offset + chunk)
            try:
                with self._errors(url):
                    data = pinned.download_as_bytes(
                        start=offset,
                        end=end - 1,
                        raw_download=True,
                        checksum=None,
                        retry=None,
                        timeout=self.timeout,
                    )
            except FileNotFoundError:
                # the generation the read is pinned to was there a moment ago (the stat, or
                # the chunks before): the object was replaced or deleted since
                raise ObjectChangedError(
                    url,
                    f"at byte {offset}: generation {generation} is gone, "
                    "replaced or deleted (HTTP 404)",
                ) from None
            traffic.add("gs", "read", len(data))
            return io.BytesIO(data), end, size

        return self._open_resumable(url, open_at)

    def open_write(self, url: str, durable: bool = True):
        blob = self._blob(url, chunk_size=self.upload_chunk)

        def upload(path, size):
            with self._errors(url):
                blob.upload_from_filename(path, retry=None, timeout=self.timeout)

        return spooled_upload(url, upload, self.policy)

    def assemble(
        self, url: str, ranges: Sequence[Tuple[str, int, int]], crcs: Sequence[Optional[int]]
    ) -> Optional[str]:
        """The object ``url`` composed of ``ranges`` of objects in its bucket: whole
        objects as they are, parts of objects through temporary objects; its CRC-32C.
        None (the caller copies) when no range is a whole object, or too many ranges."""
        from transforms.tfrecord import digests

        bucket, name = self._split(url)
        if not store_copy.enabled() or len(ranges) > COMPOSE_MAX * COMPOSE_MAX:
            return None
        try:
            if any(self._split(r[0])[0] != bucket for r in ranges):
                return None  # compose joins objects of one bucket only
        except ValueError:
            return None
        metas = {u: self._stat(u) for u in dict.fromkeys(r[0] for r in ranges)}
        whole = [off == 0 and n == int(metas[u].size or 0) for u, off, n in ranges]
        if not any(whole):
            return None
        temps: List[str] = []
        try:
            sources, crc = [], 0
            for i, ((src, off, n), is_whole, known) in enumerate(zip(ranges, whole, crcs)):
                if is_whole:
                    meta = metas[src]
                    part = known
                    if part is None and meta.crc32c:
                        part = int.from_bytes(base64.b64decode(meta.crc32c), "big")
                    if part is None:
                        part = self._copy_range(src, off, n, None)
                    else:
                        traffic.add("gs", "copy", n)
                    sources.append(self.client.bucket(bucket).blob(self._split(src)[1]))
                else:
                    tmp = f"{name}.part-{uuid.uuid4().hex[:12]}-{i}"
                    temps.append(tmp)
                    part = self._copy_range(src, off, n, f"gs://{bucket}/{tmp}")
                    sources.append(self.client.bucket(bucket).blob(tmp))
                crc = digests.crc32c_combine(crc, part, n)
            while len(sources) > COMPOSE_MAX:  # compose groups of 32 into temporary objects
                level = []
                for k in range(0, len(sources), COMPOSE_MAX):
                    tmp = f"{name}.part-{uuid.uuid4().hex[:12]}-c{k}"
                    temps.append(tmp)
                    self._compose(f"gs://{bucket}/{tmp}", sources[k : k + COMPOSE_MAX])
                    level.append(self.client.bucket(bucket).blob(tmp))
                sources = level
            made = self._compose(url, sources)
        finally:
            for tmp in temps:
                self.delete(f"gs://{bucket}/{tmp}")
            traffic.flush()
        want = f"{crc:08x}"
        got = base64.b64decode(made.crc32c).hex() if made.crc32c else None
        if got is not None and got != want:
            self.delete(url)
            raise IOError(f"{url}: composed object's CRC-32C {got} differs from its pieces' {want}")
        return want

    def _compose(self, url: str, sources):
        dest = self._blob(url)
        self._call(url, "compose", lambda: dest.compose(sources, retry=None, timeout=self.timeout))
        return dest

    def _copy_range(self, src: str, offset: int, length: int, dest: Optional[str]) -> int:
        """Download ``length`` bytes at ``offset`` of ``src`` (and upload them as the
        object ``dest``, if given); their CRC-32C."""
        from transforms.tfrecord import digests

        digest = digests.new("crc32c")
        blob = self._blob(src)
        step = max(1, int(self.read_chunk))

        def pump(out) -> None:
            # ranged downloads of this range only (open_read's chunks would run past it)
            for start in range(offset, offset + length, step):
                end = min(offset + length, start + step)
                data = self._call(
                    src,
                    "read",
                    lambda start=start, end=end: blob.download_as_bytes(
                        start=start,
                        end=end - 1,
                        raw_download=True,
                        checksum=None,
                        retry=None,
                        timeout=self.timeout,
                    ),
                )
                if len(data) != end - start:
                    raise IOError(f"{src}: {end - start} bytes at {start} asked, {len(data)} got")
                traffic.add("gs", "read", len(data))
                digest.update(data)
                if out is not None:
                    out.write(data)

        if dest is None:
            pump(None)
        else:
            with self.open_write(dest) as out:
                pump(out)
        return digests.crc32c_of(digest)

    def exists(self, url: str) -> bool:
        return bool(
            self._call(
                url, "stat", lambda: self._blob(url).exists(retry=None, timeout=self.timeout)
            )
        )

    def delete(self, url: str) -> None:
        try:
            self._call(
                url, "delete", lambda: self._blob(url).delete(retry=None, timeout=self.timeout)
            )
        except FileNotFoundError:
            pass

    def size(self, url: str) -> int:
        return int(self._stat(url).size or 0)

    def size_and_crc32c(self, url: str) -> Tuple[int, Optional[str]]:
        """GCS keeps every object's CRC32C (base64, big-endian): no download needed."""
        meta = self._stat(url)
        return int(meta.size or 0), (base64.b64decode(meta.crc32c).hex() if meta.crc32c else None)
