"""Streamed final shards (pipelines.shard_stream) against the planned path (finalize)."""

import os
import random
import tempfile
import time

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


def _frames_of(p):
    data, frames, pos = open(p["piece"], "rb").read(), [], 0
    for size in p["sizes"]:
        frames.append(data[pos:pos + size])
        pos += size
    return frames


def _streamed(pieces, output, max_bytes, max_records, dali, held=False):
    s = ShardStream(output, max_bytes, max_records, None, dali)
    for p in pieces:
        if held:  # as the in-process driver hands them over: the frames in memory, no file
            p = dict(p, piece=None, frames=_frames_of(p))
        s.add(p)
    return s.finish()


def _files(d):
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


def _info(p):
    """A piece dict as convert_shard returns it (no rejects), with its digest."""
    from transforms import digests
    d = digests.new("crc32c")
    d.update(open(p["piece"], "rb").read())
    return dict(p, shard=f"in-{p['index']}.tar", records_read=len(p["sizes"]), filtered=0, rejects=[],
                schema={}, keys=[f"k{i}" for i in range(len(p["sizes"]))], crc32c=digests.hexdigest(d))


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


def _crash_in_last_shard(record):
    if record["__key__"] == "000022" and os.environ.get("TAR2TF_TEST_CRASH"):
        # a crash some time into the shard: a worker converts its next shard while the
        # piece it finished waits for its place, so a crash at once could come before
        # the earlier pieces (converted in 0.01 s here) are placed and written
        time.sleep(0.5)
        os._exit(5)
    return record


def test_a_failed_job_keeps_its_finished_shards_and_resume_continues_after_them(tmp_path, monkeypatch):
    """A job that fails keeps the shards its stream finished (journaled), and nothing else
    under a final name; a rerun without resume refuses to touch them, and with resume=True
    converts only what comes after them, into the same bytes as an uninterrupted run."""
    from pipelines import convert as cv, shard_journal
    shardgen.make_shards(str(tmp_path), 4, 6, size=(32, 32))

    def cfg(out, processes=2, **kw):
        return ConvertConfig(sources=str(tmp_path / "train-{0000..0003}.tar"), output=str(tmp_path / out / "t-{}.record"),
                             max_shard_size="4KB", sample_stages=(Func(_crash_in_last_shard),), progress=False,
                             processes=processes, **kw)
    monkeypatch.setenv("TAR2TF_TEST_CRASH", "1")
    with pytest.raises(Exception, match="died with exit code 5"):
        convert_in_process(cfg("o"), num_workers=2)
    monkeypatch.delenv("TAR2TF_TEST_CRASH")
    kept = sorted(os.listdir(tmp_path / "o"))
    work = cv.work_dir_for(cfg("o"), [str(tmp_path / f"train-{i:04d}.tar") for i in range(4)])
    point = shard_journal.load(work)
    assert point is not None and 0 < point.next_piece < 4
    on_disk = {i for i in range(4) if os.path.exists(os.path.join(work, f"piece-{i:06d}.json"))}
    assert 3 not in on_disk and not on_disk & {p["index"] for p in point.pieces}
    assert kept == [".tar2tf-work"] + [f"t-{i + 1}.record" for i in range(point.shards)]  # no temp file, no manifest
    with pytest.raises(cv.OutputExistsError, match="resume=True to continue it"):
        convert_in_process(cfg("o"), num_workers=2)

    converted = []
    real = cv.convert_shard
    monkeypatch.setattr(cv, "convert_shard", lambda *a: (converted.append(a[0]), real(*a))[1])
    res = convert_in_process(cfg("o", processes=0, resume=True), num_workers=2)
    assert sorted(converted) == sorted(set(range(point.next_piece, 4)) - on_disk)  # nothing journaled is redone
    ref = convert_in_process(cfg("ref"), num_workers=2)
    assert res.totals == ref.totals and res.totals["records_written"] == 24 and len(res.paths) > point.shards
    assert [open(p, "rb").read() for p in res.paths] == [open(p, "rb").read() for p in ref.paths]
    assert res.manifest["shards"] == [dict(r, path=r["path"].replace("/ref/", "/o/")) for r in ref.manifest["shards"]]


