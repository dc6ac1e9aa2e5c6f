"""The streamed dataset (``Dataset.load(template)`` without ``path``) converting in local
worker processes: ops that do real work per record, more than one worker and shard
(``Dataset.elements``, ``transforms.shard_elements``, ``Pool.elements``)."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from support import shardgen

from pipelines import Dataset
from transforms.ops import Decode, Func, Resize

TEMPLATE = "train-{0000..0003}.tar"


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """4 shards of 5 records; shard 1 has a truncated JPEG and shard 2 a text file as
    ``jpg``; record keys ending in 3 get filtered by the ops below."""
    d = str(tmp_path_factory.mktemp("stream-shards"))
    for s in range(4):
        members = []
        for i in range(5):
            data = shardgen.jpeg(10 * s + i)
            if (s, i) == (1, 2):
                data = data[:-200]
            if (s, i) == (2, 4):
                data = b"not an image"
            members += [(f"s{s}r{i}.jpg", data), (f"s{s}r{i}.cls", str(i).encode())]
        shardgen.write_tar(os.path.join(d, f"train-{s:04d}.tar"), members)
    return d


def _keep(record):
    return None if record["__key__"].endswith("3") else record


def _dataset(d, pid=False):
    conversions = [Func(_keep), Decode("jpg"), Resize("jpg", (8, 8))]
    if pid:
        conversions.append(Func(lambda r: os.getpid(), "pid"))
    return Dataset(d, conversions=conversions, selections=["jpg", "pid" if pid else "cls"])


def _counts(stats):
    return (
        stats.records_read,
        stats.records_yielded,
        stats.records_filtered,
        sorted((r.key, r.stage, r.reason) for r in stats.rejects),
    )


def test_worker_processes_give_the_threads_elements_and_counts(shards):
    from pipelines.tfdata.dataset import LoadStats

    runs = {}
    for workers in (1, 2):
        stats = LoadStats()
        got = list(_dataset(shards).elements(TEMPLATE, workers, stats=stats))
        runs[workers] = (got, _counts(stats))
    (one, c1), (two, c2) = runs[1], runs[2]
    assert len(one) == len(two) == 20 - 4 - 2  # 4 filtered, 2 rejected
    for (a, la), (b, lb) in zip(one, two):
        assert np.array_equal(a, b) and la == lb
    assert c1 == c2
    read, yielded, filtered, rejects = c2
    assert (read, yielded, filtered) == (20, 14, 4)
    assert [k for k, _, _ in rejects] == ["s1r2", "s2r4"]
    # and the two-worker run really converted elsewhere
    pids = {int(p) for _, p in _dataset(shards, pid=True).elements(TEMPLATE, 2)}
    assert os.getpid() not in pids and len(pids) == 2


def test_the_tf_dataset_streams_from_the_workers(shards):
    ds = _dataset(shards)
    got = [(v, int(l)) for v, l in ds.load(TEMPLATE, num_workers=2).as_numpy_iterator()]
    want = list(ds.elements(TEMPLATE, 1, ds.element_spec))
    assert len(got) == len(want) == 14
    assert all(np.array_equal(a, b) and la == lb for (a, la), (b, lb) in zip(got, want))
    assert ds.stats.records_read == 20 and len(ds.stats.rejects) == 2


def _gone(pid, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        if not os.path.exists(f"/proc/{pid}"):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_closing_the_stream_early_ends_its_workers(shards):
    gen = _dataset(shards, pid=True).elements(TEMPLATE, 2, prefetch=1)
    first = [next(gen) for _ in range(3)]
    pids = {int(p) for _, p in first}
    t = time.time()
    gen.close()
    assert time.time() - t < 10
    assert all(_gone(p) for p in pids)


def _die_in_worker(parent):
    def f(record):
        if os.getpid() != parent and record["__key__"] == "s2r1":
            os._exit(3)
        return record

    return f


def test_a_worker_that_dies_fails_the_stream_instead_of_hanging(shards):
    from pipelines.inprocess.pool import WorkerDied

    ds = Dataset(
        shards,
        conversions=[Func(_die_in_worker(os.getpid())), Decode("jpg")],
        selections=["jpg", "cls"],
    )
    got = []
    with pytest.raises(WorkerDied, match="exit code 3"):
        for el in ds.elements(TEMPLATE, 2):
            got.append(el)
    assert len(got) < 20


def test_an_op_that_cannot_be_pickled_streams_on_threads(shards):
    import threading

    lock = threading.Lock()  # cloudpickle cannot ship this closure to a worker

    def pid_under_lock(record):
        with lock:
            return os.getpid()

    ds = Dataset(
        shards, conversions=[Decode("jpg"), Func(pid_under_lock, "pid")], selections=["jpg", "pid"]
    )
    got = list(ds.elements(TEMPLATE, 2))
    assert len(got) == 18 and {int(p) for _, p in got} == {os.getpid()}


def test_script_ending_with_a_worker_stream_open_exits(tmp_path):
    """A script that takes one element of a stream converted in worker processes and ends:
    the stream is closed during interpreter shutdown, where no thread can start any more
    (the pool's reaper thread hung the exit for ever)."""
    import textwrap

    shardgen.make_shards(str(tmp_path / "d"), 4, 20)
    script = tmp_path / "s.py"
    script.write_text(
        textwrap.dedent(f"""
        import time
        from pipelines.tfdata.dataset import Dataset
        from transforms.ops import Decode, Func
        def slow(r):
            time.sleep(0.05)
            return r
        d = Dataset({str(tmp_path / "d")!r}, conversions=[Decode("jpg"), Func(slow)], selections=["jpg", "cls"])
        g = d.elements("train-{{0000..0003}}.tar", num_workers=2)
        next(g)
        print("ok", flush=True)
    """)
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=root, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]
