"""Whole in-process jobs (``convert_in_process``, the CLI) through the shard stream: a
failed job keeps its journaled shards and resumes after them, pieces handed over in
memory (or spilled), one worker on the calling thread, many small shards under a small
descriptor limit.  The stream itself: test_inprocess_stream."""

import dataclasses
import glob
import os
import time

import pytest
from support import shardgen

from pipelines.inprocess.driver import convert_in_process
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from pipelines.job.lifecycle import work_dir_for
from pipelines.job.refused import OutputExistsError
from transforms.ops import Func


def _crash_in_last_shard(record):
    out = os.environ.get("TAR2TF_TEST_CRASH")
    if record["__key__"] == "000022" and out:
        # a worker converts its next shard while the piece it finished waits for its
        # place, so a crash at once could come before the earlier pieces are placed and
        # written: crash once the stream has journaled a final shard (waiting for the
        # journal itself, not for a fixed time, which a loaded machine may not honour)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not glob.glob(
            os.path.join(out, ".tar2tf-work", "*", "journal-*.json")
        ):
            time.sleep(0.01)
        os._exit(5)
    return record


def test_a_failed_job_keeps_its_finished_shards_and_resume_continues_after_them(
    tmp_path, monkeypatch
):
    """A job that fails keeps the shards its stream finished (journaled), and nothing else
    under a final name; a rerun without resume refuses to touch them, and with resume=True
    converts only what comes after them, into the same bytes as an uninterrupted run."""
    from pipelines.inprocess import journal as shard_journal
    from pipelines.job.kinds.tfrecord import kind as cv

    shardgen.make_shards(str(tmp_path), 4, 6, size=(32, 32))

    def cfg(out, processes=2, **kw):
        return ConvertConfig(
            sources=str(tmp_path / "train-{0000..0003}.tar"),
            output=str(tmp_path / out / "t-{}.record"),
            max_shard_size="4KB",
            sample_stages=(Func(_crash_in_last_shard),),
            progress=False,
            processes=processes,
            **kw,
        )

    monkeypatch.setenv("TAR2TF_TEST_CRASH", str(tmp_path / "o"))
    with pytest.raises(Exception, match="died with exit code 5"):
        convert_in_process(cfg("o"), num_workers=2)
    monkeypatch.delenv("TAR2TF_TEST_CRASH")
    kept = sorted(os.listdir(tmp_path / "o"))
    work = work_dir_for(cfg("o"), [str(tmp_path / f"train-{i:04d}.tar") for i in range(4)])
    point = shard_journal.load(work)
    assert point is not None and 0 < point.next_piece < 4
    on_disk = {i for i in range(4) if os.path.exists(os.path.join(work, f"piece-{i:06d}.json"))}
    assert 3 not in on_disk and not on_disk & {p.index for p in point.pieces}
    assert kept == [".tar2tf-work"] + [
        f"t-{i + 1}.record" for i in range(point.shards)
    ]  # no temp file, no manifest
    with pytest.raises(OutputExistsError, match="resume=True to continue it"):
        convert_in_process(cfg("o"), num_workers=2)

    converted = []
    real = cv.convert_to_piece
    monkeypatch.setattr(cv, "convert_to_piece", lambda *a: (converted.append(a[0]), real(*a))[1])
    res = convert_in_process(cfg("o", processes=0, resume=True), num_workers=2)
    assert sorted(converted) == sorted(
        set(range(point.next_piece, 4)) - on_disk
    )  # nothing journaled is redone
    ref = convert_in_process(cfg("ref"), num_workers=2)
    assert (
        res.totals == ref.totals
        and res.totals["records_written"] == 24
        and len(res.paths) > point.shards
    )
    assert [open(p, "rb").read() for p in res.paths] == [open(p, "rb").read() for p in ref.paths]
    assert res.manifest["shards"] == [
        dict(r, path=r["path"].replace("/ref/", "/o/")) for r in ref.manifest["shards"]
    ]


