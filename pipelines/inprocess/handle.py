"""The launching process's handle on one shard worker process (:mod:`pipelines.inprocess.worker`
is the other end): its start, its pipes, and the messages of one task, a piece-file
conversion, a placed piece's runs, or a shard's streamed elements (the messages are
:mod:`pipelines.inprocess.messages`).  The pool that schedules tasks over these handles is
:mod:`pipelines.inprocess.pool`, whose docstring has the design; the protocol (who sends what,
in which order, what each side does on EOF, death or cancellation) is written down once,
in :mod:`pipelines.inprocess.messages`.

Which thread owns what:

=========================  ==============================  ================================
state                      owner                           how other threads reach it
=========================  ==============================  ================================
a :class:`Worker`: its     the thread that borrowed it     ``Pool.close`` only ends it
pipes, the conversation    from its pool (one at a time)   (:meth:`Worker.end_input`,
                                                           ``proc.kill()``); the owner's
                                                           next send or receive then raises
                                                           :class:`WorkerDied`
=========================  ==============================  ================================
"""

from __future__ import annotations

import os
import pickle
import subprocess
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional, Tuple

from pipelines.inprocess.messages import (
    NEXT,
    STOP,
    ConvertTask,
    End,
    Failed,
    Items,
    Run,
    Runs,
    Setup,
    Stream,
    StreamFailed,
    WriteFailed,
    Written,
)
from pipelines.worker_python import launcher_path, python_c

if TYPE_CHECKING:
    from pipelines.job.kinds.tfrecord.piece import ConvertedPiece

_BOOT = "from pipelines.inprocess.worker import serve; serve()"

# Native thread pools a worker does not need: the pool already runs one worker per core,
# and numpy's OpenBLAS starts a thread per core at import (CPU taken from the other
# workers).  A value the user set is kept.
_ONE_THREAD = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def worker_env() -> Dict[str, str]:
    """The environment of a worker process: this one's, with :data:`_ONE_THREAD` = 1
    unless set, and this process's import path."""
    env = dict(os.environ, PYTHONPATH=launcher_path())
    for name in _ONE_THREAD:
        env.setdefault(name, "1")
    return env


class WorkerDied(RuntimeError):
    """A shard worker process ended without answering."""


def failed(url: str, trace: str) -> RuntimeError:
    """A conversion that raised in a worker (``trace``: its traceback there)."""
    return RuntimeError(f"converting {url} failed in a shard worker process:\n{trace}")


def cancel(runs: list, exc: BaseException) -> None:
    """Ranges that will never be written: their shards fail."""
    for shard, _, _, _ in runs:
        shard.cancel(exc)