def test_a_journaled_stream_keeps_its_finished_shards_on_abort_and_drops_consumed_pieces(tmp_path):
    from pipelines import shard_journal
    work = str(tmp_path / "work")
    os.makedirs(work)
    pieces = [_info(p) for p in _pieces(work, [[100] * 5, [100] * 5, [100] * 5])]
    out = tmp_path / "o"
    s = ShardStream(str(out / "t-{}.rec"), 250, None, None, False, journal=work)
    s.add(dict(pieces[0]))
    s.add(dict(pieces[1]))  # 2 records per shard: shards 1-4 finished, 5 open (records 3-4 of piece 1)
    s.abort(RuntimeError("conversion failed"))
    assert sorted(os.listdir(out)) == ["t-1.rec", "t-2.rec", "t-3.rec", "t-4.rec"]
    point = shard_journal.load(work)
    assert point.shards == 4 and (point.next_piece, point.skip) == (1, 3)
    assert [p["index"] for p in point.pieces] == [0]
    assert not os.path.exists(pieces[0]["piece"])  # wholly in journaled shards: deleted
    assert os.path.exists(pieces[1]["piece"]) and os.path.exists(pieces[2]["piece"])


@settings(max_examples=25, deadline=None)
@given(layout=st.lists(st.lists(st.integers(1, 400), max_size=6), min_size=1, max_size=6),
       max_bytes=st.one_of(st.none(), st.integers(50, 900)), max_records=st.one_of(st.none(), st.integers(1, 5)),
       cut=st.integers(0, 40))
def test_a_stream_resumed_after_any_journaled_shard_writes_the_same_shards(layout, max_bytes, max_records, cut):
    from pipelines import shard_journal
    with tempfile.TemporaryDirectory() as d:
        pieces = _pieces(d, layout)
        full = _streamed(pieces, os.path.join(d, "full", "t-{}.rec"), max_bytes, max_records, False)
        work = os.path.join(d, "work")
        first = ShardStream(os.path.join(d, "o", "t-{}.rec"), max_bytes, max_records, None, False, journal=work)
        for p in pieces:
            first.add(dict(p))
        rows = first.finish()
        assert _rows(rows, os.path.join(d, "o")) == _rows(full, os.path.join(d, "full"))
        # as if killed after `cut` shards were journaled: later entries and shards never happened
        cut = min(cut, len(rows))
        for n in range(cut + 1, len(rows) + 1):
            os.remove(shard_journal.entry_url(work, n))
            os.remove(os.path.join(d, "o", f"t-{n}.rec"))
        point = shard_journal.load(work)
        assert (point is None) == (cut == 0)
        again = ShardStream(os.path.join(d, "o", "t-{}.rec"), max_bytes, max_records, None, False,
                            journal=work, resume=point)
        for p in pieces[point.next_piece if point else 0:]:
            again.add(dict(p))
        assert again.finish() == rows
        if rows:
            assert _files(os.path.join(d, "o")) == _files(os.path.join(d, "full"))
        if point is not None:
            assert [p["index"] for p in point.pieces] == list(range(len(point.pieces)))


def test_stale_temporaries_of_a_killed_run_are_found(tmp_path):
    for name in (".t-3.record.tmp-0123456789ab", ".t-3.record.idx.tmp-0123456789ab",  # ours
                 ".t-x.record.tmp-0123456789ab", ".u-3.record.tmp-0123456789ab",      # other names
                 ".t-3.record.tmp-short", "t-3.record"):
        (tmp_path / name).write_bytes(b"x")
    found = finalize.stale_temporaries(str(tmp_path / "t-{}.record"))
    assert sorted(map(os.path.basename, found)) == [".t-3.record.idx.tmp-0123456789ab",
                                                    ".t-3.record.tmp-0123456789ab"]
    assert finalize.stale_temporaries(str(tmp_path / "missing" / "t-{}.record")) == []


def _work_pieces(tmp_path, layout):
    """Pieces with sidecars in a work dir (as workers leave them), the shards the planned
    path makes of them, and the config of a streamed job writing to ``s/``."""
    from pipelines import workfiles
    work = str(tmp_path / "work")
    os.makedirs(work)
    pieces = [_info(p) for p in _pieces(work, layout)]
    for p in pieces:
        workfiles.write_sidecar(p["piece"], p, None)
    ref = _planned(pieces, str(tmp_path / "p" / "t-{}.rec"), 1000, None, False)
    cfg = ConvertConfig(sources=[], output=str(tmp_path / "s" / "t-{}.rec"), max_shard_size=1000)
    return work, pieces, ref, cfg


