"""Shards written to a bucket wait for the one upload thread in local spool files; when
uploads are slower than conversion, the writer waits once more than the spool limit is
spooled and not yet uploaded (``pipelines.inprocess.stream``), so local disk stays bounded.
Against the real stores (aisnode, fake-gcs-server) with uploads slowed by the fault proxy."""

from __future__ import annotations

import os
import random
import re
import threading
import time

import pytest
from support.shard_stream_fixtures import piece_summary

from pipelines.inprocess.stream import ShardStream
from pipelines.job.kinds.tfrecord.piece import ConvertedPiece
from transforms.stores import get_store
from transforms.stores.upload import SPOOL_DIR_ENV

RECORD, PER_PIECE, PIECES = 10_000, 4, 10  # 40 shards of 10 KB (one record each)
SHARD = RECORD
LIMIT = 3 * SHARD


def _pieces(seed=0):
    rnd = random.Random(seed)
    for i in range(PIECES):
        frames = [rnd.randbytes(RECORD) for _ in range(PER_PIECE)]
        yield ConvertedPiece(piece_summary(i, "", PER_PIECE), [RECORD] * PER_PIECE, frames)


def _puts(backend):
    """A request regex for every upload into the backend's bucket."""
    if backend.scheme == "ais":
        return "^" + re.escape(f"/v1/objects/{backend.bucket}/")
    return backend.put_re("")


class SpoolWatch:
    """Samples the bytes in a spool directory every few ms; ``peak`` is the most seen."""

    def __init__(self, d):
        self.d, self.peak, self._stop = d, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            total = 0
            for e in os.scandir(self.d):
                try:
                    total += e.stat().st_size
                except FileNotFoundError:
                    pass
            self.peak = max(self.peak, total)
            time.sleep(0.002)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def _run(backend, name, limit, monkeypatch):
    monkeypatch.setenv("TAR2TF_SPOOL_LIMIT", str(limit))
    cfg = backend.config()
    s = ShardStream(backend.url(name + "/t-{}.record"), SHARD, None, cfg)
    for p in _pieces():
        s.add(p)
    rows = s.finish()
    store = get_store(rows[0]["path"], cfg)
    return rows, [store.read_bytes(r["path"]) for r in rows]


@pytest.mark.slow
def test_slow_uploads_keep_spooled_bytes_under_the_limit(backend, tmp_path, monkeypatch):
    """40 shards of 10 KB made at once, each upload slowed by 0.1 s: unbounded, most of
    them sit in the spool directory together; with a 30 KB limit the writer waits, the
    spool never holds more than the limit plus the shard being written, and the objects
    are byte-identical to the unbounded run's."""
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setenv(SPOOL_DIR_ENV, str(spool))
    backend.front.add(
        "slow", method=backend.put_method, path=_puts(backend), times=10_000, delay=0.1
    )
    with SpoolWatch(str(spool)) as free:
        ref_rows, ref = _run(backend, "free", 1 << 40, monkeypatch)
    with SpoolWatch(str(spool)) as bounded:
        rows, out = _run(backend, "bounded", LIMIT, monkeypatch)
    assert len(ref) == PIECES * PER_PIECE and out == ref
    assert [(r["bytes"], r["crc32c"]) for r in rows] == [
        (r["bytes"], r["crc32c"]) for r in ref_rows
    ]
    assert free.peak >= 10 * SHARD, free.peak  # the backlog the limit is for
    assert 0 < bounded.peak <= LIMIT + SHARD, bounded.peak
    assert os.listdir(spool) == []


