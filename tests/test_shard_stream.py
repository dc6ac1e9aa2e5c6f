"""Streamed final shards (pipelines.shard_stream) against the planned path (finalize)."""

import os
import random
import tempfile

import pytest
from hypothesis import given, settings, strategies as st

import shardgen
from pipelines import finalize
from pipelines.local_convert import convert_in_process
from pipelines.shard_convert import ConvertConfig
from pipelines.shard_stream import ShardStream, can_stream
from transforms.ops import Func


def _pieces(d, layout, seed=0):
    """Piece files of random bytes with the given record sizes, and their sidecar dicts."""
    rnd = random.Random(seed)
    out = []
    for i, sizes in enumerate(layout):
        path = os.path.join(d, f"piece-{i:06d}.tfrecord")
        with open(path, "wb") as f:
            f.write(rnd.randbytes(sum(sizes)))
        out.append({"index": i, "piece": path, "sizes": list(sizes)})
    return out


def _planned(pieces, output, max_bytes, max_records, dali):
    return [finalize.write_shard(t, None, dali) for t in finalize.make_plan(pieces, output, max_bytes, max_records)]


def _streamed(pieces, output, max_bytes, max_records, dali):
    s = ShardStream(output, max_bytes, max_records, None, dali)
    for p in pieces:
        s.add(p)
    return s.finish()


def _files(d):
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


def _rows(rows, d):
    return [dict(r, path=os.path.relpath(r["path"], d)) for r in rows]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(min_value=1, max_value=400), max_size=12), max_size=8),
       st.one_of(st.none(), st.integers(min_value=1, max_value=1500)),
       st.one_of(st.none(), st.integers(min_value=1, max_value=7)),
       st.booleans())
def test_streamed_shards_equal_planned_shards(layout, max_bytes, max_records, dali):
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "w"))
        pieces = _pieces(os.path.join(d, "w"), layout)
        a, b = os.path.join(d, "a"), os.path.join(d, "b")
        ra = _planned(pieces, os.path.join(a, "t-{}.rec"), max_bytes, max_records, dali)
        rb = _streamed(pieces, os.path.join(b, "t-{}.rec"), max_bytes, max_records, dali)
        assert _rows(ra, a) == _rows(rb, b)
        n = sum(map(len, layout))
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


def _crash_in_last_shard(record):
    if record["__key__"] == "000022":
        os._exit(5)
    return record


def test_a_failed_in_process_job_leaves_no_shards(tmp_path):
    """Shards finished before the failure are removed: a failed job leaves no output."""
    shardgen.make_shards(str(tmp_path), 4, 6, size=(32, 32))
    out = tmp_path / "o"
    cfg = ConvertConfig(sources=str(tmp_path / "train-{0000..0003}.tar"), output=str(out / "t-{}.record"),
                        max_shard_size="4KB", sample_stages=(Func(_crash_in_last_shard),), progress=False,
                        processes=2)
    with pytest.raises(Exception, match="died with exit code 5"):
        convert_in_process(cfg, num_workers=2)
    assert not out.exists() or [f for f in os.listdir(out) if not f.startswith(".tar2tf-work")] == []
    ok = convert_in_process(ConvertConfig(sources=cfg.sources, output=cfg.output, max_shard_size="4KB",
                                          progress=False), num_workers=2)
    assert ok.exit_code == 0 and len(ok.paths) > 2 and ok.totals["records_written"] == 24


def test_stale_temporaries_of_a_killed_run_are_found(tmp_path):
    for name in (".t-3.record.tmp-0123456789ab", ".t-3.record.idx.tmp-0123456789ab",  # ours
                 ".t-x.record.tmp-0123456789ab", ".u-3.record.tmp-0123456789ab",      # other names
                 ".t-3.record.tmp-short", "t-3.record"):
        (tmp_path / name).write_bytes(b"x")
    found = finalize.stale_temporaries(str(tmp_path / "t-{}.record"))
    assert sorted(map(os.path.basename, found)) == [".t-3.record.idx.tmp-0123456789ab",
                                                    ".t-3.record.tmp-0123456789ab"]
    assert finalize.stale_temporaries(str(tmp_path / "missing" / "t-{}.record")) == []


def test_pieces_the_stream_never_got_are_written_the_planned_way(tmp_path):
    """DoFns in other processes feed no stream: finish_shards falls back to the plan."""
    from pipelines import convert as cv, shard_stream
    pieces = _pieces(str(tmp_path), [[300] * 4, [300] * 4, [300] * 4])
    cfg = ConvertConfig(sources=[], output=str(tmp_path / "s" / "t-{}.rec"), max_shard_size=1000)
    feed = cv.start_stream("job-1", cfg)
    feed.offer(pieces[0])  # piece 1 never arrives
    feed.offer(pieces[2])
    try:
        rows = cv.finish_shards(pieces, "job-1", cfg)
    finally:
        shard_stream.stop("job-1")
    ref = _planned(pieces, str(tmp_path / "p" / "t-{}.rec"), 1000, None, False)
    assert _rows(rows, str(tmp_path / "s")) == _rows(ref, str(tmp_path / "p"))
    assert _files(str(tmp_path / "s")) == _files(str(tmp_path / "p"))