class Worker:
    """One worker process, started with the job's pickled config (``blob``) and work
    directory; it imports while the caller goes on."""

    def __init__(self, blob: bytes, work: str):
        from transforms.redact import log_settings

        self.proc = subprocess.Popen(
            python_c(_BOOT),  # the current directory off its sys.path
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=worker_env(),
        )
        try:
            # its log records go to this process's stderr: at this process's level and format
            self._send(Setup(blob, work, *log_settings()))
        except OSError:  # it died at start-up (its traceback is on stderr): the first call says so
            pass

    def _send(self, obj: Any) -> None:
        pickle.dump(obj, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.flush()

    def call(self, index: int, url: str) -> ConvertedPiece:
        """Convert one shard into a piece file (a placing pool's conversation, where the
        worker writes into the final shards, is :meth:`Pool._pipeline`'s); the worker's
        error raises here."""
        self.post(ConvertTask(index, url, False), f"converting {url}")
        reply = self.recv(f"converting {url}")
        if isinstance(reply, Failed):
            raise failed(url, reply.trace)
        return reply.piece

    def send_runs(
        self, piece: ConvertedPiece, place: Callable, doing: str
    ) -> Tuple[list, Optional[BaseException]]:
        """Wait for ``place`` to settle where the piece the worker holds goes, and send the
        worker its runs (none if ``place`` raised: the worker drops the piece); the runs,
        and what ``place`` raised.  The worker's answer is :meth:`report_written`'s.
        ``doing``: what the worker is busy with, for the message if it is found dead."""
        try:
            runs, error = place(piece) or [], None
        except BaseException as e:
            runs, error = [], e
        try:
            runs_of = [Run(shard.local_path, offset, lo, hi) for shard, offset, lo, hi in runs]
            self.post(Runs(runs_of), doing)
        except BaseException as e:
            cancel(runs, e)
            raise
        return runs, error

    def report_written(
        self, url: str, runs: list, error: Optional[BaseException], reply: Written | WriteFailed
    ) -> None:
        """The worker's answer (``reply``) to :meth:`send_runs`: each run reported to its
        shard."""
        try:
            if isinstance(reply, WriteFailed):
                raise RuntimeError(
                    f"writing the piece of {url} failed in a shard worker process:\n{reply.trace}"
                )
            crcs = reply.crcs
        except BaseException as e:
            cancel(runs, e)
            raise
        if error is not None:
            raise error
        for (shard, offset, _, _), crc in zip(runs, crcs):
            shard.filled(offset, crc)

    def died(self, doing: str, e: BaseException) -> WorkerDied:
        code = self.proc.wait()
        return WorkerDied(
            f"shard worker process (pid {self.proc.pid}) died with exit code {code} "
            f"while {doing} ({e.__class__.__name__})"
        )

    def post(self, message: Any, doing: str) -> None:
        """Send a message; a worker that is gone raises :class:`WorkerDied` (``doing``:
        what it was doing, for the message)."""
        try:
            self._send(message)
        # BrokenPipeError included; ValueError: Pool.close closed the pipe on another thread
        except (OSError, ValueError) as e:
            raise self.died(doing, e) from None

    def recv(self, doing: str) -> Any:
        try:
            return pickle.load(self.proc.stdout)
        except (EOFError, OSError, ValueError, pickle.UnpicklingError) as e:
            raise self.died(doing, e) from None

    def elements(self, url: str, note: Callable, chunk: int) -> Iterator[Any]:
        """The elements of one shard for the streamed dataset (``transforms.shard_elements``;
        the protocol is in ``pipelines.inprocess.worker``), ``chunk`` per message; the worker
        converts the next chunk while these are consumed.  ``note(what, reject)`` gets the
        worker's counts.  Closing the generator early stops the worker's shard."""
        doing = f"streaming {url}"
        self.post(Stream(url, chunk), doing)
        settled = False  # the worker has finished the task (end, error, or dead)
        try:
            while True:
                reply = self.recv(doing)
                for n in reply.notes:
                    note(*n)
                if isinstance(reply, StreamFailed):
                    settled = True
                    raise RuntimeError(
                        f"streaming {url} failed in a shard worker process:\n{reply.trace}"
                    )
                if isinstance(reply, End):
                    settled = True
                    yield from reply.elements
                    return
                self.post(NEXT, doing)
                yield from reply.elements
        except WorkerDied:
            settled = True
            raise
        finally:
            if not settled:  # the consumer stopped early: end the worker's task, keep the worker
                self._stop_streaming(doing, note)

    def _stop_streaming(self, doing: str, note: Callable) -> None:
        try:
            while True:
                reply = self.recv(doing)
                for n in reply.notes:
                    note(*n)
                if not isinstance(reply, Items):
                    return
                self.post(STOP, doing)
        except WorkerDied:
            pass  # the pool finds out at the worker's next task

    def end_input(self) -> None:
        """Ask the worker to exit (it does when its stdin closes)."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def reap(self) -> None:
        """Wait for the worker's exit (it exits when its input closes), killing it if it
        does not; never waits for ever."""
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass  # still not reaped: the kernel holds a dying process; nothing more to do
        self.proc.stdout.close()