def test_a_failed_upload_fails_the_writer_and_a_cancel_frees_it(backend, tmp_path, monkeypatch):
    """A writer waiting for room in the spool is not left there: an upload that fails for
    good fails its next shard's hand-over (not only finish()), and cancel() (a job
    stopping) ends the wait at once; abort() then leaves no spool file.  A shard larger
    than the limit still goes through (alone)."""
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setenv(SPOOL_DIR_ENV, str(spool))
    monkeypatch.setenv("TAR2TF_SPOOL_LIMIT", str(LIMIT))
    cfg = backend.config()
    big = ShardStream(backend.url("big/t-{}.record"), None, 1, cfg)  # one record a shard
    for i in range(3):
        big.add(ConvertedPiece(piece_summary(i, "", 1), [4 * LIMIT], [bytes([i]) * (4 * LIMIT)]))
    assert [r["bytes"] for r in big.finish()] == [4 * LIMIT] * 3

    backend.front.add(
        "status", method=backend.put_method, path=_puts(backend), times=10_000, status=403
    )
    s = ShardStream(backend.url("denied/t-{}.record"), SHARD, None, cfg)
    pieces = _pieces()
    with pytest.raises(Exception, match="403|[Ff]orbidden|[Pp]ermission") as e:
        for p in pieces:
            s.add(p)
    assert next(pieces, None) is not None  # failed while adding, before the last piece
    s.abort(e.value)
    assert os.listdir(spool) == []

    backend.clear()
    backend.front.add(
        "slow", method=backend.put_method, path=_puts(backend), times=10_000, delay=3.0
    )
    s = ShardStream(backend.url("stopped/t-{}.record"), SHARD, None, cfg)
    stop = RuntimeError("stopped")
    cancelled = []

    def cancel():
        cancelled.append(time.monotonic())
        s.cancel(stop)

    threading.Timer(1.0, cancel).start()
    with pytest.raises(RuntimeError, match="stopped"):
        for p in _pieces():
            s.add(p)
    # timed from the cancel itself (a loaded machine may fire the timer late): the first
    # upload, 3 s long, is still under way; cancel freed the wait
    assert time.monotonic() - cancelled[0] < 1.5
    s.abort(stop)
    assert os.listdir(spool) == []


@pytest.mark.parametrize("journal", [False, True], ids=["no-journal", "journal"])
def test_after_a_failed_upload_the_queued_shards_are_not_uploaded(
    backend, tmp_path, monkeypatch, journal
):
    """40 shards queued behind slow uploads, the 3rd upload refused (403: not retried).
    The shards queued behind it are dropped: no upload request for any of them, nothing
    under their names, no spool file left.  The two before it are removed without a
    journal, and kept (journaled, for resume) with one."""
    from pipelines.inprocess import journal as shard_journal

    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setenv(SPOOL_DIR_ENV, str(spool))
    backend.front.add("status", method=backend.put_method, path=_puts(backend), skip=2, status=403)
    backend.front.add(
        "slow", method=backend.put_method, path=_puts(backend), times=10_000, delay=0.1
    )
    cfg = backend.config()
    work = str(tmp_path / "work") if journal else None
    s = ShardStream(
        backend.url("failed/t-{}.record"), SHARD, None, cfg, journal=work, spool_limit=1 << 40
    )
    try:
        for p in _pieces():
            s.add(p)
    except Exception as e:  # the failure reached the writer first
        err = e
        s.abort(e)
    else:
        with pytest.raises(Exception) as caught:
            s.finish()
        err = caught.value
    assert re.search("403|[Ff]orbidden|[Pp]ermission", str(err)), err
    assert backend.front.count(backend.put_method, _puts(backend)) == 3
    kept = sorted(get_store(backend.url(), cfg).list(backend.url("failed/")))
    assert kept == ([backend.url(f"failed/t-{i}.record") for i in (1, 2)] if journal else [])
    if journal:
        assert shard_journal.load(work, cfg).shards == 2
    assert os.listdir(spool) == []


