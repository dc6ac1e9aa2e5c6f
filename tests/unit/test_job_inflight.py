"""``pipelines.job.inflight``: many calls at once, results in input order, a bounded
number running and waiting, an error raised at its item's turn."""

from __future__ import annotations

import threading
import time

import pytest

from pipelines.job import inflight


def test_results_come_in_order_with_the_calls_overlapping():
    running = peak = 0
    lock = threading.Lock()

    def slow(i):
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.01 * (i % 3))  # later items often finish first
        with lock:
            running -= 1
        return i * i

    got = list(inflight.ordered(slow, range(100), requests=8))
    assert got == [(i, i * i) for i in range(100)]
    assert 1 < peak <= 8


def test_it_reads_no_further_ahead_than_twice_its_requests():
    taken = []

    def items():
        for i in range(1000):
            taken.append(i)
            yield i

    it = inflight.ordered(lambda i: i, items(), requests=4)
    assert next(it) == (0, 0)
    assert len(taken) <= 2 * 4 + 1
    it.close()


def test_an_error_is_raised_at_its_items_turn():
    def fails_at_5(i):
        if i == 5:
            raise OSError("gone")
        return i

    seen = []
    with pytest.raises(OSError, match="gone"):
        for i, _ in inflight.ordered(fails_at_5, range(20), requests=4):
            seen.append(i)
    assert seen == [0, 1, 2, 3, 4]
    assert inflight.each(lambda i: None, range(10), requests=3) == 10
