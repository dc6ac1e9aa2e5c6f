"""Pieces a worker process writes itself, into byte ranges the shard stream reserves in
the final shards (``PieceFeed.place``, ``ShardFile.reserve``; pipelines/inprocess/worker.py)."""

import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.shard_stream_fixtures import (
    _as_worker,
    _files,
    _pieces,
    _planned,
    _rows,
    _wait_for,
    _workers,
)

from pipelines.inprocess.stream import ShardStream
from pipelines.job.kinds.tfrecord.config import ConvertConfig


def _placed(pieces, output, max_bytes, max_records, dali, how, order):
    """Through a PieceFeed as the in-process driver's worker pool uses it: every piece
    placed (``PieceFeed.place``) and written by a thread standing in for its worker
    process, from memory (``how[i]`` = "held") or from the piece file ("spilled"); the
    threads start in ``order``."""
    from pipelines.inprocess.stream import PieceFeed

    feed = PieceFeed(ShardStream(output, max_bytes, max_records, None, dali), expect=len(pieces))
    errors = []
    held = [h == "held" for h in how]
    for t in _workers(feed, pieces, order, held, errors):
        t.join(30)
    rows = feed.finish(len(pieces))
    assert not errors
    return rows


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.integers(min_value=1, max_value=400), max_size=12), max_size=6).flatmap(
        lambda layout: st.tuples(
            st.just(layout),
            st.lists(
                st.sampled_from(["held", "spilled"]),
                min_size=len(layout),
                max_size=len(layout),
            ),
            st.permutations(range(len(layout))),
        )
    ),
    st.one_of(st.none(), st.integers(min_value=1, max_value=1500)),
    st.one_of(st.none(), st.integers(min_value=1, max_value=7)),
    st.booleans(),
)
def test_pieces_written_by_workers_where_the_stream_places_them_equal_planned_shards(
    case, max_bytes, max_records, dali
):
    """Workers writing their frames into the final shards' reserved ranges, in any order,
    from memory or from their piece files: the planned path's bytes, names and rows (the
    rows' CRC-32C combined from the ranges' CRCs)."""
    layout, how, order = case
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "w"))
        pieces = _pieces(os.path.join(d, "w"), layout)
        a, b = os.path.join(d, "a"), os.path.join(d, "b")
        ra = _planned(pieces, os.path.join(a, "t-{}.rec"), max_bytes, max_records, dali)
        rb = _placed(pieces, os.path.join(b, "t-{}.rec"), max_bytes, max_records, dali, how, order)
        assert _rows(ra, a) == _rows(rb, b)
        if sum(map(len, layout)):
            assert _files(a) == _files(b)  # nothing else in b: no temporary file left
        else:
            assert rb == [] and not os.path.exists(b)


@pytest.mark.parametrize("all_in", [False, True])
def test_a_placed_range_never_written_fails_the_job_without_hanging(tmp_path, all_in):
    """A worker that dies after its piece was placed never fills its range: stopping the
    job cancels the shards waiting for it (no hang; ``all_in``: every expected piece is in,
    so the feed's thread itself waits in finish() for the last shards), removes every
    shard, and refuses pieces placed later (a waiting one too)."""
    import threading

    pieces = _pieces(str(tmp_path), [[300] * 4] * 4)
    cfg = ConvertConfig(sources=[], output=str(tmp_path / "s" / "t-{}.rec"), max_shard_size=1000)
    feed = _feed(cfg, expect=2 if all_in else 4)
    runs = feed.place(pieces[0])  # placed; its "worker" dies before writing
    assert [r[1:] for r in runs] == [(0, 0, 3), (0, 3, 4)]
    errors = []  # what piece 1's worker meets once the job is stopped: not asserted
    (second,) = _workers(feed, [pieces[1]], errors=errors)  # placed after piece 0, written
    late = []
    if not all_in:  # waits for piece 2, which never comes
        t = threading.Thread(
            target=lambda: late.append(_raises(lambda: feed.place(pieces[3]))), daemon=True
        )
        t.start()
    _wait_for(lambda: os.path.isdir(tmp_path / "s") and os.listdir(tmp_path / "s"))
    stopper = threading.Thread(target=feed.abort, daemon=True)  # a hang fails, not blocks exit
    stopper.start()
    stopper.join(10)
    assert not stopper.is_alive()
    if not all_in:
        t.join(10)
        assert late == [True]
    second.join(10)
    assert not second.is_alive()
    assert os.listdir(tmp_path / "s") == []  # the shards waiting for piece 0 too: nothing left
    with pytest.raises(RuntimeError, match="stopped"):
        feed.place(pieces[2])


def test_a_shard_opened_after_the_stream_was_stopped_never_waits(tmp_path):
    """cancel() (a stopping job) reaches the shards open at the time; a shard the writer
    opens after it (the writer was between two shards) is stopped too: its close raises
    instead of waiting for ever for a range nobody will write."""
    import threading
    from concurrent.futures import Future

    from pipelines.inprocess.driver import new_stream
    from pipelines.job.kinds.tfrecord.kind import TFRECORD

    (piece,) = _pieces(str(tmp_path), [[300] * 4])
    cfg = ConvertConfig(sources=[], output=str(tmp_path / "s" / "t-{}.rec"), max_shard_size=1000)
    stream = new_stream(TFRECORD.in_process(cfg).stream, cfg.store)
    stream.cancel(RuntimeError("stopped for the test"))
    place = Future()
    stream.add(piece, place)  # opens both shards after cancel(); nobody fills their ranges
    assert len(place.result()) == 2
    errors = []
    t = threading.Thread(target=lambda: errors.append(_raises(stream.finish)), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive() and errors == [True]
    assert not os.path.exists(tmp_path / "s") or os.listdir(tmp_path / "s") == []


def _feed(cfg, expect):
    """The feed the in-process driver gives its worker pool (``place``)."""
    from pipelines.inprocess.driver import new_stream
    from pipelines.inprocess.stream import PieceFeed
    from pipelines.job.kinds.tfrecord.kind import TFRECORD

    return PieceFeed(new_stream(TFRECORD.in_process(cfg).stream, cfg.store), expect)


def _raises(fn):
    try:
        fn()
    except RuntimeError:
        return True
    return False


def test_a_piece_placed_twice_is_written_once(tmp_path):
    """A piece converted again (a retried task): the second placement gets None (the
    worker drops its frames) and the shards are those of one conversion."""
    pieces = _pieces(str(tmp_path), [[300] * 4, [300] * 2])
    ref = _planned(pieces, str(tmp_path / "p" / "t-{}.rec"), 1000, None, False)
    cfg = ConvertConfig(sources=[], output=str(tmp_path / "s" / "t-{}.rec"), max_shard_size=1000)
    feed = _feed(cfg, expect=2)
    try:
        for p in pieces:
            _as_worker(feed, p, held=True)
            assert feed.place(p) is None
        rows = feed.finish(2)
    finally:
        if not feed.settled:
            feed.abort()
    assert _rows(rows, str(tmp_path / "s")) == _rows(ref, str(tmp_path / "p"))
    assert _files(str(tmp_path / "s")) == _files(str(tmp_path / "p"))
