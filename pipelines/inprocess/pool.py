"""The in-process driver's worker processes (``processes=N`` / ``--processes N``).

Threads of one process contend for the GIL: Pillow, zlib and hashlib release it, but
everything between those calls (tar headers, Pillow's Python plugins, Example building)
holds it, and on 2 cores the threads of a decode-heavy job lose about a fifth of their
throughput to one another (docs/benchmarks.md).  So the in-process driver
(``pipelines.inprocess.driver``) and the streamed ``tf.data.Dataset`` hand whole shards to
worker processes.  The output is the same bytes.  Where the driver's shard stream places
the pieces (a local ``{}`` output), each worker writes its piece's frames straight into the
final shards, at the offsets the stream assigns (``place``; the protocol is written down in
:mod:`pipelines.inprocess.messages`), so every byte is
written once; otherwise each worker writes a piece file that the shards are copied from.

* Lifecycle: the driver builds a :class:`Pool` and closes it (``with Pool(...)`` or
  :meth:`Pool.close`); closing reaps every worker before it returns.  The Beam graph never
  uses a pool: its runner's own workers parallelize.
* Why not ``concurrent.futures.ProcessPoolExecutor`` or loky: a placing worker holds a
  conversation per piece (sized, then the offsets of its runs, then written), converting
  its next shard while the stream settles where the last one goes; an executor's
  one-call-one-result model would leave it idle for that round trip.  And
  :mod:`multiprocessing`'s spawn re-runs the caller's main script in every child (a script
  calling ``convert()`` without an ``if __name__ == "__main__"`` guard would start jobs
  recursively); loky avoids that but still needs a picklable callable per task.
* Workers are plain ``python -c`` subprocesses that import :mod:`pipelines.inprocess.worker`
  and :mod:`pipelines.job.kinds.tfrecord.piece` only (no Beam, no TensorFlow, not even this module's
  queue, futures and subprocess machinery), so they start converting almost at once.
* Given the job's task list, the pool converts the shards in input order on its own
  threads as soon as it starts, whichever thread later asks for which shard (see
  :class:`Pool`).
* Each worker gets the job's :class:`ConvertConfig` once, pickled with cloudpickle as
  Beam ships DoFns (user ops and lambdas travel as they do to a Beam worker), then
  :class:`~pipelines.inprocess.messages.ConvertTask` tasks on stdin; it answers each with the
  piece (``pipelines.job.kinds.tfrecord.piece.ConvertedPiece``) on stdout.
* The streamed ``tf.data.Dataset`` of ``Dataset.load(template)`` borrows a worker per
  shard too (:meth:`Pool.elements`): the worker sends the shard's elements back in chunks
  and converts the next chunk while the caller takes these.
* An exception inside the conversion is raised to the caller (with the worker's traceback
  in its message); a worker that dies (a crash in native code) fails the job with
  :class:`WorkerDied`, and every later call on the pool with it.  Workers exit when
  their stdin closes, so they never outlive a killed parent for long.

The messages, their order, and what each side does when the other dies or the job stops:
:mod:`pipelines.inprocess.messages`.

Threads of a :class:`Pool`:

==============================  ===============================  ==========================
state                           owner                            how other threads reach it
==============================  ===============================  ==========================
an idle worker, or the pool's   the idle queue                   taking from it
breakage (:class:`_Broken`)                                      (:meth:`Pool._borrow`);
                                                                 a breakage stays in it
a borrowed worker (its pipes,   the thread that borrowed it      :meth:`Pool.close` only
the pieces it holds)            (a dispatcher, a caller of       ends it (closes its input,
                                :meth:`Pool.convert` or          kills it): the borrower
                                :meth:`Pool.elements`)           then gets WorkerDied
the tasks not started, their    the pool's one lock              :meth:`Pool.convert`, the
futures, closed                                                  dispatchers, :meth:`close`
a task's result                 the thread converting it (sets   its future
                                its future once)
==============================  ===============================  ==========================
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import queue
import sys
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from pipelines.inprocess.handle import Worker, WorkerDied, cancel, failed
from pipelines.inprocess.messages import ConvertTask, Sized, WriteFailed, Written

if TYPE_CHECKING:
    from pipelines.job.kinds.tfrecord.piece import ConvertedPiece

__all__ = ["Pool", "WorkerDied", "pack"]


class _Broken:
    """In a pool's idle queue instead of a worker: the pool is broken (a worker died) or
    closed.  Whoever takes it puts it back, so that every later borrower gets ``error``
    instead of waiting for a worker for ever."""

    def __init__(self, error: WorkerDied):
        self.error = error


class Pool:
    """``n`` workers for the job whose pickled config is ``blob``; :meth:`convert` borrows
    an idle one for one shard.

    ``tasks``: the ``(index, url)`` tasks the caller will ask for.  ``n`` dispatcher
    threads convert them in that order, from the start, each on the next idle worker, and
    :meth:`convert` returns a task's result when asked: every worker stays busy until the
    last shard, and the pieces come in the order the shard stream writes them.
    ``place`` (``PieceFeed.place``): the workers write their pieces into the final shards
    where it puts them; a piece then waits for its predecessors to be placed (its worker
    converts its next shard meanwhile: :meth:`_pipeline`), so such a pool must be given
    every task (converting in input order, no piece can wait for one nobody converts)."""

    def __init__(
        self,
        blob: bytes,
        work: str,
        n: int,
        tasks: Sequence[Tuple[int, str]] = (),
        place: Optional[Callable] = None,
    ):
        self._all: List[Worker] = []
        self._idle: "queue.Queue[Worker | _Broken]" = queue.Queue()
        for _ in range(int(n)):
            w = Worker(blob, work)
            self._all.append(w)
            self._idle.put(w)
        self._lock = threading.Lock()
        self._futures: Dict[int, Future] = {index: Future() for index, _ in tasks}
        self._todo = collections.deque((index, url, self._futures[index]) for index, url in tasks)
        self._place = place
        self._closed = False
        for i in range(min(int(n), len(self._todo))):
            threading.Thread(
                target=self._dispatch, daemon=True, name=f"tar2tf-dispatch-{i}"
            ).start()

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
                piece = self._run(index, url)
            except BaseException as e:
                fut.set_exception(e)
            else:
                fut.set_result(piece)
            task = self._next_task()

    def _pipeline(self, task: Tuple[int, str, Future], more: bool = True) -> None:
        """A placing pool's conversation with one worker, for ``task`` and (``more``) the
        next tasks in input order: the dispatchers' loop, and :meth:`_run`'s for one task.
        The worker gets its next task before the runs of the piece it holds, so it
        converts while the stream settles where that piece goes (the stream places a
        piece once every piece before it is sized, and a worker that waited for that
        idled).  The worker writes the runs as soon as they
        come, so the two answers (the next piece sized, the held one written) come in
        either order; it holds at most two pieces."""
        held: Optional[Tuple[str, Future, ConvertedPiece]] = None  # sized, runs not sent yet
        sent: Optional[Tuple[list, Optional[BaseException]]] = None  # held's runs, not answered
        taken: List[Future] = [task[2]]  # the tasks taken, not all settled yet
        try:
            with self._borrow() as w:
                try:
                    while task is not None or held is not None:
                        if task is not None:
                            index, url, fut = task
                            w.post(ConvertTask(index, url, True), f"converting {url}")
                        if held is not None:
                            # a worker found dead here died in the task just posted, if any
                            doing = (
                                f"converting {url}" if task is not None else f"writing {held[0]}"
                            )
                            sent = w.send_runs(held[2], self._place, doing)
                        sized, converting = None, task is not None
                        while converting or sent is not None:  # the two answers, in either order
                            reply = w.recv(f"converting {url if converting else held[0]}")
                            if isinstance(reply, (Written, WriteFailed)):
                                answered, sent = sent, None
                                self._finish(w, held, answered, reply)
                            elif isinstance(reply, Sized):
                                sized, converting = (url, fut, reply.piece), False
                            else:  # Failed: its conversion raised; the worker goes on
                                converting = False
                                fut.set_exception(failed(url, reply.trace))
                        held, task = sized, self._next_task() if more else None
                        # settled tasks leave: their pieces (sizes) go once the caller took them
                        taken = [f for f in taken if not f.done()]
                        if task is not None:
                            taken.append(task[2])
                except WorkerDied:
                    raise
                except BaseException as e:  # a bug here: the worker's answers would be out of step
                    w.proc.kill()
                    raise w.died("placing pieces", e) from e
        except BaseException as e:
            if sent is not None:
                cancel(sent[0], e)  # runs it will never write: their shards fail
            for fut in taken:
                if not fut.done():
                    fut.set_exception(e)

    def _finish(self, w: "Worker", held: Tuple[str, Future, ConvertedPiece], sent, reply) -> None:
        """The held piece's runs written (or its error): its task's result."""
        url, fut, piece = held
        try:
            w.report_written(url, *sent, reply)
        except BaseException as e:
            fut.set_exception(e)
        else:
            fut.set_result(piece)

    def convert(self, index: int, url: str) -> ConvertedPiece:
        """Convert one shard in a worker (or take the dispatchers' result for it); waits
        without holding the GIL."""
        with self._lock:
            fut = self._futures.pop(index, None)
        if fut is not None:
            return fut.result()
        return self._run(index, url)

    def elements(self, url: str, note: Callable, chunk: int) -> Iterator[Any]:
        """The elements of the shard at ``url``, converted by an idle worker (see
        :meth:`Worker.elements`), which stays borrowed until the generator ends."""
        with self._borrow() as w:
            yield from w.elements(url, note, chunk)

    def _run(self, index: int, url: str) -> ConvertedPiece:
        """Convert one shard: a dispatcher's task, or one the pool was not given (a pool
        built without tasks converts every shard it is asked for this way)."""
        if self._place is not None:
            fut: Future = Future()
            fut.set_running_or_notify_cancel()
            self._pipeline((index, url, fut), more=False)
            return fut.result()
        with self._borrow() as w:
            return w.call(index, url)

    @contextlib.contextmanager
    def _borrow(self) -> Iterator[Worker]:
        """An idle worker for the block, returned to the pool after it if still alive."""
        w = self._idle.get()
        if isinstance(w, _Broken):  # the pool is broken: wake the next waiter too
            self._idle.put(w)
            # an exception of its own for each borrower: threads raising one instance at
            # once would each rewrite its traceback
            raise WorkerDied(str(w.error))
        try:
            yield w
        except WorkerDied as e:
            # like concurrent.futures' BrokenProcessPool: one crash fails every later call
            # (a crash in native code tends to recur), and nobody waits for a worker forever
            self._idle.put(_Broken(WorkerDied(f"the shard worker pool is broken: {e}")))
            raise
        finally:
            if w.proc.poll() is None:
                self._idle.put(w)

    def close(self) -> None:
        """Dispatchers stop taking tasks; idle workers exit when their input closes, and a
        worker still busy now works for nobody (the job failed or was interrupted, or a
        stream's consumer left) and is killed: nothing of the job outlives it, and it
        writes nothing more (only into temporary files in any case).  Every worker is
        reaped before this returns, so no process of the job is left when it has ended."""
        with self._lock:
            self._closed = True
            for _, _, fut in self._todo:
                fut.cancel()  # not started: nobody will ask for it any more
        idle: List[Worker] = []
        broken: Optional[_Broken] = None
        while True:
            try:
                got = self._idle.get_nowait()
            except queue.Empty:
                break
            if isinstance(got, _Broken):
                broken = broken or got  # a worker's death says more than "closed"
            else:
                idle.append(got)
        # a later borrower gets the error instead of waiting forever
        self._idle.put(broken or _Broken(WorkerDied("the shard worker pool is closed")))
        for w in self._all:
            w.end_input()
            if w not in idle:
                w.proc.kill()
        if sys.is_finalizing():
            # a stream left open by a script that ended: the interpreter is tearing down, a
            # daemon thread frozen by it may hold a worker's Popen lock, and the workers exit
            # on their own (their input is closed)
            return
        self._reap()

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _reap(self) -> None:
        for w in self._all:
            w.reap()


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
    except Exception:
        if required:
            raise
        return None
