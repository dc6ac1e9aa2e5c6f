"""Streamed final shards (pipelines.inprocess.stream) against the planned path (plan), on
piece files of random records: the stream and its journal, and the feed (``PieceFeed``)
that Beam's DoFns hand pieces to.  Whole jobs through the stream: test_inprocess_stream_jobs."""

import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.shard_stream_fixtures import (
    _files,
    _info,
    _pieces,
    _planned,
    _rows,
    _streamed,
    _wait_for,
    _workers,
)

from pipelines.inprocess.stream import ShardStream, can_stream
from pipelines.job import names, workfiles
from pipelines.job.kinds.tfrecord.config import ConvertConfig


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(min_value=1, max_value=400), max_size=12), max_size=8),
    st.one_of(st.none(), st.integers(min_value=1, max_value=1500)),
    st.one_of(st.none(), st.integers(min_value=1, max_value=7)),
    st.booleans(),
)
@pytest.mark.slow
def test_streamed_shards_equal_planned_shards(layout, max_bytes, max_records, dali):
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "w"))
        pieces = _pieces(os.path.join(d, "w"), layout)
        a, b, c = os.path.join(d, "a"), os.path.join(d, "b"), os.path.join(d, "c")
        n = sum(map(len, layout))
        ra = _planned(pieces, os.path.join(a, "t-{}.rec"), max_bytes, max_records, dali)
        rb = _streamed(pieces, os.path.join(b, "t-{}.rec"), max_bytes, max_records, dali)
        rc = _streamed(pieces, os.path.join(c, "t-{}.rec"), max_bytes, max_records, dali, held=True)
        assert _rows(ra, a) == _rows(rb, b) == _rows(rc, c)
        assert _files(b) == _files(c) if n else rc == []
        assert sum(r["records"] for r in rb) == n
        if n:
            assert _files(a) == _files(b)
            assert len(_files(b)) == len(rb) * (2 if dali else 1)  # nothing else: no temp file left
        else:
            assert rb == [] and not os.path.exists(b)


def test_abort_removes_the_open_shard_and_the_finished_ones(tmp_path):
    pieces = _pieces(str(tmp_path), [[100] * 5, [100] * 5, [100] * 5])
    out = tmp_path / "o"
    s = ShardStream(str(out / "t-{}.rec"), 250, None, None, True)
    s.add(pieces[0])
    s.add(pieces[1])  # shards 1-4 finished (some closing in the background), shard 5 open
    s.abort(RuntimeError("conversion failed"))
    assert os.listdir(out) == []


def test_only_count_free_names_stream():
    assert can_stream("out/train-{}.record")
    assert not can_stream("out/train.record")  # train-00000-of-0000N.record: N comes last
    with pytest.raises(ValueError, match="template"):
        ShardStream("out/train.record", None, None)


def test_a_journaled_stream_keeps_its_finished_shards_on_abort_and_drops_consumed_pieces(tmp_path):
    from pipelines.inprocess import journal as shard_journal

    work = str(tmp_path / "work")
    os.makedirs(work)
    pieces = [_info(p) for p in _pieces(work, [[100] * 5, [100] * 5, [100] * 5])]
    out = tmp_path / "o"
    s = ShardStream(str(out / "t-{}.rec"), 250, None, None, False, journal=work)
    s.add(pieces[0])
    s.add(pieces[1])  # 2 records per shard: shards 1-4 finished, 5 open (records 3-4 of piece 1)
    s.abort(RuntimeError("conversion failed"))
    assert sorted(os.listdir(out)) == ["t-1.rec", "t-2.rec", "t-3.rec", "t-4.rec"]
    point = shard_journal.load(work)
    assert point.shards == 4 and (point.next_piece, point.skip) == (1, 3)
    assert [p.index for p in point.pieces] == [0]
    assert not os.path.exists(pieces[0].summary.piece)  # wholly in journaled shards: deleted
    assert os.path.exists(pieces[1].summary.piece) and os.path.exists(pieces[2].summary.piece)


@settings(max_examples=25, deadline=None)
@given(
    layout=st.lists(st.lists(st.integers(1, 400), max_size=6), min_size=1, max_size=6),
    max_bytes=st.one_of(st.none(), st.integers(50, 900)),
    max_records=st.one_of(st.none(), st.integers(1, 5)),
    cut=st.integers(0, 40),
)
@pytest.mark.slow
def test_a_stream_resumed_after_any_journaled_shard_writes_the_same_shards(
    layout, max_bytes, max_records, cut
):
    from pipelines.inprocess import journal as shard_journal

    with tempfile.TemporaryDirectory() as d:
        pieces = _pieces(d, layout)
        full = _streamed(pieces, os.path.join(d, "full", "t-{}.rec"), max_bytes, max_records, False)
        work = os.path.join(d, "work")
        first = ShardStream(
            os.path.join(d, "o", "t-{}.rec"), max_bytes, max_records, None, False, journal=work
        )
        for p in pieces:
            first.add(p)
        rows = first.finish()
        assert _rows(rows, os.path.join(d, "o")) == _rows(full, os.path.join(d, "full"))
        # as if killed after `cut` shards were journaled: later entries and shards never happened
        cut = min(cut, len(rows))
        for n in range(cut + 1, len(rows) + 1):
            os.remove(workfiles.journal_entry(work, n))
            os.remove(os.path.join(d, "o", f"t-{n}.rec"))
        point = shard_journal.load(work)
        assert (point is None) == (cut == 0)
        again = ShardStream(
            os.path.join(d, "o", "t-{}.rec"),
            max_bytes,
            max_records,
            None,
            False,
            journal=work,
            resume=point,
        )
        for p in pieces[point.next_piece if point else 0 :]:
            again.add(p)
        assert again.finish() == rows
        if rows:
            assert _files(os.path.join(d, "o")) == _files(os.path.join(d, "full"))
        if point is not None:
            assert [p.index for p in point.pieces] == list(range(len(point.pieces)))


