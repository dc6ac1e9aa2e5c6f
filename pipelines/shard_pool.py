"""Convert input shards in local worker processes (``processes=N`` / ``--processes N``).

Beam's local runner runs DoFns on threads of one process.  Pillow, zlib and hashlib release
the GIL, but everything between those calls (tar headers, Pillow's Python plugins, Example
building) holds it, and on 2 cores the threads of a decode-heavy job lose about a fifth of
their throughput to one another (docs/benchmarks.md).  With a pool, each ``ConvertShard``
call hands its whole shard to a worker process and waits: Beam only schedules (on one
thread, in ``in_memory`` mode, where it only collects: ``options.collecting_args``), the
workers convert.  The output is the same bytes.  Where this process's shard stream
places the pieces (a local ``{}`` output), each worker writes its piece's frames straight
into the final shards, at the offsets the stream assigns (``place``; the worker protocol
is in :mod:`pipelines.shard_worker`), so every byte is written once; otherwise each
worker writes a piece file that the shards are copied from.

* The pool belongs to the job that :func:`started <start>` it, in that process: a DoFn
  that runs elsewhere (Flink, Dataflow, Beam's ``multi_processing`` workers) finds no
  pool for its job and converts in its own thread; remote runners parallelize with
  their own worker processes.
* Workers are plain ``python -c`` subprocesses that import :mod:`pipelines.shard_worker`
  and :mod:`pipelines.shard_convert` only (no Beam, no TensorFlow, not even this module's
  queue, futures and subprocess machinery: ~0.1 s, in parallel, while Beam builds its graph).  They
  are not started through :mod:`multiprocessing`, whose spawn re-runs the caller's main
  script in every child (a script calling ``convert()`` without an
  ``if __name__ == "__main__"`` guard would start jobs recursively).
* Given the job's task list, the pool converts the shards in input order on its own
  threads as soon as it starts, whichever Beam thread later asks for which shard (see
  :class:`Pool`).
* Each worker gets the job's :class:`ConvertConfig` once, pickled with cloudpickle as
  Beam ships DoFns (user ops and lambdas travel as they do to a Beam worker), then
  ``(index, url)`` tasks on stdin; it answers each with the piece's info on stdout.
* The streamed ``tf.data.Dataset`` of ``Dataset.load(template)`` borrows a worker per
  shard too (:meth:`Pool.elements`): the worker sends the shard's elements back in chunks
  and converts the next chunk while the caller takes these.
* An exception inside the conversion is raised in the DoFn (with the worker's traceback
  in its message); a worker that dies (a crash in native code) fails the job with
  :class:`WorkerDied`, and every later call on the pool with it.  Workers exit when
  their stdin closes, so they never outlive a killed parent for long.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import pickle
import queue
import subprocess
import sys
import threading
from concurrent.futures import Future
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from pipelines.job_objects import JobObjects

_BOOT = "from pipelines.shard_worker import serve; serve()"

# Native thread pools a worker does not need: the pool already runs one worker per core,
# and numpy's OpenBLAS starts a thread per core at import (~0.08 s of CPU per worker, taken
# from the other workers).  A value the user set is kept.
_ONE_THREAD = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def worker_env() -> Dict[str, str]:
    """The environment of a worker process: this one's, with :data:`_ONE_THREAD` = 1
    unless set, and this process's import path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    for name in _ONE_THREAD:
        env.setdefault(name, "1")
    return env


class WorkerDied(RuntimeError):
    """A shard worker process ended without answering."""


def _failed(url: str, trace: str) -> RuntimeError:
    """A conversion that raised in a worker (``trace``: its traceback there)."""
    return RuntimeError(f"converting {url} failed in a shard worker process:\n{trace}")


def _cancel(runs: list, exc: BaseException) -> None:
    """Ranges that will never be written: their shards fail (a retried bundle would find
    the piece placed already)."""
    for shard, _, _, _ in runs:
        shard.cancel(exc)


