"""``processes=N``: the in-process driver's shards converted in its worker processes
(pipelines.inprocess.pool; a worker that fails: test_inprocess_pool_failures.py)."""

import hashlib
import os
import time

import pytest
from support.pool_spy import pool_starts
from support.scripts import run_script_file

from pipelines.inprocess.driver import convert_in_process
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from transforms.ops import Func, Resize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _children(zombies=False):
    """Child processes of this process (from /proc), exited ones not yet reaped too if
    ``zombies``."""
    me, out = str(os.getpid()), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and (zombies or fields[0] != "Z"):
            out.append(int(pid))
    return out


@pytest.fixture(scope="module")
def shards(pool_shards):
    return pool_shards


def _files(res):
    return {
        os.path.basename(p): hashlib.sha256(open(p, "rb").read()).hexdigest() for p in res.paths
    }


def _ops(pid_dir):
    def note_pid(record):  # a closure: it reaches the workers through cloudpickle
        open(os.path.join(pid_dir, str(os.getpid())), "a").close()
        print("an op that prints")  # must not disturb the worker's replies
        os.write(1, b"native code writing to fd 1\n")
        return record

    return (Func(note_pid), Resize("jpg", (16, 16)))


def _cfg(src, out, pid_dir, **kw):
    return ConvertConfig(
        sources=src,
        output=out,
        type_map={"cls": "int64"},
        max_shard_size="20KB",
        sample_stages=_ops(pid_dir),
        progress=False,
        **kw,
    )


def test_pool_output_is_byte_identical_and_converted_in_workers(shards, tmp_path):
    pids = {}
    results = {}
    before = set(_children())  # e.g. test servers other modules started
    for mode, extra in (("threads", {"processes": 0}), ("pool", {"processes": 2}), ("auto", {})):
        pid_dir = tmp_path / f"pids-{mode}"
        pid_dir.mkdir()
        results[mode] = convert_in_process(
            _cfg(shards, str(tmp_path / mode / "t-{}.record"), str(pid_dir), **extra), num_workers=2
        )
        pids[mode] = {int(p) for p in os.listdir(pid_dir)}
    assert results["pool"].exit_code == 0 and results["pool"].totals["records_written"] == 24
    assert _files(results["pool"]) == _files(results["threads"]) == _files(results["auto"])
    assert len(results["pool"].paths) >= 2
    assert results["pool"].counters["records_written"] == 24
    assert pids["threads"] == {os.getpid()}
    assert os.getpid() not in pids["pool"] and 1 <= len(pids["pool"]) <= 2
    # automatic with two workers and heavy ops: worker processes
    assert os.getpid() not in pids["auto"]
    # the pool is reaped with its job: no child of this process is left, not even a zombie
    assert set(_children(zombies=True)) <= before


