"""Group commit: submissions queued while a batch runs form the next batch; each gets its own answer or exception."""

from __future__ import annotations

import asyncio
import threading

import pytest

from quasched.service.runtime.combiner import Combiner


def test_submissions_queued_while_the_lock_is_held_run_as_one_group():
    lock, groups = threading.RLock(), []

    def run(items: list[int]) -> list[int | Exception]:
        groups.append(items)
        return [ValueError(f"bad {i}") if i < 0 else i * 10 for i in items]

    combine: Combiner[int, int] = Combiner(lock, run)

    async def main() -> list[int | BaseException]:
        lock.acquire()  # a group under way: the four submissions queue behind it
        tasks = [asyncio.create_task(combine.submit(i)) for i in (1, 2, -3, 4)]
        while len(combine._queue) < 4:
            await asyncio.sleep(0.01)
        lock.release()
        return await asyncio.gather(*tasks, return_exceptions=True)

    first, second, third, fourth = asyncio.run(main())
    assert (first, second, fourth) == (10, 20, 40)
    assert isinstance(third, ValueError) and str(third) == "bad -3"
    assert groups == [[1, 2, -3, 4]]
    assert asyncio.run(combine.submit(5)) == 50 and groups[-1] == [5]  # alone: runs at once


def test_a_failed_group_fails_every_submission_in_it_and_the_next_one_runs():
    calls = []

    def run(items: list[int]) -> list[int | Exception]:
        calls.append(items)
        if len(calls) == 1:
            raise RuntimeError("database down")
        return items

    combine: Combiner[int, int] = Combiner(threading.Lock(), run)
    with pytest.raises(RuntimeError, match="database down"):
        asyncio.run(combine.submit(1))
    assert asyncio.run(combine.submit(2)) == 2


def test_a_submission_whose_event_loop_closed_does_not_stall_the_next_ones():
    lock, answers = threading.Lock(), []
    combine: Combiner[int, int] = Combiner(lock, lambda items: [i * 10 for i in items])
    lock.acquire()  # a group under way
    first = threading.Thread(target=lambda: answers.append(asyncio.run(combine.submit(1))))
    first.start()
    while len(combine._queue) < 1:
        threading.Event().wait(0.01)
    with pytest.raises(TimeoutError):  # this request gives up and its event loop closes before the group ran
        asyncio.run(asyncio.wait_for(combine.submit(2), 0.1))
    lock.release()
    first.join(10)
    assert answers == [10]
    assert asyncio.run(asyncio.wait_for(combine.submit(3), 10)) == 30