class _Worker:
    def __init__(self, blob: bytes, work: str):
        self.proc = subprocess.Popen([sys.executable, "-c", _BOOT], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=worker_env())
        try:
            self._send((blob, work))
        except OSError:  # it died at start-up (its traceback is on stderr): the first call says so
            pass

    def _send(self, obj: Any) -> None:
        pickle.dump(obj, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.flush()

    def call(self, index: int, url: str) -> Dict[str, Any]:
        """Convert one shard into a piece file (a placing pool's conversation, where the
        worker writes into the final shards, is :meth:`Pool._pipeline`'s); the worker's
        error raises here."""
        self._post((index, url, False), f"converting {url}")
        status, value = self._recv(f"converting {url}")
        if status == "error":
            raise _failed(url, value)
        return value

    def _send_runs(self, info: Dict[str, Any], place: Callable, url: str) -> Tuple[list, Optional[BaseException]]:
        """Wait for ``place`` to settle where the piece the worker holds goes, and send the
        worker its runs (none if ``place`` raised: the worker drops the piece); the runs,
        and what ``place`` raised.  The worker's answer is :meth:`_written`'s."""
        try:
            runs, error = place(info) or [], None
        except BaseException as e:  # noqa: BLE001 - raised by _written
            runs, error = [], e
        try:
            self._post([(shard.local_path, offset, lo, hi) for shard, offset, lo, hi in runs], f"converting {url}")
        except BaseException as e:
            _cancel(runs, e)
            raise
        return runs, error

    def _written(self, url: str, runs: list, error: Optional[BaseException], reply: Tuple[str, Any]) -> None:
        """The worker's answer (``reply``) to :meth:`_send_runs`: each run reported to its
        shard."""
        try:
            status, value = reply
            if status == "write-error":
                raise RuntimeError(f"writing the piece of {url} failed in a shard worker process:\n{value}")
        except BaseException as e:
            _cancel(runs, e)
            raise
        if error is not None:
            raise error
        for (shard, offset, _, _), crc in zip(runs, value):
            shard.filled(offset, crc)

    def _died(self, doing: str, e: BaseException) -> WorkerDied:
        code = self.proc.wait()
        return WorkerDied(f"shard worker process (pid {self.proc.pid}) died with exit code {code} "
                          f"while {doing} ({e.__class__.__name__})")

    def _post(self, message: Any, doing: str) -> None:
        """Send a message; a worker that is gone raises :class:`WorkerDied` (``doing``:
        what it was doing, for the message)."""
        try:
            self._send(message)
        except OSError as e:  # BrokenPipeError included
            raise self._died(doing, e) from None

    def _recv(self, doing: str) -> Any:
        try:
            return pickle.load(self.proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError) as e:
            raise self._died(doing, e) from None

    def elements(self, url: str, note: Callable, chunk: int) -> Iterator[Any]:
        """The elements of one shard for the streamed dataset (``pipelines.shard_elements``;
        the protocol is in ``pipelines.shard_worker``), ``chunk`` per message; the worker
        converts the next chunk while these are consumed.  ``note(what, reject)`` gets the
        worker's counts.  Closing the generator early stops the worker's shard."""
        doing = f"streaming {url}"
        self._post(("elements", url, chunk), doing)
        settled = False  # the worker has finished the task (end, error, or dead)
        try:
            while True:
                kind, value, notes = self._recv(doing)
                for n in notes:
                    note(*n)
                if kind == "error":
                    settled = True
                    raise RuntimeError(f"streaming {url} failed in a shard worker process:\n{value}")
                if kind == "end":
                    settled = True
                    yield from value
                    return
                self._post("next", doing)
                yield from value
        except WorkerDied:
            settled = True
            raise
        finally:
            if not settled:  # the consumer stopped early: end the worker's task, keep the worker
                self._stop_streaming(doing, note)

    def _stop_streaming(self, doing: str, note: Callable) -> None:
        try:
            while True:
                kind, _, notes = self._recv(doing)
                for n in notes:
                    note(*n)
                if kind != "items":
                    return
                self._post("stop", doing)
        except WorkerDied:
            pass  # the pool finds out at the worker's next task

    def end_input(self) -> None:
        """Ask the worker to exit (it does when its stdin closes)."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def reap(self) -> None:
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class Pool:
    """``n`` workers for the job whose pickled config is ``blob``; :meth:`convert` borrows
    an idle one for one shard.

    ``tasks``: the ``(index, url)`` tasks the caller will ask for.  ``n`` dispatcher
    threads convert them in that order, from the start (while Beam still builds its
    graph), each on the next idle worker, and :meth:`convert` returns a task's result when
    asked.  The local runner hands each of its threads a fixed share of the shards (one
    bundle per thread); converting in task order instead keeps every worker busy until the
    last shard, and the pieces come in the order the shard stream writes them.
    ``on_done(info)`` is called with every piece a worker finishes, as soon as it is
    ready (the job's shard stream and progress bar: ``pipelines.convert.piece_done``).
    ``place`` (``PieceFeed.place``): the workers write their pieces into the final shards
    where it puts them; a piece then waits for its predecessors to be placed (its worker
    converts its next shard meanwhile: :meth:`_pipeline`), so such a pool must be given
    every task (converting in input order, no piece can wait for one nobody converts)."""

    def __init__(self, blob: bytes, work: str, n: int, tasks: Sequence[Tuple[int, str]] = (),
                 on_done: Optional[Callable[[Dict[str, Any]], None]] = None,
                 place: Optional[Callable] = None):
        self._all: List[_Worker] = []
        self._idle: "queue.Queue[Optional[_Worker]]" = queue.Queue()  # None: broken
        self._broken: Optional[WorkerDied] = None
        for _ in range(int(n)):
            w = _Worker(blob, work)
            self._all.append(w)
            self._idle.put(w)
        self._lock = threading.Lock()
        self._futures: Dict[int, Future] = {index: Future() for index, _ in tasks}
        self._todo = collections.deque((index, url, self._futures[index]) for index, url in tasks)
        self._on_done = on_done
        self._place = place
        self._closed = False
        for i in range(min(int(n), len(self._todo))):
            threading.Thread(target=self._dispatch, daemon=True, name=f"tar2tf-dispatch-{i}").start()

    @property
    def places(self) -> bool:
        """Whether the workers write their pieces where the shard stream places them."""
        return self._place is not None

    def _next_task(self) -> Optional[Tuple[int, str, Future]]:
        """The next task in input order, marked running; None when there is none left."""
        while True:
            with self._lock:
                if self._closed or not self._todo:
                    return None
                task = self._todo.popleft()
            if task[2].set_running_or_notify_cancel():
                return task  # else: the pool closed meanwhile

    def _dispatch(self) -> None:
        task = self._next_task()
        if task is not None and self._place is not None:
            self._pipeline(task)
            task = self._next_task()  # left only if a worker died: they fail (broken pool)
        while task is not None:
            index, url, fut = task
            try:
                info = self._run(index, url)
            except BaseException as e:  # noqa: BLE001 - raised to whoever asks for this shard
                fut.set_exception(e)
            else:
                fut.set_result(info)
            task = self._next_task()

    def _pipeline(self, task: Tuple[int, str, Future], more: bool = True) -> None:
        """A placing pool's conversation with one worker, for ``task`` and (``more``) the
        next tasks in input order: the dispatchers' loop, and :meth:`_run`'s for one task.
        The worker gets its next task before the runs of the piece it holds, so it
        converts while the stream settles where that piece goes (the stream places a
        piece once every piece before it is sized; a worker that waited for that idled up
        to 0.3 s of a 6 s resize224 job).  The worker writes the runs as soon as they
        come, so the two answers (the next piece sized, the held one written) come in
        either order; it holds at most two pieces."""
        held: Optional[Tuple[str, Future, Dict[str, Any]]] = None  # sized, runs not sent yet
        sent: Optional[Tuple[list, Optional[BaseException]]] = None  # held's runs, not answered
        taken: List[Future] = [task[2]]  # the tasks taken, not all settled yet
        try:
            with self._borrow() as w:
                try:
                    while task is not None or held is not None:
                        if task is not None:
                            index, url, fut = task
                            w._post((index, url, True), f"converting {url}")
                        if held is not None:
                            sent = w._send_runs(held[2], self._place, held[0])
                        sized, converting = None, task is not None
                        while converting or sent is not None:  # the two answers, in either order
                            reply = w._recv(f"converting {url if converting else held[0]}")
                            if reply[0] in ("written", "write-error"):
                                answered, sent = sent, None
                                self._finish(w, held, answered, reply)
                            elif reply[0] == "sized":
                                sized, converting = (url, fut, reply[1]), False
                            else:  # its conversion failed; the worker goes on
                                converting = False
                                fut.set_exception(_failed(url, reply[1]))
                        held, task = sized, self._next_task() if more else None
                        if task is not None:
                            taken.append(task[2])
                except WorkerDied:
                    raise
                except BaseException as e:  # a bug here: the worker's answers would be out of step
                    w.proc.kill()
                    raise w._died("placing pieces", e) from e
        except BaseException as e:  # noqa: BLE001 - the worker died: the pool is broken
            if sent is not None:
                _cancel(sent[0], e)  # runs it will never write: their shards fail
            for fut in taken:
                if not fut.done():
                    fut.set_exception(e)

    def _finish(self, w: "_Worker", held: Tuple[str, Future, Dict[str, Any]], sent, reply) -> None:
        """The held piece's runs written (or its error): its task's result."""
        url, fut, info = held
        try:
            w._written(url, *sent, reply)
            if self._on_done is not None:
                self._on_done(info)
        except BaseException as e:  # noqa: BLE001 - raised to whoever asks for this shard
            fut.set_exception(e)
        else:
            fut.set_result(info)

    def convert(self, index: int, url: str) -> Dict[str, Any]:
        """Convert one shard in a worker (or take the dispatchers' result for it); waits
        without holding the GIL."""
        with self._lock:
            fut = self._futures.pop(index, None)
        if fut is not None:
            return fut.result()
        return self._run(index, url)

    def elements(self, url: str, note: Callable, chunk: int) -> Iterator[Any]:
        """The elements of the shard at ``url``, converted by an idle worker (see
        :meth:`_Worker.elements`), which stays borrowed until the generator ends."""
        with self._borrow() as w:
            yield from w.elements(url, note, chunk)

    def _run(self, index: int, url: str) -> Dict[str, Any]:
        """Convert a task the dispatchers were not given (e.g. a retried bundle's)."""
        if self._place is not None:
            fut: Future = Future()
            fut.set_running_or_notify_cancel()
            self._pipeline((index, url, fut), more=False)
            return fut.result()
        with self._borrow() as w:
            info = w.call(index, url)
            if self._on_done is not None:
                self._on_done(info)
            return info

    @contextlib.contextmanager
    def _borrow(self) -> Iterator[_Worker]:
        """An idle worker for the block, returned to the pool after it if still alive."""
        w = self._idle.get()
        if w is None:  # the pool is broken: wake the next waiter too
            self._idle.put(None)
            raise self._broken
        try:
            yield w
        except WorkerDied as e:
            # like concurrent.futures' BrokenProcessPool: one crash fails every later call
            # (a crash in native code tends to recur), and nobody waits for a worker forever
            self._broken = WorkerDied(f"the shard worker pool is broken: {e}")
            self._idle.put(None)
            raise
        finally:
            if w.proc.poll() is None:
                self._idle.put(w)

    def close(self) -> None:
        """Dispatchers stop taking tasks; idle workers exit when their input closes; their
        exit (interpreter teardown, ~50 ms) is awaited on a daemon thread, so a job does
        not end 50 ms late.  A worker still busy now works for nobody (the job failed or
        was interrupted, or a stream's consumer left) and is killed: nothing of the job
        outlives it, and it writes nothing more (only into temporary files in any case)."""
        with self._lock:
            self._closed = True
            for _, _, fut in self._todo:
                fut.cancel()  # not started: nobody will ask for it any more
        idle = []
        while True:
            try:
                idle.append(self._idle.get_nowait())
            except queue.Empty:
                break
        self._broken = self._broken or WorkerDied("the shard worker pool is closed")
        self._idle.put(None)  # a later borrower gets the error instead of waiting forever
        for w in self._all:
            w.end_input()
            if w not in idle:
                w.proc.kill()
        threading.Thread(target=self._reap, daemon=True, name="tar2tf-pool-reaper").start()

    def _reap(self) -> None:
        for w in self._all:
            w.reap()


_pools: "JobObjects[Pool]" = JobObjects()


def pack(cfg, required: bool = True) -> Optional[bytes]:
    """The job's config as its workers get it (pickled with cloudpickle).  A ``cfg`` whose
    ops cannot be pickled raises, or with ``required=False`` gives None (the caller then
    converts on its threads)."""
    import cloudpickle
    from transforms.sizes import parse_size
    # the member limit as a number: a worker then never imports the size parser
    cfg = dataclasses.replace(cfg, max_member_size=parse_size(cfg.max_member_size))
    try:
        return cloudpickle.dumps(cfg)
    except Exception:  # noqa: BLE001 - whatever pickling raises
        if required:
            raise
        return None


def start(job: str, cfg, work: str, processes: int, tasks: Sequence[Tuple[int, str]] = (),
          required: bool = True, on_done: Optional[Callable[[Dict[str, Any]], None]] = None,
          place: Optional[Callable] = None, blob: Optional[bytes] = None) -> bool:
    """Start ``processes`` workers for ``job`` (they import while the caller goes on),
    and with them the conversion of ``tasks``, in order (see :class:`Pool`).  ``blob``:
    the job's :func:`packed <pack>` config, if the caller has it; otherwise ``cfg`` is
    packed here, and one whose ops cannot be pickled raises, or with ``required=False``
    starts nothing and returns False."""
    if blob is None:
        blob = pack(cfg, required)
        if blob is None:
            return False
    _pools.put(job, Pool(blob, work, processes, tasks, on_done, place))
    return True


def get(job: str) -> Optional[Pool]:
    return _pools.get(job)


def stop(job: str) -> None:
    pool = _pools.pop(job)
    if pool is not None:
        pool.close()
