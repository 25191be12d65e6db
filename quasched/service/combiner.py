"""Group commit: requests of many threads run in batches under one lock (flat combining).

The thread that gets the lock runs every request queued by then in one call (one store
transaction and one scheduling cycle for all of them), and the threads whose requests it ran
find their answers when they get the lock. Alone, a request runs at once; under load, batches
grow by themselves with the number of waiting requests, so the fixed cost of a commit and a
cycle is shared."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Callable, ContextManager, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Combiner(Generic[T, R]):
    """``combiner(item)`` returns ``run(batch)``'s answer for ``item`` (or raises its exception), where
    ``run`` gets every item queued when this or another thread took ``lock``, in arrival order, and
    returns one result or exception per item."""

    def __init__(self, lock: ContextManager[object], run: Callable[[list[T]], list[R | Exception]]) -> None:
        self._lock = lock
        self._run = run
        self._mutex = threading.Lock()
        self._queue: list[tuple[T, Future[R]]] = []

    def __call__(self, item: T) -> R:
        slot: Future[R] = Future()
        with self._mutex:
            self._queue.append((item, slot))
        with self._lock:
            with self._mutex:
                batch, self._queue = self._queue, []
            if batch:
                try:
                    answers = self._run([queued for queued, _ in batch])
                except Exception as err:  # the whole batch failed (e.g. the database): every request says so
                    answers = [err] * len(batch)
                for (_, waiting), answer in zip(batch, answers, strict=True):
                    if isinstance(answer, Exception):
                        waiting.set_exception(answer)
                    else:
                        waiting.set_result(answer)
        return slot.result()
