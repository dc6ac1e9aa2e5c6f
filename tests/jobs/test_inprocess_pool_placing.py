"""Pool workers writing their pieces where the shard stream places them (a local ``{}``
output: ``PieceFeed.place``): the placing protocol between ``pipelines.inprocess.pool`` and
``pipelines.inprocess.worker``, and what a failing worker leaves behind."""

import glob
import os
import time

import pytest
from support import shardgen

from pipelines.inprocess.driver import convert_in_process
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from transforms.ops import Func, Resize


@pytest.fixture(scope="module")
def shards(pool_shards):
    return pool_shards


def test_a_worker_failing_to_write_its_placed_runs_fails_their_shards(shards, tmp_path):
    """The worker cannot write where its piece was placed: the call (a task the
    dispatchers were not given, as a retried bundle's) raises the worker's error, the
    shards holding the piece's ranges fail when closed (no wait for a range nobody will
    write), and the worker is ready for its next task, whose runs it writes."""
    import cloudpickle

    from pipelines.inprocess import pool as shard_pool
    from pipelines.job.kinds.tfrecord import shardfile

    cfg = ConvertConfig(
        sources=shards, output=str(tmp_path / "t-{}.record"), type_map={"cls": "int64"}
    )
    shards_out = [shardfile.ShardFile(str(tmp_path / "o" / f"t-{i}.record")) for i in (1, 2)]
    placed = []

    def place(piece):
        shard = shards_out[len(placed)]
        n = len(piece.sizes)
        runs = [(shard, shard.reserve(sum(piece.sizes), piece.sizes), 0, n)]
        if not placed:
            os.unlink(shard.local_path)  # the worker's open() will fail
        placed.append(n)
        return runs

    pool = shard_pool.Pool(cloudpickle.dumps(cfg), str(tmp_path / "work"), 1, place=place)
    try:
        url = shards.replace("{0000..0003}", "0000")
        with pytest.raises(RuntimeError, match="(?s)shard worker process.*FileNotFoundError"):
            pool.convert(0, url)
        assert placed == [6]
        with pytest.raises(RuntimeError, match="FileNotFoundError"):
            shards_out[0].close()  # cancelled: raises at once
        assert not (tmp_path / "o" / "t-1.record").exists()
        piece = pool.convert(1, url.replace("0000", "0001"))  # the worker goes on
        assert len(piece.sizes) == 6 and placed == [6, 6]
        shards_out[1].close()
        assert os.path.getsize(tmp_path / "o" / "t-2.record") == sum(piece.sizes)
    finally:
        pool.close()


def _die_while(marker, key, after=None):
    def op(record):  # in a worker process: dies on one record while the marker file exists
        if record["__key__"] == key and os.path.exists(marker):
            # once a file matches ``after`` (a journaled final shard): on a loaded machine the
            # other worker may not have finished the shards before this one yet
            deadline = time.monotonic() + 120
            while after and not glob.glob(after) and time.monotonic() < deadline:
                time.sleep(0.05)
            os._exit(3)
        return record

    return op


def test_in_process_workers_failing_keep_journaled_shards_and_resume(tmp_path):
    """A worker dying on the last input shard fails the in-process job; the final shards
    finished before it stay (journaled), and resume=True writes an uninterrupted run's bytes."""
    shardgen.make_shards(str(tmp_path / "in"), 5, 6, size=(32, 32))
    marker = tmp_path / "fail"
    marker.touch()
    journaled = str(tmp_path / "o" / ".tar2tf-work" / "*" / "journal-*.json")

    def cfg(out, **kw):
        return ConvertConfig(
            sources=str(tmp_path / "in" / "train-{0000..0004}.tar"),
            output=str(tmp_path / out / "t-{}.record"),
            max_shard_size="4KB",
            sample_stages=(Func(_die_while(str(marker), "000025", journaled)),),
            progress=False,
            processes=2,
            **kw,
        )

    with pytest.raises(Exception, match="died with exit code 3"):
        convert_in_process(cfg("o"), num_workers=2)
    kept = sorted(os.listdir(tmp_path / "o"))
    assert kept[0] == ".tar2tf-work" and len(kept) > 1
    assert all(k.startswith("t-") and k.endswith(".record") for k in kept[1:])  # no temporary file
    marker.unlink()
    res = convert_in_process(cfg("o", resume=True), num_workers=2)
    ref = convert_in_process(cfg("ref"), num_workers=2)
    assert res.totals == ref.totals and res.totals["records_written"] == 30
    assert [open(p, "rb").read() for p in res.paths] == [open(p, "rb").read() for p in ref.paths]


def test_in_process_workers_and_threads_agree_on_bad_input(tmp_path):
    """Missing shard, broken tar, truncated and oversized members, duplicates, bad labels:
    the in-process API's placing workers reject and write exactly what its threads do."""
    t1, t2 = shardgen.bad_inputs(str(tmp_path / "in"))
    res = {}
    for procs in (2, 0):
        res[procs] = convert_in_process(
            ConvertConfig(
                sources=[t1, t2],
                output=str(tmp_path / str(procs) / "x-{}.record"),
                max_member_size=4000,
                type_map={"cls": "int64"},
                max_rejects=100,
                sample_stages=(Resize("jpg", (8, 8)),),
                progress=False,
                processes=procs,
            ),
            num_workers=2,
        )
    a, b = res[2], res[0]
    assert (
        a.exit_code == b.exit_code == 0
        and a.totals == b.totals
        and a.totals["records_rejected"] > 0
    )
    t = a.totals
    assert t["records_read"] == t["records_written"] + t["records_rejected"] + t["records_filtered"]
    assert [open(p, "rb").read() for p in a.paths] == [open(p, "rb").read() for p in b.paths]
    assert open(a.rejects_path).read() == open(b.rejects_path).read()


