"""The in-process driver with worker processes, under faults at random points, round after
round: a worker killed by its pid, Ctrl-C (SIGINT) in the driver, an exception where a
shard's piece reaches the driver (its place in the shard stream, or the source's result),
an interrupt from the driver's own loop, or nothing.  Each round ends, within a bounded
time, with the reference run's bytes or with the fault's error; it leaves no file under a
final shard name that is not that shard's complete bytes (no half-written file), no thread
of the job and no worker process; and a rerun with ``resume=True`` writes the reference
bytes.  Both ways the workers' pieces reach the final shards are exercised: written by the
workers where the shard stream places them (a local ``{}`` output) and through piece files
(an output whose names need the shard count).

The faults' choices come from a seeded random generator (the seed is printed; set
``TAR2TF_STRESS_SEED`` to try others); their timing is the machine's, and what is asserted
holds whichever way a race goes.  Below: the same kind of stress on ``PieceFeed`` and
``ShardStream`` alone, many threads placing pieces in random order."""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import threading
import time

import pytest
from support import shardgen

from pipelines.inprocess import driver
from pipelines.inprocess import pool as shard_pool
from pipelines.inprocess.pool import WorkerDied
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from transforms.ops import Func

SEED = int(os.environ.get("TAR2TF_STRESS_SEED", "1"))
N_SHARDS = 24
PER_SHARD = 4
# a round's job ends within this, failed or not (a job that hangs is stopped by the test's
# timeout, with its stacks)
ROUND_BOUND = 90.0
# each round one of these, in a seeded order; the timed faults twice, landing elsewhere each time
KINDS = ("kill", "sigint", "raise", "driver", "none", "kill", "sigint")
WORK = ".tar2tf-work"


def _slow(record):
    """Every record some milliseconds in a worker, so that the faults land mid-job."""
    time.sleep(0.015)
    return record


def _cfg(src, out, processes, placing, **kw):
    name = "t-{}.record" if placing else "t.record"  # a '{}' template is placed
    return ConvertConfig(
        sources=src,
        output=os.path.join(out, name),
        max_shard_size="3KB",
        sample_stages=(Func(_slow),),
        progress=False,
        processes=processes,
        **kw,
    )


def _final_files(out):
    """The output directory's files but the work directory and the manifest."""
    if not os.path.isdir(out):
        return {}
    got = {}
    for name in sorted(os.listdir(out)):
        if name == WORK or name.endswith(".manifest.json"):
            continue
        with open(os.path.join(out, name), "rb") as f:
            got[name] = f.read()
    return got


def _children():
    """The pids of this process's live child processes (from /proc).  In a whole test
    session they include the servers its fixtures started (aisnode, the GCS emulator,
    Flink): a round compares them with those alive before it."""
    me, kids = os.getpid(), []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            kids.append(int(d))
    return kids


def _settle_threads(before, timeout=15.0):
    """The threads started since ``before`` that are still alive after waiting up to
    ``timeout`` for them to end."""
    end = time.monotonic() + timeout
    left = [t for t in threading.enumerate() if t not in before]
    for t in left:
        t.join(max(0.0, end - time.monotonic()))
    return [t.name for t in left if t.is_alive()]