@pytest.mark.parametrize("first, journaled", [(4, False), (7, True)])
def test_pieces_the_stream_never_got_are_read_back_from_the_work_dir(tmp_path, first, journaled):
    """A DoFn that ran in another process fed no stream piece 1: finish_streamed reads the
    pieces from the work dir and the stream goes on with them.  A journaled stream had
    finished shards 1-2 (with 7 records in piece 0): they are kept, and the stream goes on
    from the record after them."""
    import json
    from pipelines import convert as cv, shard_stream
    work, pieces, ref, cfg = _work_pieces(tmp_path, [[300] * first, [300] * 4, [300] * 4])
    job = f"job-missing-{journaled}"
    feed = cv.start_stream(job, cfg, work=work if journaled else None)
    feed.offer(dict(pieces[0]))  # piece 1 never arrives
    feed.offer(dict(pieces[2]))
    if journaled:
        _wait_for(lambda: os.path.exists(os.path.join(work, "journal-000002.json")))
    try:
        manifest = cv.finish_streamed(job, cfg, [], [p["shard"] for p in pieces], work)
    finally:
        shard_stream.stop(job)
    assert _rows(manifest["shards"], str(tmp_path / "s")) == _rows(ref, str(tmp_path / "p"))
    shards = {n: b for n, b in _files(str(tmp_path / "s")).items() if n.startswith("t-")}
    assert shards == _files(str(tmp_path / "p"))
    t = manifest["totals"]
    assert t["records_written"] == first + 8 and t["shards_read"] == 3 and manifest["rejects"]["count"] == 0
    assert not os.path.exists(work)
    on_disk = json.loads(open(manifest["rejects"]["path"].replace(".rejects.jsonl", ".manifest.json")).read())
    assert on_disk == manifest


def test_a_piece_missing_from_stream_and_work_dir_fails_the_job(tmp_path):
    from pipelines import convert as cv, shard_stream, workfiles
    work = str(tmp_path / "work")
    os.makedirs(work)
    pieces = [_info(p) for p in _pieces(work, [[300] * 2, [300] * 2])]
    workfiles.write_sidecar(pieces[0]["piece"], pieces[0], None)  # piece 1 has none
    cfg = ConvertConfig(sources=[], output=str(tmp_path / "s" / "t-{}.rec"), max_shard_size=1000)
    feed = cv.start_stream("job-2", cfg)
    feed.offer(pieces[0])
    try:
        with pytest.raises(RuntimeError, match=r"piece of input shard 1 .* is missing"):
            cv.finish_streamed("job-2", cfg, [], [p["shard"] for p in pieces], work)
    finally:
        shard_stream.stop("job-2")
    assert not os.path.exists(str(tmp_path / "s" / "t-{}.rec.manifest.json"))


@pytest.mark.parametrize("hold", [None, 3000])  # held in memory; spilled to disk past 3 KB
def test_in_process_pieces_held_in_memory_give_the_same_shards(tmp_path, monkeypatch, hold):
    """Threads of the in-process driver hand their pieces to the stream in memory (each byte
    written once); past HOLD_BYTES a piece spills to its scratch file.  Same bytes as Beam."""
    from pipelines import local_convert, shard_convert
    from pipelines.convert import convert
    if hold is not None:
        monkeypatch.setattr(local_convert, "HOLD_BYTES", hold)
    shardgen.make_shards(str(tmp_path / "in"), 5, 4, size=(32, 32))
    src = str(tmp_path / "in" / "train-{0000..0004}.tar")
    written = []
    real = shard_convert._PieceOut._spill
    monkeypatch.setattr(shard_convert._PieceOut, "_spill", lambda self: (written.append(self.piece), real(self)))
    cfg = lambda out: ConvertConfig(sources=src, output=str(tmp_path / out / "t-{}.record"),  # noqa: E731
                                    max_shard_size="5KB", type_map={"cls": "int64"}, progress=False)
    local = convert_in_process(cfg("l"), num_workers=2)
    assert (len(written) == 5) if hold else written == []   # 5 pieces of ~6 KB each
    written.clear()
    beam = convert(cfg("b"), ["--direct_running_mode=multi_processing", "--direct_num_workers=2"])  # planned path
    assert len(local.paths) == len(beam.paths) > 3
    assert [open(p, "rb").read() for p in local.paths] == [open(p, "rb").read() for p in beam.paths]
    assert local.totals == beam.totals


