"""Stream items of many shards with N worker threads, in shard order, in bounded memory.

Why threads: the work per shard is fetching bytes (network I/O) and Pillow decode/resize,
which release the GIL; one shard is one unit of work, as in the Beam pipeline.

Memory bound: at most ``num_workers`` shards are *open* (being produced or not yet fully
consumed) and each buffers at most ``prefetch`` items, so at most
``num_workers * (prefetch + 1)`` items are in memory, whatever the dataset size.  A slot
is freed only when the consumer has drained a shard, so fast workers cannot run ahead.
Order: shards are yielded in the given order, items in shard order -- deterministic.
Closing the generator early stops the workers.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Iterable, Iterator, Sequence

_END = object()
_POLL = 0.1


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc


def ordered_stream(
    tasks: Sequence[Any],
    produce: Callable[[Any], Iterable[Any]],
    num_workers: int = 1,
    prefetch: int = 64,
) -> Iterator[Any]:
    """Yield ``produce(task)`` items for every task, task by task, ``num_workers`` at once."""
    num_workers = max(1, int(num_workers))
    n = len(tasks)
    if n == 0:
        return
    stop = threading.Event()
    slots = threading.Semaphore(num_workers)
    queues = [queue.Queue(maxsize=max(1, int(prefetch))) for _ in range(n)]

    def put(q, item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def work(i):
        try:
            for item in produce(tasks[i]):
                if not put(queues[i], item):
                    return
        except BaseException as e:
            put(queues[i], _Failed(e))
        put(queues[i], _END)

    todo: "queue.Queue[int]" = queue.Queue()

    def schedule():
        # a task starts only when a slot is free; daemon threads never block interpreter exit
        for i in range(n):
            while not slots.acquire(timeout=_POLL):
                if stop.is_set():
                    return
            todo.put(i)

    def worker():
        while not stop.is_set():
            try:
                i = todo.get(timeout=_POLL)
            except queue.Empty:
                continue
            work(i)

    threads = [threading.Thread(target=schedule, name="tar2tf-load-schedule", daemon=True)]
    threads += [
        threading.Thread(target=worker, name=f"tar2tf-load-{k}", daemon=True)
        for k in range(min(num_workers, n))
    ]
    for t in threads:
        t.start()
    try:
        for i in range(n):
            while True:
                item = queues[i].get()
                if item is _END:
                    break
                if isinstance(item, _Failed):
                    raise item.exc
                yield item
            queues[i] = None  # drop the drained queue
            slots.release()
    finally:
        stop.set()
        for t in threads:
            t.join()
