"""AIS and GCS stores against real servers (aisnode, fake-gcs-server) on loopback, with
faults injected by a proxy between client and server."""

from __future__ import annotations

import contextlib
import logging
import os
import time

import pytest

from transforms.record_types import is_reject
from transforms.stores import StoreConfig, get_store
from transforms.tar.fetch import read_shard
from transforms.tar.sources import resolve

pytestmark = [pytest.mark.ais, pytest.mark.gcs]


def _blob(n: int, seed: int = 0) -> bytes:
    import random

    return random.Random(seed).randbytes(n)


def test_list_is_paged_by_prefix_and_survives_a_failed_page(backend):
    for i in range(7):
        backend.put(f"p/obj-{i}", b"x")
    backend.put("q/other", b"y")
    backend.put("p-not-under-slash", b"z")
    cfg = backend.config(list_page_size=3)
    store = get_store(backend.url(), cfg)
    want = [backend.url(f"p/obj-{i}") for i in range(7)]
    assert sorted(store.list(backend.url("p/"))) == want
    pages = backend.front.count("GET", backend.list_re())
    assert pages >= 3  # 7 names, 3 per page
    # a 503 on the second page: that page is retried, no name repeated or lost
    backend.clear()
    backend.front.add("status", method="GET", path=backend.list_re(), skip=1, times=1)
    assert sorted(store.list(backend.url("p/"))) == want
    assert backend.front.faults() == 1
    # "p" is also a directory: its sibling "p-not-under-slash" is listed too (AIS lists a
    # prefix naming a directory as that directory only; the store works around it)
    everything = sorted(want + [backend.url("p-not-under-slash")])
    assert sorted(get_store(backend.url(), backend.config()).list(backend.url("p"))) == everything
    # exact names are found even where a paged listing misses them (AIS 5.0 pages names
    # that share a directory's name as prefix out of order: docs/object-stores.md)
    urls, rejects = resolve(backend.url("{p-not-under-slash,p/obj-{0..6}}"), config=cfg)
    assert sorted(urls) == everything and rejects == []


def test_streamed_read_seek_and_size(backend):
    data = _blob(300_000, 1)
    backend.put("d/blob.bin", data)
    store = get_store(backend.url(), backend.config())
    if backend.scheme == "gs":
        store.read_chunk = 64 * 1024  # several ranged requests per object
    url = backend.url("d/blob.bin")
    assert store.size(url) == len(data) and store.exists(url) and not store.exists(url + "x")
    with store.open_read(url) as f:
        assert f.read(1000) == data[:1000]
        f.seek(5)
        assert f.read() == data[5:]
        raw = f.raw  # below the buffer: a seek is a new ranged request
        raw.seek(250_000)
        assert raw.tell() == 250_000
        buf = bytearray(10_000)
        got = bytearray()
        while len(got) < 10_000:
            n = raw.readinto(memoryview(buf)[: 10_000 - len(got)])
            got += buf[:n]
        assert bytes(got) == data[250_000:260_000]
    if backend.scheme == "gs":
        assert backend.front.count("GET", backend.obj_re("d/blob.bin")) >= 5  # 64 KiB ranges
    else:  # the proxy redirects each GET to the target; bytes come from the target
        statuses = [
            s for m, p, s, _ in backend.front.log if m == "GET" and p.startswith("/v1/objects/")
        ]
        assert len(statuses) == 2 and set(statuses) <= {301, 307}
        assert backend.data.count("GET", backend.obj_re("d/blob.bin")) == 2
    ranges = _ranges(backend.data)
    if backend.scheme == "gs":  # each chunk one ranged GET of at most 64 KiB; the seek starts one
        spans = [tuple(map(int, r[len("bytes=") :].split("-"))) for r in ranges]
        assert spans[0] == (0, 65_535) and spans[-1] == (250_000, 299_999), ranges
        assert all(0 < end - start + 1 <= 64 * 1024 for start, end in spans), ranges
    else:  # the target streams the rest of the object from the seek's offset
        assert ranges == ["bytes=250000-"], ranges


def _logged_all(proxy, timeout: float = 30.0) -> None:
    """Wait until ``proxy`` has logged every request that reached it.  It notes a request's
    headers on arrival but logs it only once it has sent the response headers, so a client
    that has its answer may be ahead of the log; every request is logged at least once."""
    deadline = time.monotonic() + timeout
    while True:
        with proxy.lock:
            if len(proxy.log) >= len(proxy.headers):
                return
        assert time.monotonic() < deadline, f"the proxy did not log its requests in {timeout} s"
        time.sleep(0.01)