@pytest.mark.parametrize("hold", [None, 3000])  # held in memory; spilled to disk past 3 KB
@pytest.mark.slow
def test_in_process_pieces_held_in_memory_give_the_same_shards(tmp_path, monkeypatch, hold):
    """Threads of the in-process driver hand their pieces to the stream in memory (each byte
    written once); past HOLD_BYTES a piece spills to its scratch file.  Same bytes as Beam."""
    from pipelines.beam.convert import convert
    from pipelines.inprocess import driver as local_convert
    from pipelines.job.kinds.tfrecord import piece as shard_convert

    if hold is not None:
        monkeypatch.setattr(local_convert, "HOLD_BYTES", hold)
    shardgen.make_shards(str(tmp_path / "in"), 5, 4, size=(32, 32))
    src = str(tmp_path / "in" / "train-{0000..0004}.tar")
    written = []
    real = shard_convert._PieceOut._spill
    monkeypatch.setattr(
        shard_convert._PieceOut, "_spill", lambda self: (written.append(self.piece), real(self))
    )
    cfg = lambda out: ConvertConfig(
        sources=src,
        output=str(tmp_path / out / "t-{}.record"),
        max_shard_size="5KB",
        type_map={"cls": "int64"},
        progress=False,
    )
    # on the driver's threads (a local '{}' output would otherwise get worker processes)
    local = convert_in_process(dataclasses.replace(cfg("l"), processes=0), num_workers=2)
    assert (len(written) == 5) if hold else written == []  # 5 pieces of ~6 KB each
    written.clear()
    beam = convert(
        cfg("b"), ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    )  # planned path
    assert len(local.paths) == len(beam.paths) > 3
    assert [open(p, "rb").read() for p in local.paths] == [open(p, "rb").read() for p in beam.paths]
    assert local.totals == beam.totals


def test_in_process_pieces_are_held_in_memory_with_or_without_resume(tmp_path, monkeypatch):
    """resume=True continues after the journaled final shards: pieces need not be on disk."""
    from pipelines.inprocess import driver as local_convert
    from pipelines.job.kinds.tfrecord import piece as shard_convert

    shardgen.make_shards(str(tmp_path / "in"), 3, 4, size=(32, 32))
    holds = []
    real = shard_convert.convert_to_piece
    monkeypatch.setattr(
        "pipelines.job.kinds.tfrecord.kind.convert_to_piece",
        lambda *a: (holds.append(a[5] if len(a) > 5 else 0), real(*a))[1],
    )
    for resume in (False, True):
        res = convert_in_process(
            ConvertConfig(
                sources=str(tmp_path / "in" / "train-{0000..0002}.tar"),
                output=str(tmp_path / f"o{resume}" / "t-{}.record"),
                resume=resume,
                progress=False,
                processes=0,
            ),
            num_workers=2,
        )
        assert res.exit_code == 0 and res.totals["records_written"] == 12
    assert holds == [local_convert.HOLD_BYTES] * 6