def test_in_process_api_uses_the_pool_too(shards, tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    a = convert_in_process(
        _cfg(shards, str(tmp_path / "a/t-{}.record"), str(pid_dir), processes=0), num_workers=2
    )
    own = {int(p) for p in os.listdir(pid_dir)}
    b = convert_in_process(
        _cfg(shards, str(tmp_path / "b/t-{}.record"), str(pid_dir)), num_workers=2
    )  # auto
    assert _files(a) == _files(b) and own == {os.getpid()}
    assert {int(p) for p in os.listdir(pid_dir)} - own  # the second run's workers


def test_workers_run_native_thread_pools_on_one_thread_unless_told(shards, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's choice is kept
    seen = tmp_path / "env"
    seen.mkdir()

    def note_env(record):
        with open(os.path.join(str(seen), str(os.getpid())), "w") as f:
            f.write(f"{os.environ.get('OPENBLAS_NUM_THREADS')},{os.environ.get('OMP_NUM_THREADS')}")
        return record

    res = convert_in_process(
        ConvertConfig(
            sources=shards,
            output=str(tmp_path / "t-{}.record"),
            sample_stages=(Func(note_env), Resize("jpg", (16, 16))),
            progress=False,
            processes=2,
        ),
        num_workers=2,
    )
    assert res.exit_code == 0 and res.totals["records_written"] == 24
    pids = {int(p) for p in os.listdir(seen)}
    assert pids and os.getpid() not in pids
    assert {open(os.path.join(str(seen), str(p))).read() for p in pids} == {"1,3"}
    assert "OPENBLAS_NUM_THREADS" not in os.environ  # only the workers' environment


def test_a_worker_imports_neither_the_pool_machinery_nor_parsers_it_does_not_use(shards, tmp_path):
    """A worker starts from pipelines.inprocess.worker: none of the pool's queue, futures and
    subprocess machinery, no size parser (the member limit reaches it as a number), no
    OpenSSL digest, no Beam, no TensorFlow (each import costs start-up on every job)."""
    seen = tmp_path / "mods"
    seen.mkdir()

    def note_modules(record):
        import sys

        with open(os.path.join(str(seen), str(os.getpid())), "w") as f:
            f.write("\n".join(sorted(sys.modules)))
        return record

    res = convert_in_process(
        ConvertConfig(
            sources=shards,
            output=str(tmp_path / "t-{}.record"),
            sample_stages=(Func(note_modules), Resize("jpg", (16, 16))),
            max_member_size="10MB",
            progress=False,
            processes=2,
        ),
        num_workers=2,
    )
    assert res.exit_code == 0 and res.totals["records_written"] == 24
    pids = [p for p in os.listdir(seen) if int(p) != os.getpid()]
    assert pids
    for pid in pids:
        mods = set(open(os.path.join(str(seen), pid)).read().split())
        assert {
            "pipelines.inprocess.worker",
            "pipelines.inprocess.messages",
            "pipelines.job.kinds.tfrecord.piece",
        } <= mods
        # (subprocess is not in the list: Pillow's GIF plugin imports it when Pillow registers its formats)
        unwanted = {
            "pipelines.inprocess.pool",
            "pipelines.inprocess.handle",
            "concurrent.futures",
            "queue",
            "humanfriendly",
            "hashlib",
            "apache_beam",
            "tensorflow",
        }
        assert mods & unwanted == set(), pid


def test_in_process_api_keeps_unpicklable_ops_on_threads(shards, tmp_path):
    import threading

    lock = threading.Lock()  # cannot be pickled: the op cannot travel to a worker

    def locked(record):
        with lock:
            return record

    res = convert_in_process(
        ConvertConfig(
            sources=shards,
            output=str(tmp_path / "t-{}.record"),
            sample_stages=(Func(locked),),
            progress=False,
        ),
        num_workers=2,
    )
    assert res.exit_code == 0 and res.totals["records_written"] == 24


def test_a_script_without_main_guard_can_use_the_pool(shards, tmp_path):
    """Workers are not started through multiprocessing's spawn, which would re-run it."""
    p = run_script_file(
        tmp_path,
        "from pipelines.job.kinds.tfrecord.config import ConvertConfig\n"
        "from pipelines.inprocess.driver import convert_in_process\n"
        f"res = convert_in_process(ConvertConfig(sources={shards!r}, output={str(tmp_path / 'o' / 't-{{}}.record')!r}, "
        "progress=False, processes=2), num_workers=2)\n"
        "print('WRITTEN', res.totals['records_written'])\n",
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.count("WRITTEN 24") == 1


def test_the_pool_converts_its_tasks_in_order_whoever_asks(shards, tmp_path):
    """Given the job's tasks, the dispatchers convert them all, in input order, whatever
    order (or whether) the caller's threads ask: Beam's fixed per-thread bundles no longer
    decide which worker idles."""
    import cloudpickle

    from pipelines.inprocess import pool as shard_pool
    from transforms.tar.sources import resolve

    urls, _ = resolve(shards)
    work = str(tmp_path / "work")
    cfg = ConvertConfig(
        sources=shards,
        output=str(tmp_path / "t-{}.record"),
        type_map={"cls": "int64"},
        sample_stages=(Resize("jpg", (16, 16)),),
        progress=False,
    )
    started = []
    real_run = shard_pool.Pool._run

    def run(self, index, url):
        started.append(index)
        return real_run(self, index, url)

    pool = shard_pool.Pool.__new__(shard_pool.Pool)
    pool._run = run.__get__(pool)
    # one worker, so one dispatcher: the start order is exact (two would race to append)
    pool.__init__(cloudpickle.dumps(cfg), work, 1, list(enumerate(urls)))
    try:
        asked = {i: pool.convert(i, urls[i]) for i in (2, 1, 0)}
        # the last shard, not asked for yet, is converted all the same
        deadline = time.time() + 120
        while _pieces(work) < len(urls) and time.time() < deadline:
            time.sleep(0.05)
        assert _pieces(work) == len(urls)
        asked[3] = pool.convert(3, urls[3])
    finally:
        pool.close()
    assert started == [0, 1, 2, 3]  # each converted once, in input order
    for i, url in enumerate(urls):
        info = asked[i]
        assert info.summary.index == i and info.summary.shard == url and len(info.sizes) == 6
        assert os.path.getsize(info.summary.piece) == sum(info.sizes)


def _pieces(work) -> int:
    return sum(f.endswith(".tfrecord") for f in os.listdir(work)) if os.path.isdir(work) else 0


def test_closing_the_pool_stops_its_dispatchers(shards, tmp_path):
    import threading

    import cloudpickle

    from pipelines.inprocess import pool as shard_pool
    from transforms.tar.sources import resolve

    def slow(record):  # a closure (reaches the worker through cloudpickle): ~0.1 s a shard
        time.sleep(0.02)
        return record

    urls, _ = resolve(shards)
    cfg = ConvertConfig(
        sources=shards,
        output=str(tmp_path / "t-{}.record"),
        progress=False,
        sample_stages=(Func(slow),),
    )
    work = str(tmp_path / "work")
    before = set(_children())
    pool = shard_pool.Pool(cloudpickle.dumps(cfg), work, 1, list(enumerate(urls * 50)))
    # close only once the pool really converts: a worker slow to start has no piece yet,
    # and closing then would pass however close() behaved
    deadline = time.monotonic() + 120
    while _pieces(work) == 0:
        assert time.monotonic() < deadline, "the pool converted nothing in 120 s"
        time.sleep(0.01)
    started = _pieces(work)
    pool.close()  # returns once its workers are reaped: nothing converts after it
    left = _pieces(work)
    # the pieces done before close, the one in flight (and at most one taken meanwhile): not 200
    assert started <= left <= started + 2 and left < 50
    assert set(_children(zombies=True)) <= before  # the worker is reaped, not just killed
    deadline = time.monotonic() + 60
    while any(t.name.startswith("tar2tf-dispatch-") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "a dispatcher thread outlived close() by 60 s"
        time.sleep(0.01)
    assert _pieces(work) == left
    with pytest.raises(Exception):  # noqa: B017 - cancelled or refused: nobody converts it any more
        pool.convert(150, urls[2])


def test_in_process_workers_write_into_the_final_shards(shards, tmp_path, monkeypatch):
    """The in-process API with worker processes and a local ``{}`` output: the workers
    write their frames where the stream places them; this process
    neither copies a piece file nor writes a frame, and the bytes are the threads' bytes."""
    from pipelines.job.kinds.tfrecord import shardfile

    calls = {"copy": 0, "write": 0, "reserve": 0}
    for name in calls:
        real = getattr(shardfile.ShardFile, name)
        monkeypatch.setattr(
            shardfile.ShardFile,
            name,
            lambda self, *a, _n=name, _r=real: (calls.__setitem__(_n, calls[_n] + 1), _r(self, *a))[
                1
            ],
        )
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    # 5 records per shard: pieces of 6 records cross the shard boundaries
    placed = convert_in_process(
        _cfg(
            shards, str(tmp_path / "w/t-{}.record"), str(pid_dir), processes=2, records_per_shard=5
        ),
        num_workers=2,
    )
    assert calls["copy"] == calls["write"] == 0 and calls["reserve"] >= 4
    assert os.getpid() not in {int(p) for p in os.listdir(pid_dir)}
    threads = convert_in_process(
        _cfg(
            shards, str(tmp_path / "t/t-{}.record"), str(pid_dir), processes=0, records_per_shard=5
        ),
        num_workers=2,
    )
    assert calls["copy"] + calls["write"] > 0  # the threads' path writes from this process
    assert (
        len(placed.paths) == 5
        and _files(placed) == _files(threads)
        and placed.totals == threads.totals
    )
    assert placed.manifest["shards"] == [
        dict(s, path=s["path"].replace("/t/", "/w/")) for s in threads.manifest["shards"]
    ]


def test_in_process_light_job_to_local_shards_takes_workers_when_asked_for_two(
    shards, tmp_path, monkeypatch
):
    """A passthrough (no ops) with ``num_workers=2``: to a local ``{}`` output the workers
    write their frames into the final shards, so it gets worker processes; to a list
    output (frames pass through this process) or with one worker it stays in this
    process.  The bytes are the same every way."""
    from pipelines.inprocess import driver as local_convert
    from pipelines.inprocess import pool as shard_pool

    started = pool_starts(monkeypatch)

    def run(out, workers):
        started.clear()
        res = convert_in_process(
            ConvertConfig(
                sources=shards, output=str(tmp_path / out), max_shard_size="20KB", progress=False
            ),
            num_workers=workers,
        )
        assert res.exit_code == 0 and res.totals["records_written"] == 24
        return list(started), [open(p, "rb").read() for p in res.paths]

    placed, a = run("p/t-{}.record", 2)
    one, b = run("o/t-{}.record", 1)
    listed, _ = run("l/t.record", 2)
    assert placed == [2] and one == [] and listed == [] and a == b
    assert local_convert.shard_pool is shard_pool


def test_a_resumed_light_job_with_one_shard_left_stays_in_this_process(tmp_path, monkeypatch):
    """The worker count follows the input shards left after the journal: a job
    stopped (Ctrl-C) while closing its last shard, rerun with resume=True and two workers,
    converts the one shard left here, without starting worker processes."""
    import dataclasses

    from support import shardgen

    from pipelines.inprocess import stream as shard_stream

    shardgen.make_shards(str(tmp_path / "in"), 3, 6, size=(16, 16))
    cfg = ConvertConfig(
        sources=str(tmp_path / "in" / "train-{0000..0002}.tar"),
        output=str(tmp_path / "o" / "t-{}.record"),
        records_per_shard=6,
        progress=False,
    )

    def interrupted(self):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(shard_stream.ShardStream, "finish", interrupted)
        with pytest.raises(KeyboardInterrupt):
            convert_in_process(cfg, num_workers=1)
    assert sorted(f for f in os.listdir(tmp_path / "o") if f.endswith(".record")) == [
        "t-1.record",
        "t-2.record",
    ]
    started = pool_starts(monkeypatch)
    res = convert_in_process(dataclasses.replace(cfg, resume=True), num_workers=2)
    assert res.exit_code == 0 and res.totals["records_written"] == 18 and len(res.paths) == 3
    assert started == []