def _ranges(proxy) -> list:
    """The ``Range`` headers of the requests that reached ``proxy``, in arrival order (the
    header's case is the client's own)."""
    with proxy.lock:
        return [v for h in proxy.headers for k, v in h.items() if k.lower() == "range"]


def test_the_crc32c_a_bucket_keeps(backend):
    """GCS keeps every object's CRC32C; AIS keeps one once the bucket's checksum type is
    crc32c (its default, xxhash, is no CRC32C: None, so a caller reads the bytes)."""
    import google_crc32c

    data = _blob(70_000, 2)
    store = get_store(backend.url(), backend.config())
    backend.put("c/before", data)
    backend.keep_crc32c()
    backend.put("c/after", data)
    want = f"{google_crc32c.value(data):08x}"
    assert store.size_and_crc32c(backend.url("c/before")) == (
        len(data),
        None if backend.scheme == "ais" else want,
    )
    assert store.size_and_crc32c(backend.url("c/after")) == (len(data), want)
    with pytest.raises(FileNotFoundError):
        store.size_and_crc32c(backend.url("c/missing"))


def test_reads_resume_after_faults_without_losing_or_repeating_bytes(backend):
    data = _blob(400_000, 2)
    backend.put("f/blob.bin", data)
    store = get_store(backend.url(), backend.config(read_timeout_s=1.0, retry_attempts=8))
    if backend.scheme == "gs":
        store.read_chunk = 96 * 1024
    target, obj = backend.data, backend.obj_re("f/blob.bin")
    first = 0
    if backend.scheme == "gs":  # let the first 96 KiB range (fetched at open) through untouched
        target.add("slow", method="GET", path=obj, delay=0.0)
        first = 1
    target.add("truncate", method="GET", path=obj, after=50_000)
    target.add("reset", method="GET", path=obj, after=30_000)
    target.add("status", method="GET", path=obj, status=503)
    target.add("status", method="GET", path=obj, status=429)
    target.add("slow", method="GET", path=obj, delay=1.6)  # longer than the read timeout
    target.add("slow", method="GET", path=obj, delay=0.2)  # shorter: just slow
    with store.open_read(backend.url("f/blob.bin")) as f:
        got = b"".join(iter(lambda: f.read(7_000), b""))
        reopens = f.raw.reopens
    assert got == data
    assert target.faults() == 6 + first
    assert reopens >= 2  # the truncated and the reset body were resumed mid-stream


def test_permanent_errors_are_not_retried(backend):
    store = get_store(backend.url(), backend.config())
    missing = backend.url("nope/missing.tar")
    with pytest.raises(FileNotFoundError):
        store.open_read(missing)
    assert backend.front.count("GET", backend.obj_re("nope/missing.tar")) <= 1
    backend.put("forbidden.tar", b"secret")
    backend.clear()
    rule = backend.data.add(
        "status", method="GET", path=backend.obj_re("forbidden.tar"), status=403, times=10
    )
    with pytest.raises(PermissionError):
        store.open_read(backend.url("forbidden.tar"))
    assert rule.fired == 1
    # through the fetch stage they are clear shard-level rejects
    items = list(read_shard(missing, backend.config()))
    assert len(items) == 1 and is_reject(items[0]) and items[0].stage == "fetch"
    assert items[0].reason.startswith("missing shard") and items[0].shard == missing
    rule.fired = 0
    items = list(read_shard(backend.url("forbidden.tar"), backend.config()))
    assert len(items) == 1 and items[0].reason.startswith("permission denied") and rule.fired == 1


def test_retries_are_bounded(backend):
    backend.put("busy.bin", b"abc")
    store = get_store(backend.url(), backend.config(retry_attempts=3))
    rule = backend.data.add(
        "status", method="GET", path=backend.obj_re("busy.bin"), status=503, times=100
    )
    with pytest.raises(Exception) as err:
        store.read_bytes(backend.url("busy.bin"))
    assert not isinstance(err.value, (FileNotFoundError, PermissionError))
    assert rule.fired == 3
    items = list(read_shard(backend.url("busy.bin"), backend.config(retry_attempts=2)))
    assert len(items) == 1 and items[0].reason.startswith("fetch failed")


