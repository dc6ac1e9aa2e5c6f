"""The worker side of :mod:`pipelines.inprocess.pool`: a process that converts input shards.

Started as ``python -P -c "from pipelines.inprocess.worker import serve; serve()"``
(:mod:`pipelines.worker_python`: nothing imported from the current directory).  The
messages are those of :mod:`pipelines.inprocess.messages`: it reads the :class:`Job` and then
:class:`ConvertTask` tasks from stdin, and answers each with :class:`Converted` (the piece's
piece) or :class:`Failed` (a traceback) on stdout.  It exits when stdin closes.  A
:class:`Stream` task streams the shard's elements for ``Dataset.load(template)`` instead
(:func:`_stream_elements`).

``ConvertTask.place`` (a local job whose shard stream places pieces: ``PieceFeed.place``): the
worker keeps the piece's frames in memory (spilling to its piece file beyond
``HOLD_BYTES``) and answers :class:`Sized`.  The piece's :class:`Runs` come once the
stream has placed it (records ``lo..hi-1`` go at ``offset`` of the final shard's temporary
file ``path``; no runs: drop the piece), in the order of the :class:`Sized` answers,
usually while the worker already converts its next task (the pool sends that first).  A
reader thread writes them as soon as they come and answers :class:`Written` (the CRC-32C
of each run) or :class:`WriteFailed` (a traceback), so a piece reaches its shard no later
than before and the worker never idles waiting for its place.  Each byte of the output is
written once, by a worker, instead of to a piece file and again by the parent into the
final shard.

This module imports only what a worker needs, so that a worker starts converting sooner
than if it imported the pool's queue, futures and subprocess machinery (every worker of a
pool starts at once, competing for the same cores).
"""

from __future__ import annotations

import os
import pickle
import sys


def _task_loop(inp, out) -> None:
    import collections
    import dataclasses
    import gc
    import threading
    import traceback

    from pipelines.inprocess.messages import (
        Converted,
        Failed,
        Runs,
        Sized,
        Stream,
        WriteFailed,
        Written,
    )
    from pipelines.job.kinds.tfrecord.piece import HOLD_BYTES, convert_to_piece

    job = pickle.load(inp)
    from transforms.redact import log_like

    # a retry warning names a URL (maybe with a password or a signed query) and a server's
    # reason phrase (maybe with terminal escapes): this process writes to the user's
    # terminal as the parent does, so its records are redacted and escaped as the parent's
    log_like(job.log_level, job.log_format)
    work = job.work
    cfg = pickle.loads(job.blob)
    stages = cfg.stages()
    # what was imported and built so far lives as long as the worker: keep the cyclic
    # collector from scanning it again on every full collection
    gc.freeze()
    lock = threading.Lock()

    def send(reply) -> None:
        with lock:
            try:
                pickle.dump(reply, out, protocol=pickle.HIGHEST_PROTOCOL)
                out.flush()
            except (BrokenPipeError, ConnectionResetError):
                os._exit(0)  # the parent is gone: nobody reads the answer (and no traceback)

    held = collections.deque()  # sized pieces (with their frames), oldest first, awaiting runs
    inbox = collections.deque()  # the other messages, for this thread; None: input closed
    arrived = threading.Condition()
    idle = [False]  # the task loop is waiting for a message

    def read() -> None:
        """Every message from the parent: runs are written here as soon as they come
        (while this process converts its next shard); the rest go to the inbox."""
        while True:
            try:
                msg = pickle.load(inp)
            except (EOFError, OSError, pickle.UnpicklingError):
                msg = None
            if isinstance(msg, Runs):  # the runs of the oldest piece held
                if not held:
                    # a protocol error of the parent: said, not a reader thread that dies
                    # silently and leaves both sides waiting
                    send(WriteFailed("runs came for no piece this worker holds"))
                    continue
                piece = held.popleft()
                try:
                    send(Written(write_runs(msg.runs, piece, cfg.store)))
                except Exception:
                    send(WriteFailed(traceback.format_exc()))
                continue
            with arrived:
                inbox.append(msg)
                arrived.notify()
                busy = not idle[0]
            if msg is None:
                if busy:
                    # the input closed under a task: the parent died (or closed the pool,
                    # which ends busy workers anyway); nobody will take the result, and an
                    # op that hangs would keep this process alive for ever
                    os._exit(0)
                return

    def recv():
        with arrived:
            idle[0] = True
            while not inbox:
                arrived.wait()
            idle[0] = False
            return inbox.popleft()

    threading.Thread(target=read, daemon=True).start()
    while True:
        task = recv()
        if task is None:
            return
        if isinstance(task, Stream):
            if not _stream_elements(task.url, task.chunk, cfg, stages, recv, send):
                return
            continue
        try:
            hold = HOLD_BYTES if task.place else 0
            piece = convert_to_piece(task.index, task.url, work, cfg, stages, hold)
        except Exception:
            send(Failed(traceback.format_exc()))
            continue
        if not task.place:
            send(Converted(piece))
            continue
        held.append(piece)  # its frames None: spilled to its piece file
        send(Sized(dataclasses.replace(piece, frames=None)))  # the frames stay here


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