@pytest.mark.slow
def test_spool_limit_flag_overrides_the_environment(backend, tmp_path, monkeypatch):
    """``tar2tf convert --spool-limit`` to a bucket (ConvertConfig.spool_limit, which the
    job's shard stream gets): with $TAR2TF_SPOOL_LIMIT at 1 TB, the spool still stays under
    the flag's 20 KB (plus the shard being written), where without the flag 10 KB shards
    behind 0.2 s uploads pile up; the objects are the same."""
    from support import shardgen

    from launch import cli

    src = shardgen.make_shards(str(tmp_path / "in"), 3, 24)
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setenv(SPOOL_DIR_ENV, str(spool))
    monkeypatch.setenv("TAR2TF_SPOOL_LIMIT", "1TB")
    backend.front.add(
        "slow", method=backend.put_method, path=_puts(backend), times=10_000, delay=0.2
    )
    cfg = backend.config()
    shard, limit = 10_000, 20_000
    outs = {}
    for name, flag in (("free", []), ("bounded", ["--spool-limit", "20KB"])):
        with SpoolWatch(str(spool)) as watch:
            code = cli.main(
                [
                    "convert",
                    str(tmp_path / "in" / "train-{0000..0002}.tar"),
                    "-o",
                    backend.url(name + "/t-{}.record"),
                    "--max-shard-size",
                    "10KB",
                    "--work-dir",
                    str(tmp_path / name),  # the pieces: not spooled
                    "--no-progress",
                    "--runner",  # the in-process driver's shard stream spools uploads
                    "local",
                    *_store_flags(backend),
                    *flag,
                ]
            )
        assert code == 0
        store = get_store(backend.url(), cfg)
        names = sorted(
            store.list(backend.url(name + "/t-")),
            key=lambda u: int(u.rsplit("-", 1)[1].split(".")[0]),
        )
        outs[name] = ([store.read_bytes(u) for u in names], watch.peak)
    assert len(src) == 3 and len(outs["free"][0]) >= 8 and outs["bounded"][0] == outs["free"][0]
    assert outs["free"][1] > limit + shard, outs["free"][1]  # the backlog the flag is for
    assert 0 < outs["bounded"][1] <= limit + shard, outs["bounded"][1]
    assert os.listdir(spool) == []


def _store_flags(backend):
    return ["--ais-endpoint", backend.config().ais_endpoint] if backend.scheme == "ais" else []


@pytest.mark.parametrize("journal", [False, True], ids=["no-journal", "journal"])
def test_a_stopping_job_does_not_upload_its_queued_shards(backend, tmp_path, monkeypatch, journal):
    """40 shards queued behind slow uploads (0.3 s each), then the job stops (Ctrl-C:
    abort with no upload failed): the shards still queued are dropped, not uploaded (and,
    without a journal, deleted again); abort returns after the upload under way, not after
    all of them.  With a journal, the shards uploaded before the stop stay, journaled."""
    from pipelines.inprocess import journal as shard_journal

    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setenv(SPOOL_DIR_ENV, str(spool))
    backend.front.add(
        "slow", method=backend.put_method, path=_puts(backend), times=10_000, delay=0.3
    )
    cfg = backend.config()
    work = str(tmp_path / "work") if journal else None
    s = ShardStream(
        backend.url("stopped/t-{}.record"), SHARD, None, cfg, journal=work, spool_limit=1 << 40
    )
    for p in _pieces():
        s.add(p)
    # one upload under way (polled: a fixed sleep may see none on a loaded machine)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not backend.front.count(
        backend.put_method, _puts(backend)
    ):
        time.sleep(0.01)
    t0 = time.monotonic()
    s.abort(KeyboardInterrupt())
    # 39 queued uploads at 0.3 s would take ~12 s; the margin is for a loaded machine
    assert time.monotonic() - t0 < 6.0
    puts = backend.front.count(backend.put_method, _puts(backend))
    assert 1 <= puts <= 4, puts
    kept = sorted(get_store(backend.url(), cfg).list(backend.url("stopped/")))
    if journal:
        assert 1 <= len(kept) <= puts and shard_journal.load(work, cfg).shards == len(kept)
    else:
        assert kept == []
    assert os.listdir(spool) == []