class _Faults:
    """One round's fault (``kind``), its choices drawn from ``rng``: started and stopped
    around the job.  ``pools``: the pools the job starts (their workers are what "kill"
    kills); ``fired``: the fault happened (a timed one may come after the job ended)."""

    def __init__(self, kind, rng, pools, monkeypatch, placing):
        self.kind, self.pools = kind, pools
        self.done = threading.Event()
        self.thread = None
        self.fired = False
        self._shards_done = 0
        self._lock = threading.Lock()
        if kind in ("kill", "sigint"):
            self.delay = rng.uniform(0.05, 1.2)
            self.pick = rng.randrange(1 << 16)
            self.thread = threading.Thread(target=self._fire, daemon=True, name="stress-fault")
        if kind == "raise":
            self._raise_at(rng.randrange(N_SHARDS), monkeypatch, placing)
        if kind in ("sigint", "driver"):
            self._count_shards(
                rng.randrange(1, N_SHARDS - 2) if kind == "driver" else None, monkeypatch
            )

    def _raise_at(self, index, monkeypatch, placing):
        """Shard ``index``'s piece fails where it reaches the driver: its place in the shard
        stream (on a pool thread), or the worker's answer for it (on a converter thread)."""
        faults = self

        def fail():
            faults.fired = True
            raise RuntimeError(f"stress: shard {index} failed in the driver")

        if placing:
            from pipelines.inprocess.stream import PieceFeed

            real_place = PieceFeed.place

            def place(feed, piece):
                if piece.summary.index == index:
                    fail()
                return real_place(feed, piece)

            monkeypatch.setattr(PieceFeed, "place", place)
        else:
            from pipelines.inprocess.handle import Worker

            real_call = Worker.call

            def call(worker, i, url):
                piece = real_call(worker, i, url)
                if i == index:
                    fail()
                return piece

            monkeypatch.setattr(Worker, "call", call)

    def _count_shards(self, interrupt_at, monkeypatch):
        """Count the shards the driver's loop takes (``_in_loop``); raise KeyboardInterrupt
        there at shard ``interrupt_at`` (Ctrl-C as the loop runs), if given."""
        faults, real = self, driver.Progress

        class Counting(real):
            def shard_done(self, *a, resumed=False, **kw):
                super().shard_done(*a, resumed=resumed, **kw)
                if resumed:
                    return
                with faults._lock:
                    faults._shards_done += 1
                    n = faults._shards_done
                if n == interrupt_at:
                    faults.fired = True
                    raise KeyboardInterrupt

        monkeypatch.setattr(driver, "Progress", Counting)

    def start(self):
        if self.thread is not None:
            self.thread.start()

    def _in_loop(self):
        """The driver is in its loop with shards left (a signal then lands in it, not in
        the clean-up after it)."""
        with self._lock:
            return 1 <= self._shards_done < N_SHARDS - 3

    def _fire(self):
        if self.done.wait(self.delay):
            return
        if self.kind == "kill":
            workers = [w for p in self.pools for w in p._all if w.proc.poll() is None]
            if workers:
                self.fired = True
                os.kill(workers[self.pick % len(workers)].proc.pid, signal.SIGKILL)
            return
        while not self.done.is_set():  # sigint: only while the loop has shards left
            if self._in_loop():
                self.fired = True
                os.kill(os.getpid(), signal.SIGINT)
                return
            if self.done.wait(0.01):
                return

    def stop(self):
        self.done.set()
        if self.thread is not None:
            self.thread.join(10)
            assert not self.thread.is_alive()


def _run_round(src, out, processes, placing, kind, rng, monkeypatch):
    """One job under ``kind``: its error (None if it succeeded) and how long it took."""
    pools = []
    real_init = shard_pool.Pool.__init__

    def spy(self, *a, **kw):
        pools.append(self)
        real_init(self, *a, **kw)

    with monkeypatch.context() as m:
        m.setattr(shard_pool.Pool, "__init__", spy)
        faults = _Faults(kind, rng, pools, m, placing)
        cfg = _cfg(src, out, processes, placing)
        t0 = time.monotonic()
        error = None
        try:
            try:
                faults.start()
                driver.convert_in_process(cfg, num_workers=processes)
            finally:
                faults.stop()
        except (Exception, KeyboardInterrupt) as e:
            error = e
        took = time.monotonic() - t0
    return error, took, faults.fired


def _expected(kind, error):
    """Whether ``error`` is what the fault ``kind`` may end a job with."""
    if kind == "kill":
        return isinstance(error, WorkerDied) and "died" in str(error)
    if kind in ("sigint", "driver"):
        return isinstance(error, KeyboardInterrupt)
    if kind == "raise":
        return isinstance(error, RuntimeError) and "stress: shard" in str(error)
    return False


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("stress-in"))
    shardgen.make_shards(d, N_SHARDS, PER_SHARD, size=(24, 16))
    return os.path.join(d, "train-{0000..%04d}.tar" % (N_SHARDS - 1))


