"""Which worker pools a job started: the in-process driver decides by itself whether it
needs worker processes, and the tests check that decision, not just the output."""

from __future__ import annotations

from typing import List


def pool_starts(monkeypatch) -> List[int]:
    """From now on (for this test), each ``Pool`` the driver starts appends its number of
    worker processes to the returned list; the pool itself starts as usual."""
    from pipelines.inprocess import pool as shard_pool

    started: List[int] = []
    real = shard_pool.Pool.__init__

    def spy(self, blob, work, n, *a, **kw):
        started.append(n)
        real(self, blob, work, n, *a, **kw)

    monkeypatch.setattr(shard_pool.Pool, "__init__", spy)
    return started