def _log_key(log):
    def note(record):  # a closure: it reaches the worker through cloudpickle
        with open(log, "a") as f:
            f.write(os.path.basename(record["__shard__"]) + "\n")
        return record

    return note


def test_a_worker_converts_its_next_shard_while_its_piece_waits_for_its_place(shards, tmp_path):
    """A placing pool sends its worker the next shard before the runs of the piece it
    holds: here the place of piece 0 is settled only once shard 1 is converted (which a
    worker waiting for its runs would never do: the wait times out), and every piece is
    still written where it was placed, with the worker's CRCs."""
    import cloudpickle

    from pipelines.inprocess import pool as shard_pool
    from pipelines.job.kinds.tfrecord import shardfile
    from transforms.tar.sources import resolve
    from transforms.tfrecord.framing import iter_frames

    urls, _ = resolve(shards)
    log = str(tmp_path / "converted.log")
    cfg = ConvertConfig(
        sources=shards,
        output=str(tmp_path / "t-{}.record"),
        type_map={"cls": "int64"},
        sample_stages=(Func(_log_key(log)),),
        progress=False,
    )
    waited = {}
    files = {}

    def place(info):
        if info.summary.index == 0:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                got = open(log).read().split() if os.path.exists(log) else []
                if got.count(os.path.basename(urls[1])) == 6:
                    break
                time.sleep(0.01)
            waited[0] = got.count(os.path.basename(urls[1]))
        shard = files[info.summary.index] = shardfile.ShardFile(
            str(tmp_path / "o" / f"t-{info.summary.index}.record")
        )
        return [(shard, shard.reserve(sum(info.sizes), info.sizes), 0, len(info.sizes))]

    # one worker, one dispatcher: nothing else could convert shard 1 meanwhile
    pool = shard_pool.Pool(
        cloudpickle.dumps(cfg), str(tmp_path / "work"), 1, list(enumerate(urls)), place=place
    )
    try:
        infos = [pool.convert(i, url) for i, url in enumerate(urls)]
    finally:
        pool.close()
    assert waited == {0: 6}
    for info in infos:
        files[
            info.summary.index
        ].close()  # waits for the worker's CRC of its range: raises if never written
        with open(tmp_path / "o" / f"t-{info.summary.index}.record", "rb") as f:
            assert [len(p) + 16 for _, p in iter_frames(f)] == info.sizes


def _exit_in(name, marker):
    def die(record):
        if os.path.basename(record["__shard__"]) == name:
            open(marker, "w").close()
            time.sleep(0.5)
            os._exit(3)  # a crash in native code, say
        return record

    return die


@pytest.mark.parametrize("placed", ["before the crash", "after the crash"])
def test_a_worker_dying_in_its_next_shard_keeps_the_piece_it_held_if_placed(
    shards, tmp_path, placed
):
    """The worker holds piece 2 and dies converting shard 3.  Placed while the worker
    still ran, piece 2 is written at once (not after the shard being converted), so the
    crash keeps it; placed after, its shard fails when closed instead of waiting for a
    range nobody will write.  Either way no call waits forever and the pool is broken."""
    import threading

    import cloudpickle

    from pipelines.inprocess import pool as shard_pool
    from pipelines.job.kinds.tfrecord import shardfile
    from transforms.tar.sources import resolve
    from transforms.tfrecord.framing import iter_frames

    urls, _ = resolve(shards)
    marker = str(tmp_path / "converting-shard-3")
    cfg = ConvertConfig(
        sources=shards,
        output=str(tmp_path / "t-{}.record"),
        type_map={"cls": "int64"},
        sample_stages=(Func(_exit_in(os.path.basename(urls[3]), marker)),),
        progress=False,
    )
    files, pools = {}, []

    def place(info):
        if info.summary.index == 2:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not (
                os.path.exists(marker)
                if placed == "before the crash"
                else pools[0]._all[0].proc.poll() is not None
            ):
                time.sleep(0.01)
        shard = files[info.summary.index] = shardfile.ShardFile(
            str(tmp_path / "o" / f"t-{info.summary.index}.record")
        )
        return [(shard, shard.reserve(sum(info.sizes), info.sizes), 0, len(info.sizes))]

    pools.append(
        shard_pool.Pool(
            cloudpickle.dumps(cfg), str(tmp_path / "work"), 1, list(enumerate(urls)), place=place
        )
    )
    outcome = {}

    def ask():
        for i, url in list(enumerate(urls)) + [(9, urls[0])]:  # 9: not a task, needs a worker
            try:
                outcome[i] = len(pools[0].convert(i, url).sizes)
            except Exception as e:
                outcome[i] = type(e).__name__

    t = threading.Thread(target=ask, daemon=True)
    t.start()
    t.join(60)
    pools[0].close()
    assert not t.is_alive(), f"a call still waits: {outcome}"
    kept = [0, 1, 2] if placed == "before the crash" else [0, 1]
    assert outcome == {
        **{i: 6 for i in kept},
        **{i: "WorkerDied" for i in (0, 1, 2, 3, 9) if i not in kept},
    }
    for i in kept:
        files[i].close()
        with open(tmp_path / "o" / f"t-{i}.record", "rb") as f:
            assert len(list(iter_frames(f))) == 6
    if placed == "after the crash":
        with pytest.raises(RuntimeError):
            files[2].close()  # cancelled: at once, not after a wait for the dead worker
    assert sorted(os.listdir(tmp_path / "o")) == [f"t-{i}.record" for i in kept]