def test_writes_are_atomic_and_retried(backend):
    store = get_store(backend.url(), backend.config())
    url = backend.url("w/out.bin")
    store.write_bytes(url, b"old")
    with pytest.raises(RuntimeError):
        with store.open_write(url) as f:
            f.write(b"new, half written")
            assert backend.get("w/out.bin") == b"old"  # nothing visible while writing
            raise RuntimeError("job failed")
    assert backend.get("w/out.bin") == b"old"
    with pytest.raises(RuntimeError):
        with store.open_write(backend.url("w/never.bin")) as f:
            f.write(b"x")
            raise RuntimeError("job failed")
    assert not store.exists(backend.url("w/never.bin"))
    # faults during the upload: it is restarted from its first byte
    data = _blob(700_000, 3)
    if backend.scheme == "gs":  # above 8 MiB: a resumable upload, in several requests
        data = _blob(9_000_000, 3)
        store.upload_chunk = 2 << 20
    backend.data.add(
        "status", method=backend.put_method, path=backend.put_re("w/out.bin"), status=503
    )
    backend.data.add("reset", method="PUT", path=backend.put_re("w/out.bin"), after=0)
    with store.open_write(url) as f:
        f.write(data)
    assert backend.get("w/out.bin") == data
    assert backend.data.faults() == 2  # a refused upload and a reset one, both redone
    if backend.scheme == "gs":
        assert backend.data.count("PUT", "upload_id=") >= 5  # 2 MiB chunks of a resumable upload
    store.delete(url)
    store.delete(url)  # missing: no error
    assert not store.exists(url)


def test_missing_names_and_buckets_are_list_rejects(backend):
    for i in (0, 1, 3):
        backend.put(f"s/shard-{i}.tar", b"t")
    urls, rejects = resolve(backend.url("s/shard-{0..3}.tar"), config=backend.config())
    assert urls == [backend.url(f"s/shard-{i}.tar") for i in (0, 1, 3)]
    assert [(r.shard, r.stage) for r in rejects] == [(backend.url("s/shard-2.tar"), "list")]
    urls, rejects = resolve(
        "shard-{0..1}.tar", base=f"{backend.scheme}://no-such-bucket-xyz/s", config=backend.config()
    )
    assert urls == [] and len(rejects) == 2 and all("missing shard" in r.reason for r in rejects)


def test_ais_token_from_env_is_sent_and_never_shown(ais_cluster, ais_proxies, monkeypatch, caplog):
    front, data = ais_proxies
    front.clear()
    secret = "tok-" + os.urandom(8).hex()
    monkeypatch.setenv("AIS_AUTHN_TOKEN", secret)
    cfg = StoreConfig(ais_endpoint=front.url, retry_attempts=2, retry_initial_s=0.01)
    caplog.set_level(logging.DEBUG)
    store = get_store("ais://x", cfg)
    bucket = ais_cluster.new_bucket()
    list(store.list(f"ais://{bucket}/"))
    assert any(h.get("Authorization") == f"Bearer {secret}" for h in front.headers)
    assert secret not in repr(store) and secret not in repr(cfg) and secret not in caplog.text


def test_ais_endpoint_resolution(monkeypatch):
    monkeypatch.delenv("AIS_ENDPOINT", raising=False)
    with pytest.raises(ValueError, match="AIS endpoint"):
        StoreConfig().resolved_ais_endpoint()
    monkeypatch.setenv("AIS_ENDPOINT", "http://127.0.0.1:1/")
    assert StoreConfig().resolved_ais_endpoint() == "http://127.0.0.1:1"
    assert StoreConfig(ais_endpoint="http://h:2").resolved_ais_endpoint() == "http://h:2"