def test_stale_temporaries_of_a_killed_run_are_found(tmp_path):
    for name in (
        ".t-3.record.tmp-0123456789ab",
        ".t-3.record.idx.tmp-0123456789ab",  # ours
        ".t-x.record.tmp-0123456789ab",
        ".u-3.record.tmp-0123456789ab",  # other names
        ".t-3.record.tmp-short",
        "t-3.record",
    ):
        (tmp_path / name).write_bytes(b"x")
    found = names.stale_temporaries(str(tmp_path / "t-{}.record"))
    assert sorted(map(os.path.basename, found)) == [
        ".t-3.record.idx.tmp-0123456789ab",
        ".t-3.record.tmp-0123456789ab",
    ]
    assert names.stale_temporaries(str(tmp_path / "missing" / "t-{}.record")) == []


def _work_pieces(tmp_path, layout):
    """Pieces with sidecars in a work dir (as workers leave them), the shards the planned
    path makes of them, and the config of a streamed job writing to ``s/``."""
    from pipelines.job import workfiles

    work = str(tmp_path / "work")
    os.makedirs(work)
    pieces = [_info(p) for p in _pieces(work, layout)]
    for p in pieces:
        workfiles.write_sidecar(p.summary.piece, p.summary.to_json(), None)
    ref = _planned(pieces, str(tmp_path / "p" / "t-{}.rec"), 1000, None, False)
    cfg = ConvertConfig(sources=[], output=str(tmp_path / "s" / "t-{}.rec"), max_shard_size=1000)
    return work, pieces, ref, cfg


def test_the_feed_closes_the_last_shard_when_the_last_expected_piece_is_in(tmp_path):
    """With the job's piece count, the last shard is closed (fsync, final name) as soon as
    every piece is in, before anyone calls finish()."""
    from pipelines.inprocess.driver import new_stream
    from pipelines.inprocess.stream import PieceFeed
    from pipelines.job.kinds.tfrecord.kind import TFRECORD

    pieces = _pieces(str(tmp_path), [[300] * 4, [300] * 3, [300] * 4])
    ref = _planned(pieces, str(tmp_path / "p" / "t-{}.rec"), 1000, None, False)
    cfg = ConvertConfig(sources=[], output=str(tmp_path / "s" / "t-{}.rec"), max_shard_size=1000)
    feed = PieceFeed(new_stream(TFRECORD.in_process(cfg).stream, cfg.store), 3)
    try:
        threads = _workers(feed, pieces, order=(2, 0, 1))
        final = sorted(os.listdir(tmp_path / "p"))
        _wait_for(
            lambda: os.path.isdir(tmp_path / "s") and sorted(os.listdir(tmp_path / "s")) == final
        )
        assert _files(str(tmp_path / "s")) == _files(str(tmp_path / "p"))  # every shard closed
        rows = feed.finish(3)
        for t in threads:
            t.join(10)
    finally:
        if not feed.settled:
            feed.abort()
    assert _rows(rows, str(tmp_path / "s")) == _rows(ref, str(tmp_path / "p"))
    assert _files(str(tmp_path / "s")) == _files(str(tmp_path / "p"))  # kept: the job finished


def test_a_job_failing_after_its_stream_closed_leaves_no_shards(tmp_path):
    from pipelines.inprocess.driver import new_stream
    from pipelines.inprocess.stream import PieceFeed
    from pipelines.job.kinds.tfrecord.kind import TFRECORD

    pieces = _pieces(str(tmp_path), [[300] * 4, [300] * 4])
    cfg = ConvertConfig(sources=[], output=str(tmp_path / "s" / "t-{}.rec"), max_shard_size=1000)
    feed = PieceFeed(new_stream(TFRECORD.in_process(cfg).stream, cfg.store), 2)
    threads = _workers(feed, pieces)
    _wait_for(
        lambda: (
            os.path.isdir(tmp_path / "s")
            and sorted(os.listdir(tmp_path / "s")) == ["t-1.rec", "t-2.rec", "t-3.rec"]
        )
    )
    for t in threads:
        t.join(10)
    feed.abort()  # the job failed afterwards: finish() was never reached
    assert os.listdir(tmp_path / "s") == []