def test_in_process_pieces_are_held_in_memory_with_or_without_resume(tmp_path, monkeypatch):
    """resume=True continues after the journaled final shards: pieces need not be on disk."""
    from pipelines import shard_convert
    shardgen.make_shards(str(tmp_path / "in"), 3, 4, size=(32, 32))
    holds = []
    real = shard_convert.convert_shard
    monkeypatch.setattr("pipelines.convert.convert_shard", lambda *a: (holds.append(a[5] if len(a) > 5 else 0), real(*a))[1])
    for resume in (False, True):
        res = convert_in_process(ConvertConfig(sources=str(tmp_path / "in" / "train-{0000..0002}.tar"),
                                               output=str(tmp_path / f"o{resume}" / "t-{}.record"),
                                               resume=resume, progress=False, processes=0), num_workers=2)
        assert res.exit_code == 0 and res.totals["records_written"] == 12
    assert holds == [shard_convert.HOLD_BYTES] * 6


@pytest.mark.parametrize("hold", [None, 2000])
def test_a_corrupt_shard_held_in_memory_is_dropped_whole(tmp_path, monkeypatch, hold):
    """A gzip shard whose CRC trailer fails: every record it gave is rejected, in memory or
    spilled, and the other shards are written as the planned path writes them."""
    from pipelines import local_convert
    from pipelines.convert import convert
    if hold is not None:
        monkeypatch.setattr(local_convert, "HOLD_BYTES", hold)
    d = tmp_path / "in"
    d.mkdir()
    for i in range(3):
        shardgen.write_tar(str(d / f"s-{i}.tar.gz"), shardgen.sample_members(i * 10, 10), gz=True)
    data = bytearray((d / "s-1.tar.gz").read_bytes())
    start = len(data) * 2 // 3
    data[start:start + 4096] = bytes(4096)  # deflate decodes it; the gzip CRC does not match
    (d / "s-1.tar.gz").write_bytes(bytes(data))
    cfg = lambda out: ConvertConfig(sources=str(d / "s-{0..2}.tar.gz"), output=str(tmp_path / out / "t-{}.record"),  # noqa: E731
                                    max_shard_size="3KB", max_rejects=100, progress=False)
    local = convert_in_process(cfg("l"), num_workers=2)
    beam = convert(cfg("b"), ["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    t = local.totals
    assert t == beam.totals and t["records_written"] == 20
    assert t["records_read"] == t["records_written"] + t["records_rejected"] + t["records_filtered"]
    assert [open(p, "rb").read() for p in local.paths] == [open(p, "rb").read() for p in beam.paths]


def _wait_for(cond, timeout=30.0):
    import time
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_the_feed_closes_the_last_shard_when_the_last_expected_piece_is_in(tmp_path):
    """With the job's piece count, the last shard is closed (fsync, final name) as soon as
    every piece is in, before anyone calls finish(): the runner's wind-down overlaps it."""
    from pipelines import convert as cv, shard_stream
    pieces = _pieces(str(tmp_path), [[300] * 4, [300] * 3, [300] * 4])
    ref = _planned(pieces, str(tmp_path / "p" / "t-{}.rec"), 1000, None, False)
    cfg = ConvertConfig(sources=[], output=str(tmp_path / "s" / "t-{}.rec"), max_shard_size=1000)
    feed = cv.start_stream("job-3", cfg, expect=3)
    try:
        for i in (2, 0, 1):
            feed.offer(pieces[i])
        final = sorted(os.listdir(tmp_path / "p"))
        _wait_for(lambda: os.path.isdir(tmp_path / "s") and sorted(os.listdir(tmp_path / "s")) == final)
        assert _files(str(tmp_path / "s")) == _files(str(tmp_path / "p"))  # every shard closed
        rows = feed.finish(3)
    finally:
        shard_stream.stop("job-3")
    assert _rows(rows, str(tmp_path / "s")) == _rows(ref, str(tmp_path / "p"))
    assert _files(str(tmp_path / "s")) == _files(str(tmp_path / "p"))  # kept: the job finished


def test_a_job_failing_after_its_stream_closed_leaves_no_shards(tmp_path):
    from pipelines import convert as cv, shard_stream
    pieces = _pieces(str(tmp_path), [[300] * 4, [300] * 4])
    cfg = ConvertConfig(sources=[], output=str(tmp_path / "s" / "t-{}.rec"), max_shard_size=1000)
    feed = cv.start_stream("job-4", cfg, expect=2)
    for p in pieces:
        feed.offer(p)
    _wait_for(lambda: os.path.isdir(tmp_path / "s")
              and sorted(os.listdir(tmp_path / "s")) == ["t-1.rec", "t-2.rec", "t-3.rec"])
    shard_stream.stop("job-4")  # the runner failed afterwards: finish() was never reached
    assert os.listdir(tmp_path / "s") == []


def test_one_worker_converts_on_the_calling_thread_into_the_same_bytes(tmp_path, monkeypatch):
    """num_workers=1 with a local output: the shards are converted on the caller's thread
    between writes (no converter thread), into the same shards as two threads write."""
    import threading
    from pipelines import convert as cv
    shardgen.make_shards(str(tmp_path / "in"), 4, 5, size=(32, 32))
    threads = []
    real = cv.convert_shard
    monkeypatch.setattr(cv, "convert_shard", lambda *a: (threads.append(threading.current_thread()), real(*a))[1])

    def run(out, n):
        threads.clear()
        return convert_in_process(ConvertConfig(sources=str(tmp_path / "in" / "train-{0000..0003}.tar"),
                                                output=str(tmp_path / out / "t-{}.record"), max_shard_size="6KB",
                                                progress=False, processes=0), num_workers=n)
    one = run("one", 1)
    assert threads == [threading.current_thread()] * 4
    two = run("two", 2)
    assert len(threads) == 4 and threading.current_thread() not in threads
    assert len(one.paths) == len(two.paths) > 2 and one.totals == two.totals
    assert [open(p, "rb").read() for p in one.paths] == [open(p, "rb").read() for p in two.paths]


def test_one_worker_failing_mid_job_keeps_journaled_shards_and_resumes(tmp_path, monkeypatch):
    """An error converting the third shard on the caller's thread: the job raises it, the
    shards finished before stay (journaled, final names only, no temporary file), and
    resume=True converts only what comes after them, into an uninterrupted run's bytes."""
    from pipelines import convert as cv
    shardgen.make_shards(str(tmp_path / "in"), 4, 6, size=(32, 32))
    real = cv.convert_shard
    seen = []

    def failing(*a):
        seen.append(a[0])
        if a[0] == 2:
            raise OSError("disk went away")
        return real(*a)

    def cfg(out, **kw):
        return ConvertConfig(sources=str(tmp_path / "in" / "train-{0000..0003}.tar"),
                             output=str(tmp_path / out / "t-{}.record"), max_shard_size="4KB", progress=False,
                             processes=0, **kw)
    monkeypatch.setattr(cv, "convert_shard", failing)
    with pytest.raises(OSError, match="disk went away"):
        convert_in_process(cfg("o"), num_workers=1)
    assert seen == [0, 1, 2]  # nothing converted past the failure
    kept = sorted(os.listdir(tmp_path / "o"))
    assert kept[0] == ".tar2tf-work" and len(kept) > 1
    assert all(k.startswith("t-") and k.endswith(".record") for k in kept[1:])
    monkeypatch.setattr(cv, "convert_shard", lambda *a: (seen.append(a[0]), real(*a))[1])
    seen.clear()
    res = convert_in_process(cfg("o", resume=True), num_workers=1)
    assert seen and min(seen) >= 1 and seen == sorted(seen)
    ref = convert_in_process(cfg("ref"), num_workers=1)
    assert res.totals == ref.totals and res.totals["records_written"] == 24
    assert [open(p, "rb").read() for p in res.paths] == [open(p, "rb").read() for p in ref.paths]


@pytest.mark.parametrize("processes", ["2", "0"])
def test_many_small_shards_fit_in_a_small_descriptor_limit(tmp_path, processes):
    """One input shard of 600 records, --records-per-shard 1, 256 open files (macOS's
    default): the shards waiting for worker ranges or for the closer hold no descriptor
    (EMFILE before: every waiting output shard kept its file open)."""
    import resource
    import subprocess
    import sys
    from ops_fixtures import ROOT
    shardgen.make_shards(str(tmp_path / "d"), 1, 600, size=(16, 16))

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    out = str(tmp_path / "o" / "t-{}.record")
    p = subprocess.run([sys.executable, "-m", "launch.cli", "convert", str(tmp_path / "d" / "train-0000.tar"), "-o", out,
                        "--no-progress", "--records-per-shard", "1", "--processes", processes,
                        "--ops", '{conversions: ["Resize(jpg, (8, 8))"]}'],
                       cwd=ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), capture_output=True, text=True,
                       preexec_fn=limit, timeout=300)
    assert p.returncode == 0, p.stderr[-1500:]
    assert len(os.listdir(tmp_path / "o")) == 600 + 2  # the shards, manifest and rejects
