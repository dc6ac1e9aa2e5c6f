"""Per-job objects that live in the launching process, found by job id.

A local job starts helpers beside its Beam graph (the worker pool of
``pipelines.shard_pool``, the shard stream of ``pipelines.shard_stream``).  DoFns cannot
carry them (they are pickled), so they carry the job id and look the helper up here; a
DoFn running in another process (another runner) finds nothing and does the work itself.
"""

from __future__ import annotations

import threading
from typing import Dict, Generic, Optional, TypeVar

T = TypeVar("T")


class JobObjects(Generic[T]):
    """A thread-safe ``job id -> object`` map."""

    def __init__(self) -> None:
        self._items: Dict[str, T] = {}
        self._lock = threading.Lock()

    def put(self, job: str, item: T) -> T:
        with self._lock:
            self._items[job] = item
        return item

    def get(self, job: str) -> Optional[T]:
        with self._lock:
            return self._items.get(job)

    def pop(self, job: str) -> Optional[T]:
        with self._lock:
            return self._items.pop(job, None)
