"""The worker side of :mod:`pipelines.inprocess.pool`: a process that converts input shards.

Started as ``python -P -c "from pipelines.inprocess.worker import serve; serve()"``
(:mod:`pipelines.worker_python`: nothing imported from the current directory).  It reads
the parent's messages on stdin and answers on stdout, in the protocol written down in
:mod:`pipelines.inprocess.messages` (who sends what, in which order, and what each side
does when the input closes, the other side dies or the job stops); it exits when stdin
closes.  A reader thread takes every message as it comes: a placed piece's :class:`Runs`
are written there at once, while the main thread converts the next task, so the worker
never idles waiting for its place, and each byte of the output is written once, by a
worker, instead of to a piece file and again by the parent into the final shard.

Which thread owns what (:class:`_Session`):

============================  ===========================  ===============================
state                         owner                        how the other thread reaches it
============================  ===========================  ===============================
the job (config, stages,      the main thread, before the  read-only once the reader starts
work directory)               reader starts
the input stream              the reader thread (once the  not at all
                              job is read)
the reply stream              the send lock                both threads send under it
the pieces held for their     the mail lock                the main thread adds a piece
runs, the inbox, idle                                      before its Sized, the reader
                                                           takes it for its Runs; the
                                                           reader fills the inbox, the main
                                                           thread empties it
============================  ===========================  ===============================

This module imports only what a worker needs, so that a worker starts converting sooner
than if it imported the pool's queue, futures and subprocess machinery (every worker of a
pool starts at once, competing for the same cores).
"""

from __future__ import annotations

import os
import pickle
import sys


def _task_loop(inp, out) -> None:
    """Serve the parent on ``inp`` (its messages) and ``out`` (the replies) until the input
    closes."""
    _Session(inp, out).run()


class _Session:
    """One worker process's conversation with the parent: this thread's task loop
    (:meth:`run`), and a reader thread (:meth:`_read`) that takes every message as it
    comes, so that the runs of a held piece are written while this thread converts.

    Which thread owns what: the module's docstring.
    """

    def __init__(self, inp, out) -> None:
        import collections
        import threading

        self.inp, self.out = inp, out
        self._send_lock = threading.Lock()
        self._mail = threading.Condition()
        self._held = collections.deque()  # sized pieces (with their frames), oldest first
        self._inbox = collections.deque()  # the other messages; None: the input closed
        self._idle = False  # the task thread waits for a message

    def run(self) -> None:
        """Read the job, start the reader, then do each task until the input closes."""
        import threading

        self._load_job()
        threading.Thread(target=self._read, daemon=True, name="tar2tf-worker-read").start()
        from pipelines.inprocess.messages import Stream

        while True:
            task = self._recv()
            if task is None:
                return
            if isinstance(task, Stream):
                if not _stream_elements(
                    task.url, task.chunk, self.cfg, self.stages, self._recv, self._send
                ):
                    return
                continue
            self._convert(task)

    def _load_job(self) -> None:
        """The :class:`~pipelines.inprocess.messages.Setup`: this process's logging, config
        and stages."""
        import gc

        # imported before the collector freezes what is loaded (below), as the config is
        import pipelines.job.kinds.tfrecord.piece  # noqa: F401

        job = pickle.load(self.inp)
        from transforms.redact import log_like

        # a retry warning names a URL (maybe with a password or a signed query) and a
        # server's reason phrase (maybe with terminal escapes): this process writes to the
        # user's terminal as the parent does, so its records are redacted and escaped as
        # the parent's
        log_like(job.log_level, job.log_format)
        self.work = job.work
        self.cfg = pickle.loads(job.blob)
        self.stages = self.cfg.stages()
        # what was imported and built so far lives as long as the worker: keep the cyclic
        # collector from scanning it again on every full collection
        gc.freeze()

    def _convert(self, task) -> None:
        """A :class:`~pipelines.inprocess.messages.ConvertTask`: answered Converted, Failed,
        or Sized (the piece then held until its runs come)."""
        import dataclasses
        import traceback

        from pipelines.inprocess import HOLD_BYTES
        from pipelines.inprocess.messages import Converted, Failed, Sized
        from pipelines.job.kinds.tfrecord.piece import convert_to_piece

        try:
            hold = HOLD_BYTES if task.place else 0
            piece = convert_to_piece(task.index, task.url, self.work, self.cfg, self.stages, hold)
        except Exception:
            self._send(Failed(traceback.format_exc()))
            return
        if not task.place:
            self._send(Converted(piece))
            return
        with self._mail:  # held before the parent can know of it: its runs find it
            self._held.append(piece)  # its frames None: spilled to its piece file
        self._send(Sized(dataclasses.replace(piece, frames=None)))  # the frames stay here

    def _send(self, reply) -> None:
        with self._send_lock:
            try:
                pickle.dump(reply, self.out, protocol=pickle.HIGHEST_PROTOCOL)
                self.out.flush()
            except (BrokenPipeError, ConnectionResetError):
                os._exit(0)  # the parent is gone: nobody reads the answer (and no traceback)

    def _recv(self):
        """The task thread's next message from the inbox (None: the input closed)."""
        with self._mail:
            self._idle = True
            while not self._inbox:
                self._mail.wait()
            self._idle = False
            return self._inbox.popleft()

    def _read(self) -> None:
        """The reader thread: every message from the parent, until the input closes."""
        from pipelines.inprocess.messages import Runs

        while True:
            try:
                msg = pickle.load(self.inp)
            except (EOFError, OSError, pickle.UnpicklingError):
                msg = None
            if isinstance(msg, Runs):
                self._write_held(msg)
            elif not self._deliver(msg):
                return

    def _write_held(self, msg) -> None:
        """Write the runs of the oldest piece held, answered Written or WriteFailed."""
        import traceback

        from pipelines.inprocess.messages import WriteFailed, Written

        with self._mail:
            piece = self._held.popleft() if self._held else None
        if piece is None:
            # a protocol error of the parent: said, not a reader thread that dies silently
            # and leaves both sides waiting
            self._send(WriteFailed("runs came for no piece this worker holds"))
            return
        try:
            crcs = write_runs(msg.runs, piece, self.cfg.store)
        except Exception:
            self._send(WriteFailed(traceback.format_exc()))
            return
        self._send(Written(crcs))

    def _deliver(self, msg) -> bool:
        """Hand ``msg`` to the task thread; False once the input has closed (``msg`` None)."""
        with self._mail:
            self._inbox.append(msg)
            self._mail.notify()
            busy = not self._idle
        if msg is None and busy:
            # the input closed under a task: the parent died (or closed the pool, which
            # ends busy workers anyway); nobody will take the result, and an op that hangs
            # would keep this process alive for ever
            os._exit(0)
        return msg is not None


