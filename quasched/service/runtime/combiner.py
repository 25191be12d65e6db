"""Group commit: submissions of the event loop run in batches under one lock (one writer thread at a time).

``await combiner.submit(item)`` queues ``item``; while anything is queued, one worker thread takes the lock and
runs every item queued by then in one call (one store transaction and one scheduling cycle for all of them),
then hands each awaiting request its answer, all of one batch at once. Alone, an item runs at once; under load,
batches grow by themselves with the number of requests that arrived while the previous batch ran, so the fixed
cost of a commit and a cycle is shared and no request occupies a thread while it waits."""

from __future__ import annotations

import asyncio
import threading
from typing import Callable, ContextManager, Generic, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

Waiting = tuple[T, asyncio.AbstractEventLoop, "asyncio.Future[R]"]


class Combiner(Generic[T, R]):
    """``await combiner.submit(item)`` returns ``run(batch)``'s answer for ``item`` (or raises its exception),
    where ``run`` gets every item queued when the worker thread took ``lock``, in arrival order, and returns one
    result or exception per item."""

    def __init__(self, lock: ContextManager[object], run: Callable[[list[T]], list[R | Exception]]) -> None:
        self._lock = lock
        self._run = run
        self._mutex = threading.Lock()
        self._queue: list[Waiting[T, R]] = []
        self._draining = False

    async def submit(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[R] = loop.create_future()
        with self._mutex:
            self._queue.append((item, loop, answer))
            start, self._draining = not self._draining, True
        if start:
            try:
                loop.run_in_executor(None, self._drain)
            except RuntimeError:  # the loop is shutting down: take the submission back
                with self._mutex:
                    self._queue = [w for w in self._queue if w[2] is not answer]
                    self._draining = False
                raise
        return await answer

    def _drain(self) -> None:
        """(A worker thread.) Run what is queued, batch after batch, until nothing is."""
        while True:
            with self._lock:
                with self._mutex:
                    batch, self._queue = self._queue, []
                    if not batch:
                        self._draining = False
                        return
                try:
                    answers = self._run([item for item, _, _ in batch])
                except Exception as err:  # the whole batch failed (e.g. the database): every request says so
                    answers = [err] * len(batch)
            for loop in {loop for _, loop, _ in batch}:
                try:
                    loop.call_soon_threadsafe(_settle, [(w, a) for w, a in zip(batch, answers, strict=True)
                                                        if w[1] is loop])
                except RuntimeError:  # that event loop has closed: nobody there waits any more
                    pass


def _settle(answered: Sequence[tuple[Waiting[T, R], R | Exception]]) -> None:
    """(In the requests' event loop.) Each awaiting request gets its answer (unless it gave up)."""
    for (_, _, waiting), answer in answered:
        if waiting.done():
            continue
        if isinstance(answer, Exception):
            waiting.set_exception(answer)
        else:
            waiting.set_result(answer)