@pytest.mark.slow
@pytest.mark.timeout(300)  # a hang fails this test with its stacks, well before the suite's bound
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
@pytest.mark.parametrize("placing", [True, False], ids=["placed", "piece-files"])
def test_faults_at_random_points_leave_complete_shards_or_none(
    inputs, tmp_path, monkeypatch, placing
):
    print(f"stress seed: {SEED} (TAR2TF_STRESS_SEED=<n> tries others)")
    rng = random.Random(SEED * 2 + placing)
    ref_out = str(tmp_path / "ref")
    driver.convert_in_process(_cfg(inputs, ref_out, 2, placing), num_workers=2)
    ref = _final_files(ref_out)
    assert len(ref) >= 4  # several final shards: faults can land between them

    kinds = list(KINDS)
    rng.shuffle(kinds)
    for r, kind in enumerate(kinds):
        processes = rng.choice((2, 3))
        out = str(tmp_path / f"round-{r}")
        before = set(threading.enumerate())
        kids = set(_children())  # the session's servers, if any: not this round's
        error, took, fired = _run_round(inputs, out, processes, placing, kind, rng, monkeypatch)
        what = f"round {r}: {kind} with {processes} processes, seed {SEED}"
        print(f"{what}: {type(error).__name__ if error else 'ok'} in {took:.1f}s, fired={fired}")
        assert took < ROUND_BOUND, what
        if error is None:
            # every shard reaches the driver and its loop: these faults always come
            assert kind not in ("raise", "driver"), what
        else:
            assert _expected(kind, error), (what, repr(error))
        # nothing under a final name but complete shards: each the reference's bytes
        got = _final_files(out)
        assert set(got) <= set(ref), (what, sorted(set(got) - set(ref)))
        assert all(got[name] == ref[name] for name in got), what
        if error is None:
            assert got == ref, what
        assert not _settle_threads(before), what
        assert not set(_children()) - kids, what

        if error is not None:  # the rerun continues where the journal says, or starts over
            again = _cfg(inputs, out, processes, placing, resume=True)
            driver.convert_in_process(again, num_workers=processes)
            assert _final_files(out) == ref, what
            assert not _settle_threads(before), what
            assert not set(_children()) - kids, what


# -- the feed and the stream alone ---------------------------------------------------------


def test_many_threads_placing_in_random_order_write_the_planned_shards(tmp_path):
    """Pieces placed from many threads in a random order, each written by its thread into
    the ranges the stream reserved (as a worker process does), from memory or from its
    piece file; in some rounds one more thread stops the feed midway.  A finished feed's
    shards are the planned path's; a stopped one leaves no file, and every placing thread
    returns (it wrote its piece, or was told the feed stopped, or found its shard gone)."""
    from support.shard_stream_fixtures import _as_worker, _files, _pieces, _planned, _rows

    from pipelines.inprocess.stream import PieceFeed, ShardStream

    print(f"stress seed: {SEED}")
    rng = random.Random(SEED)
    for r in range(12):
        d = tmp_path / str(r)
        (d / "w").mkdir(parents=True)
        layout = [[rng.randrange(1, 300) for _ in range(rng.randrange(0, 6))] for _ in range(30)]
        pieces = _pieces(str(d / "w"), layout, seed=r)
        max_bytes = rng.choice([None, 400, 1500])
        ref = _planned(pieces, str(d / "p" / "t-{}.rec"), max_bytes, None, False)
        before = set(threading.enumerate())
        feed = PieceFeed(ShardStream(str(d / "s" / "t-{}.rec"), max_bytes, None), len(pieces))
        order = list(range(len(pieces)))
        rng.shuffle(order)
        stop_at = rng.randrange(len(pieces)) if r % 3 == 2 else None
        errors = []
        threads = []
        for n, i in enumerate(order):
            if n == stop_at:
                stopper = threading.Thread(
                    target=feed.abort, args=(RuntimeError("stopped by the test"),), daemon=True
                )
                stopper.start()
                threads.append(stopper)
            held = rng.random() < 0.5
            t = threading.Thread(
                target=_as_worker, args=(feed, pieces[i], held, errors), daemon=True
            )
            t.start()
            threads.append(t)
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads), r
        if stop_at is None:
            rows = feed.finish(len(pieces))
            assert not errors, (r, errors)
            assert _rows(rows, str(d / "s")) == _rows(ref, str(d / "p")), r
            if any(layout):
                assert _files(str(d / "s")) == _files(str(d / "p")), r
        else:
            assert all(isinstance(e, FileNotFoundError) or "stopped" in str(e) for e in errors), (
                r,
                errors,
            )
            assert not (d / "s").exists() or os.listdir(d / "s") == [], r
            late = dataclasses.replace(
                pieces[-1], summary=dataclasses.replace(pieces[-1].summary, index=len(pieces))
            )
            with pytest.raises(RuntimeError, match="stopped"):
                feed.place(late)  # a piece never placed before
        assert not _settle_threads(before, timeout=10), r
