"""Group commit: requests waiting for the lock run as one group; each gets its own answer or exception."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from quasched.service.combiner import Combiner


def test_requests_waiting_for_the_lock_run_as_one_group():
    lock, groups = threading.RLock(), []

    def run(items: list[int]) -> list[int | Exception]:
        groups.append(items)
        return [ValueError(f"bad {i}") if i < 0 else i * 10 for i in items]

    combine: Combiner[int, int] = Combiner(lock, run)
    with ThreadPoolExecutor(4) as pool:
        with lock:  # a group under way: the four requests queue behind it
            futures = [pool.submit(combine, i) for i in (1, 2, -3, 4)]
            while len(combine._queue) < 4:
                time.sleep(0.01)
        assert [f.result() for f in futures if f.exception() is None] == [10, 20, 40]
        with pytest.raises(ValueError, match="bad -3"):
            futures[2].result()
    assert len(groups) == 1 and sorted(groups[0]) == [-3, 1, 2, 4]
    assert combine(5) == 50 and groups[-1] == [5]  # alone: runs at once


def test_a_failed_group_fails_every_request_in_it():
    def run(items: list[int]) -> list[int | Exception]:
        raise RuntimeError("database down")

    with pytest.raises(RuntimeError, match="database down"):
        Combiner(threading.Lock(), run)(1)