def test_retries_spent_mid_stream_keep_earlier_records_and_say_where(backend, tmp_path):
    from support import shardgen

    tar = shardgen.write_tar(str(tmp_path / "s.tar"), shardgen.sample_members(0, 8, size=(32, 24)))
    data = open(tar, "rb").read()
    backend.put("mid/s.tar", data)
    cfg = backend.config(retry_attempts=2)
    obj = backend.obj_re("mid/s.tar")
    if backend.scheme == "gs":
        get_store(backend.url(), cfg).read_chunk = len(data) // 2
        backend.data.add("slow", method="GET", path=obj, delay=0.0)  # the first half arrives
    else:
        backend.data.add("truncate", method="GET", path=obj, after=len(data) // 2)
    backend.data.add("status", method="GET", path=obj, status=503, times=100)
    items = list(read_shard(backend.url("mid/s.tar"), cfg))
    records = [i for i in items if not is_reject(i)]
    rejects = [i for i in items if is_reject(i)]
    assert 0 < len(records) < 8 and [r["__key__"] for r in records] == [
        f"{i:06d}" for i in range(len(records))
    ]
    # the store gave up, the tar is fine: fetch rejects (the record being read, if the
    # break was inside one, and the shard), naming the object
    assert (
        rejects
        and rejects[-1].key is None
        and [r.stage for r in rejects] == ["fetch"] * len(rejects)
    )
    assert rejects[-1].reason.startswith(
        f"fetch failed mid-object: {backend.url('mid/s.tar')}: read failed at byte "
    )
    assert "retries spent" in rejects[-1].reason and "503" in rejects[-1].reason


def test_ais_object_replaced_mid_read_fails_instead_of_splicing(ais_cluster, ais_proxies, tmp_path):
    """A GET cut after N bytes, the object replaced, the resume (``Range: bytes=N-``) would
    return new[N:]: the reader compares the version headers of each response with the
    first one's and fails ("object changed while being read"), without retrying into the
    new version.  Through ``read_shard``: the records read before the break are the old
    version's, whole; the shard says why it stopped.  (GCS pins the generation instead.)"""
    import threading
    import time

    from support import shardgen
    from support.objstore_fixtures import AISBackend

    front, data = ais_proxies
    b = AISBackend(ais_cluster, front, data)
    b.clear()
    old = bytes(range(256)) * 4000
    new = bytes(
        255 - (i % 256) for i in range(len(old))
    )  # same size: only the version says it changed
    b.put("obj.bin", old)
    obj = b.obj_re("obj.bin")
    data.add("truncate", method="GET", path=obj, after=100_000)
    f = get_store(b.url(), b.config()).open_read(b.url("obj.bin"))
    got = b""
    while len(got) < 100_000:
        got += f.raw.read(100_000 - len(got))
    assert got == old[:100_000]
    b.put("obj.bin", new)
    with pytest.raises(
        OSError, match="object changed while being read"
    ) as err:  # not old[:N] + new[N:]
        f.raw.read(1 << 20)
    assert type(err.value).__name__ == "ObjectChangedError"
    assert "at byte 100000" in str(err.value) and "Ais-Version 1 -> 2" in str(err.value)
    _logged_all(front)  # the proxy logs a request after sending its headers
    # the first GET and one resume, each one request to the AIS proxy (the target's proxy
    # also logs the resumed body it could not finish sending): a changed object is not retried
    assert front.count("GET", obj) == 2
    f.close()

    # a tar shard, replaced while its resume waits; records of equal layout so a splice
    # would parse as a valid tar with records of mixed content
    def members(seed):
        return [(f"{i:06d}.bin", _blob(40_000, seed * 100 + i)) for i in range(8)]

    tar_old = open(shardgen.write_tar(str(tmp_path / "old.tar"), members(1)), "rb").read()
    tar_new = open(shardgen.write_tar(str(tmp_path / "new.tar"), members(2)), "rb").read()
    assert len(tar_old) == len(tar_new)
    b.clear()
    b.put("s.tar", tar_old)
    obj = b.obj_re("s.tar")
    cut = data.add("truncate", method="GET", path=obj, after=150_000)
    data.add(
        "slow", method="GET", path=obj, delay=1.0
    )  # the resume, held while the object is replaced

    def replace():
        deadline = time.time() + 20
        while not cut.fired and time.time() < deadline:
            time.sleep(0.01)
        b.put("s.tar", tar_new)

    t = threading.Thread(target=replace, daemon=True)
    t.start()
    try:
        items = list(read_shard(b.url("s.tar"), b.config()))
    finally:
        t.join()
        b.clear()
    records = [i for i in items if not is_reject(i)]
    rejects = [i for i in items if is_reject(i)]
    want = dict(members(1))
    assert 0 < len(records) < 8
    assert all(r["bin"] == want[r["__key__"] + ".bin"] for r in records)  # the old version's, whole
    # a fetch problem, not damage in the tar: every reject (the record being read when the
    # read broke, and the shard's) is a `fetch` one, naming the object and what changed
    assert rejects and rejects[-1].key is None
    assert [r.stage for r in rejects] == ["fetch"] * len(rejects), rejects
    assert rejects[-1].reason.startswith(
        f"object changed while being read: {b.url('s.tar')} (at byte "
    )
    assert "Ais-Version 1 -> 2" in rejects[-1].reason and "\n" not in rejects[-1].reason


def test_object_gone_mid_read_is_an_object_change(backend, tmp_path):
    """The object a read started on disappears between two requests of the read: on GCS
    it is replaced (the read is pinned to a generation, which is then gone), on AIS deleted
    (the resume after a cut finds nothing).  Either is an object change ("object changed
    while being read ... gone"), a `fetch` reject, not a "missing shard" or a damaged tar;
    the records before it are the old version's, whole."""
    import threading
    import time

    from support import shardgen

    members = [(f"{i:06d}.bin", _blob(40_000, 300 + i)) for i in range(8)]
    tar = open(shardgen.write_tar(str(tmp_path / "s.tar"), members), "rb").read()
    backend.put("s.tar", tar)
    cfg = backend.config()
    store = get_store(backend.url(), cfg)
    obj = backend.obj_re("s.tar")
    if backend.scheme == "gs":
        store.read_chunk = 150_000
        held = backend.data.add(
            "slow", method="GET", path=obj, delay=1.0, skip=1
        )  # the second chunk

        def change():
            backend.put("s.tar", tar[::-1])  # a new generation
    else:
        backend.data.add("truncate", method="GET", path=obj, after=150_000)
        held = backend.data.add("slow", method="GET", path=obj, delay=1.0)  # the resume

        def change():
            store.delete(backend.url("s.tar"))

    def when_held():
        deadline = time.time() + 20
        while not held.fired and time.time() < deadline:
            time.sleep(0.01)
        change()

    t = threading.Thread(target=when_held, daemon=True)
    t.start()
    try:
        items = list(read_shard(backend.url("s.tar"), cfg))
    finally:
        t.join()
        if backend.scheme == "gs":  # the store is shared by the tests with the same config
            from transforms.stores.gcs import READ_CHUNK

            store.read_chunk = READ_CHUNK
    records = [i for i in items if not is_reject(i)]
    rejects = [i for i in items if is_reject(i)]
    assert 0 < len(records) < 8 and all(
        r["bin"] == dict(members)[r["__key__"] + ".bin"] for r in records
    )
    assert (
        rejects
        and rejects[-1].key is None
        and [r.stage for r in rejects] == ["fetch"] * len(rejects)
    ), rejects
    assert rejects[-1].reason.startswith(
        f"object changed while being read: {backend.url('s.tar')} (at byte "
    )
    assert "gone" in rejects[-1].reason and "HTTP 404" in rejects[-1].reason


def test_spooled_upload_parks_and_cleans_up(tmp_path, monkeypatch):
    """The spool file of a remote write gives its descriptor back when parked and still
    uploads every byte; a block that raises uploads nothing; no spool file is left."""
    from transforms.stores.retry import RetryPolicy
    from transforms.stores.upload import SPOOL_DIR_ENV, spooled_upload

    monkeypatch.setenv(SPOOL_DIR_ENV, str(tmp_path))
    sent = []

    def upload(path, size):
        sent.append((open(path, "rb").read(), size))

    def open_on(path):
        """Descriptors of this process open on ``path``.  Other threads of the test process
        (server fixtures, clients) open and close their own descriptors meanwhile, so the
        spool file's own descriptors are counted, never the process's total."""
        found = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # closed between the listing and the read
                if os.readlink(f"/proc/self/fd/{fd}") == path:
                    found.append(fd)
        return found

    with spooled_upload("gs://b/o", upload, RetryPolicy()) as f:
        f.write(b"abc")
        proc = os.path.isdir("/proc/self/fd")
        if proc:
            assert len(open_on(os.path.realpath(f.name))) == 1  # writing: one descriptor
        f.park()
        if proc:
            assert open_on(os.path.realpath(f.name)) == []  # parked: none held
        f.write(b"def")
    assert sent == [(b"abcdef", 6)] and os.listdir(tmp_path) == []
    with pytest.raises(RuntimeError):
        with spooled_upload("gs://b/o", upload, RetryPolicy()) as f:
            f.write(b"partial")
            raise RuntimeError("the writer failed")
    assert len(sent) == 1 and os.listdir(tmp_path) == []