def _stream_elements(url, chunk, cfg, stages, recv, send) -> bool:
    """A :class:`Stream` task (``transforms.shard_elements``): the shard's elements go out
    ``chunk`` at a time as :class:`Items`, each answered with ``NEXT`` or ``STOP``; then
    :class:`End`, or :class:`StreamFailed`.  ``notes``: the counts since the last message.
    False: the input closed (the worker exits)."""
    import traceback

    from pipelines.inprocess.messages import End, Items, Next, StreamFailed
    from transforms.shard_elements import shard_elements

    notes, batch = [], []

    def note(what, reject=None):
        notes.append((what, reject))

    try:
        for el in shard_elements(url, cfg.store, cfg.max_member_size, stages, note):
            batch.append(el)
            if len(batch) < chunk:
                continue
            send(Items(batch, notes[:]))
            batch, notes[:] = [], []
            reply = recv()
            if reply is None:
                return False
            if not isinstance(reply, Next):  # STOP: the consumer is gone
                send(End([], notes))
                return True
    except Exception:
        send(StreamFailed(traceback.format_exc(), notes))
        return True
    send(End(batch, notes))
    return True


def write_runs(runs, piece, config=None) -> list:
    """Write records ``lo..hi-1`` of ``piece`` (a ``pipelines.job.kinds.tfrecord.piece.ConvertedPiece``)
    at ``offset`` of ``path`` for each run (a :class:`~pipelines.inprocess.messages.Run`
    or a plain tuple); the CRC-32C of each run.  Its frames come from ``piece.frames``, or,
    when None, from its piece file (in the store of ``config``; a piece over
    ``HOLD_BYTES``)."""
    import itertools

    from transforms.stores import get_store, writeback
    from transforms.tfrecord import digests

    frames, url = piece.frames, piece.summary.piece
    ends = list(itertools.accumulate(piece.sizes, initial=0))
    crcs = []
    src = get_store(url, config).open_read(url) if frames is None and runs else None
    try:
        for path, offset, lo, hi in runs:
            digest = digests.new("crc32c")
            with open(path, "r+b", buffering=1 << 20) as f:
                f.seek(offset)
                if src is None:
                    for fr in frames[lo:hi]:
                        f.write(fr)
                        digest.update(fr)
                else:
                    from pipelines.job.kinds.tfrecord.shardfile import (
                        copy_range,  # only for spilled pieces
                    )

                    copy_range(src, f, ends[lo], ends[hi] - ends[lo], digest)
                f.flush()  # the shard's fsync, when it closes, then finds these bytes written
                writeback.start(f.fileno(), offset, ends[hi] - ends[lo])
            crcs.append(digests.crc32c_of(digest))
    finally:
        if src is not None:
            src.close()
    return crcs


def serve() -> None:
    """Entry point of a worker process: tasks on stdin, replies on stdout.  The reply
    stream gets a file descriptor of its own and descriptor 1 becomes stderr, so nothing
    the conversion prints (Python or native code) can corrupt it.  The tasks are read
    through a reader of their own: its thread is still blocked in it when the process
    ends (an op raising SystemExit, say), and shutting down would close ``sys.stdin``,
    wait for that lock and abort the process.  Ctrl-C in a terminal reaches the workers
    too (one process group): they ignore it, and the interrupted parent ends them
    (:meth:`pipelines.inprocess.pool.Pool.close`), without a traceback from each."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inp = os.fdopen(os.dup(0), "rb")
    out = os.fdopen(os.dup(1), "wb")
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _task_loop(inp, out)
