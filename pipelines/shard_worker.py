"""The worker side of :mod:`pipelines.shard_pool`: a process that converts input shards.

Started as ``python -c "from pipelines.shard_worker import serve; serve()"``.  It reads
the pickled job (config blob, work directory) and then ``(index, url)`` tasks from stdin,
and answers each with ``("ok", piece info)`` or ``("error", traceback)`` on stdout.  It
exits when stdin closes.  This module imports only what a worker needs, so that a worker
is converting ~20 ms sooner than if it imported the pool's threading and subprocess
machinery (measured on the 2-core benchmark machine, where both workers start at once).
"""

from __future__ import annotations

import os
import pickle
import sys


def _task_loop(inp, out) -> None:
    import gc
    import traceback
    from pipelines.shard_convert import convert_shard
    blob, work = pickle.load(inp)
    cfg = pickle.loads(blob)
    stages = cfg.stages()
    # what was imported and built so far lives as long as the worker: keep the cyclic
    # collector from scanning it again on every full collection
    gc.freeze()
    while True:
        try:
            index, url = pickle.load(inp)
        except EOFError:
            return
        try:
            reply = ("ok", convert_shard(index, url, work, cfg, stages))
        except Exception:  # noqa: BLE001 - reported to the parent, which raises it
            reply = ("error", traceback.format_exc())
        pickle.dump(reply, out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()


def serve() -> None:
    """Entry point of a worker process: tasks on stdin, replies on stdout.  The reply
    stream gets a file descriptor of its own and descriptor 1 becomes stderr, so nothing
    the conversion prints (Python or native code) can corrupt it."""
    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(1), "wb")
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _task_loop(inp, out)