@pytest.mark.parametrize("hold", [None, 2000])
@pytest.mark.slow
def test_a_corrupt_shard_held_in_memory_is_dropped_whole(tmp_path, monkeypatch, hold):
    """A gzip shard whose CRC trailer fails: every record it gave is rejected, in memory or
    spilled, and the other shards are written as the planned path writes them."""
    from pipelines.beam.convert import convert
    from pipelines.inprocess import driver as local_convert

    if hold is not None:
        monkeypatch.setattr(local_convert, "HOLD_BYTES", hold)
    d = tmp_path / "in"
    d.mkdir()
    for i in range(3):
        shardgen.write_tar(str(d / f"s-{i}.tar.gz"), shardgen.sample_members(i * 10, 10), gz=True)
    data = bytearray((d / "s-1.tar.gz").read_bytes())
    start = len(data) * 2 // 3
    data[start : start + 4096] = bytes(4096)  # deflate decodes it; the gzip CRC does not match
    (d / "s-1.tar.gz").write_bytes(bytes(data))
    cfg = lambda out: ConvertConfig(
        sources=str(d / "s-{0..2}.tar.gz"),
        output=str(tmp_path / out / "t-{}.record"),
        max_shard_size="3KB",
        max_rejects=100,
        progress=False,
    )
    local = convert_in_process(cfg("l"), num_workers=2)
    beam = convert(cfg("b"), ["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    t = local.totals
    assert t == beam.totals and t["records_written"] == 20
    assert t["records_read"] == t["records_written"] + t["records_rejected"] + t["records_filtered"]
    assert [open(p, "rb").read() for p in local.paths] == [open(p, "rb").read() for p in beam.paths]


def test_one_worker_converts_on_the_calling_thread_into_the_same_bytes(tmp_path, monkeypatch):
    """num_workers=1 with a local output: the shards are converted on the caller's thread
    between writes (no converter thread), into the same shards as two threads write."""
    import threading

    from pipelines.job.kinds.tfrecord import kind as cv

    shardgen.make_shards(str(tmp_path / "in"), 4, 5, size=(32, 32))
    threads = []
    real = cv.convert_to_piece
    monkeypatch.setattr(
        cv, "convert_to_piece", lambda *a: (threads.append(threading.current_thread()), real(*a))[1]
    )

    def run(out, n):
        threads.clear()
        return convert_in_process(
            ConvertConfig(
                sources=str(tmp_path / "in" / "train-{0000..0003}.tar"),
                output=str(tmp_path / out / "t-{}.record"),
                max_shard_size="6KB",
                progress=False,
                processes=0,
            ),
            num_workers=n,
        )

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
    from pipelines.job.kinds.tfrecord import kind as cv

    shardgen.make_shards(str(tmp_path / "in"), 4, 6, size=(32, 32))
    real = cv.convert_to_piece
    seen = []

    def failing(*a):
        seen.append(a[0])
        if a[0] == 2:
            raise OSError("disk went away")
        return real(*a)

    def cfg(out, **kw):
        return ConvertConfig(
            sources=str(tmp_path / "in" / "train-{0000..0003}.tar"),
            output=str(tmp_path / out / "t-{}.record"),
            max_shard_size="4KB",
            progress=False,
            processes=0,
            **kw,
        )

    monkeypatch.setattr(cv, "convert_to_piece", failing)
    with pytest.raises(OSError, match="disk went away"):
        convert_in_process(cfg("o"), num_workers=1)
    assert seen == [0, 1, 2]  # nothing converted past the failure
    kept = sorted(os.listdir(tmp_path / "o"))
    assert kept[0] == ".tar2tf-work" and len(kept) > 1
    assert all(k.startswith("t-") and k.endswith(".record") for k in kept[1:])
    monkeypatch.setattr(cv, "convert_to_piece", lambda *a: (seen.append(a[0]), real(*a))[1])
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

    from support.cli_fixtures import ROOT

    shardgen.make_shards(str(tmp_path / "d"), 1, 600, size=(16, 16))

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    out = str(tmp_path / "o" / "t-{}.record")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.cli",
            "convert",
            str(tmp_path / "d" / "train-0000.tar"),
            "-o",
            out,
            "--no-progress",
            "--records-per-shard",
            "1",
            "--processes",
            processes,
            "--ops",
            '{conversions: ["Resize(jpg, (8, 8))"]}',
        ],
        cwd=ROOT,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        capture_output=True,
        text=True,
        preexec_fn=limit,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-1500:]
    assert len(os.listdir(tmp_path / "o")) == 600 + 2  # the shards, manifest and rejects


@pytest.mark.parametrize("workers", [1, 2])
def test_a_written_piece_holds_no_memory_while_later_pieces_convert(tmp_path, monkeypatch, workers):
    """The summary is all the driver keeps of a piece once the stream wrote it: the frames
    and sizes it held for the stream are freed before the next piece is written."""
    import gc
    import weakref

    from pipelines.inprocess import stream as shard_stream
    from pipelines.job.kinds.tfrecord import kind as cv

    shardgen.make_shards(str(tmp_path / "in"), 6, 5, size=(32, 32))
    made = []
    real = cv.convert_to_piece

    def convert(*a):
        piece = real(*a)
        assert piece.frames  # held in memory: what must not outlive its write
        made.append(weakref.ref(piece))
        return piece

    monkeypatch.setattr(cv, "convert_to_piece", convert)
    alive = []
    real_add = shard_stream.ShardStream.add

    def add(self, piece, place=None):
        gc.collect()
        alive.append(sum(1 for r in made if r() is not None and r() is not piece and
                         r().summary.index < piece.summary.index))  # fmt: skip
        return real_add(self, piece, place)

    monkeypatch.setattr(shard_stream.ShardStream, "add", add)
    res = convert_in_process(
        ConvertConfig(
            sources=str(tmp_path / "in" / "train-{0000..0005}.tar"),
            output=str(tmp_path / "o" / "t-{}.record"),
            max_shard_size="6KB",
            progress=False,
            processes=0,
        ),
        num_workers=workers,
    )
    assert res.ok and len(made) == 6
    assert alive == [0] * 6
