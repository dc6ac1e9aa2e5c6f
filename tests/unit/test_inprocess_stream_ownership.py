"""Who may touch what across the shard stream's threads (pipelines/inprocess/stream.py,
pipelines/job/kinds/tfrecord/shardfile.py): a placing thread is never left waiting, a
sealed shard takes no more bytes, and a cancellation reaches every shard the writer has
open, whenever it comes."""

import dataclasses
import threading

import pytest
from support.shard_stream_fixtures import _pieces

from pipelines.inprocess.stream import PieceFeed, ShardStream
from pipelines.job.kinds.tfrecord.piece import ConvertedPiece
from pipelines.job.kinds.tfrecord.shardfile import ShardFile


def _in_thread(fn, timeout=10):
    """``fn()`` on a daemon thread: what it returned or raised, or "hung"."""
    got = []

    def run():
        try:
            got.append(("returned", fn()))
        except BaseException as e:
            got.append(("raised", e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    return got[0] if got else ("hung", None)


def test_a_piece_the_stream_cannot_read_fails_its_placing_thread_instead_of_leaving_it_waiting(
    tmp_path,
):
    """The stream fails on a piece before reserving any range for it (here: its sizes
    unknown and its record file missing): the thread that placed it gets that error, so
    do the threads waiting behind it, and stopping the job leaves no file."""
    good, bad, behind = _pieces(str(tmp_path), [[100] * 2, [100] * 2, [100]])
    bad = ConvertedPiece(dataclasses.replace(bad.summary, piece=str(tmp_path / "gone.tfrecord")))
    feed = PieceFeed(ShardStream(str(tmp_path / "s" / "t-{}.rec"), None, None), expect=3)
    kind, runs = _in_thread(lambda: feed.place(good))  # placed; its "worker" never writes
    assert kind == "returned" and len(runs) == 1
    waiting = []
    t = threading.Thread(target=lambda: waiting.append(_in_thread(lambda: feed.place(behind))))
    t.start()
    kind, error = _in_thread(lambda: feed.place(bad))
    assert kind == "raised" and isinstance(error, OSError), (kind, error)
    t.join(20)
    assert waiting and waiting[0][0] == "raised", waiting
    kind, error = _in_thread(lambda: feed.finish(3))
    assert kind == "raised" and isinstance(error, OSError), (kind, error)
    assert not (tmp_path / "s").exists() or list((tmp_path / "s").iterdir()) == []


def test_a_sealed_shard_takes_no_more_bytes(tmp_path):
    shard = ShardFile(str(tmp_path / "t-1.rec"))
    shard.write([b"abc"], [3])
    shard.park()  # seals: another thread may close it from now on
    with pytest.raises(RuntimeError, match="sealed"):
        shard.write([b"d"], [1])
    with pytest.raises(RuntimeError, match="sealed"):
        shard.reserve(1, [1])
    row = shard.close()
    assert row["bytes"] == 3 and (tmp_path / "t-1.rec").read_bytes() == b"abc"


def _cancel_at(stream, hook, k, after):
    """The ``k``-th call of ``stream``'s ``_Shards.<hook>`` cancels the stream from another
    thread, just before the call or (``after``) just after it."""
    shards = stream._shards
    real, calls = getattr(shards, hook), []

    def cancel():
        t = threading.Thread(target=stream.cancel, args=(RuntimeError("stopped"),))
        t.start()
        t.join(10)

    def hooked(*a):
        calls.append(1)
        if not after and len(calls) == k:
            cancel()
        got = real(*a)
        if after and len(calls) == k:
            cancel()
        return got

    setattr(shards, hook, hooked)


def test_a_cancellation_reaches_every_shard_open_whenever_it_comes(tmp_path):
    """cancel() from another thread just before or after the writer opens a shard or hands
    one to the closer, each time: ranges nobody fills, yet finish() raises at once instead
    of waiting for them, and no file is left."""
    from concurrent.futures import Future

    (piece,) = _pieces(str(tmp_path), [[300] * 12])  # 4 shards of 3 records
    cases = [(h, k, a) for h in ("opened", "handed") for k in (1, 2, 3, 4) for a in (0, 1)]
    for n, case in enumerate(cases):
        out = tmp_path / f"s{n}"
        stream = ShardStream(str(out / "t-{}.rec"), 1000, None)
        _cancel_at(stream, *case)
        place = Future()
        stream.add(piece, place)
        assert len(place.result()) == 4, case
        kind, got = _in_thread(stream.finish)
        assert kind == "raised" and "stopped" in str(got), (case, kind, got)
        assert not out.exists() or list(out.iterdir()) == [], case
