"""Where the runs of a sweep execute: in process, a local process pool (the default) or Ray.

A backend maps a module-level function over tasks and yields ``(task, result)``
pairs as runs finish, in any order. ``initializer(*initargs)`` prepares each
worker (the pool forks workers with it, so large inputs are shared, not sent
per task); tasks must not depend on it under Ray, which has no initializer.
Ray is optional (``pip install 'quasched[ray]'``) and imported only here, when
a :class:`RayBackend` starts.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Iterator, Protocol, Sequence, TypeVar

from quasched.extras import require

T = TypeVar("T")
R = TypeVar("R")
Initializer = Callable[..., None] | None


class Backend(Protocol):
    """Runs ``fn`` over ``tasks``; yields ``(task, fn(task))`` as each finishes."""

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], initializer: Initializer = None,
            initargs: tuple = ()) -> Iterator[tuple[T, R]]: ...


class LocalBackend:
    """A fork-based process pool of ``workers`` (default: one per core); in process when 1."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], initializer: Initializer = None,
            initargs: tuple = ()) -> Iterator[tuple[T, R]]:
        workers = max(1, min(self.workers, len(tasks)))
        if workers == 1:
            if initializer is not None:
                initializer(*initargs)
            for task in tasks:
                yield task, fn(task)
            return
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"), initializer=initializer,
                                 initargs=initargs) as pool:
            futures = {pool.submit(fn, task): task for task in tasks}
            for future in as_completed(futures):
                yield futures[future], future.result()


class RayBackend:
    """Ray tasks on a running cluster (``address``) or a local one started on first use."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        require("ray", "ray")  # a missing Ray is an error here, before any run
        self.address = address
        self.num_cpus = num_cpus

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], initializer: Initializer = None,
            initargs: tuple = ()) -> Iterator[tuple[T, R]]:
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, num_cpus=None if self.address else self.num_cpus,
                     include_dashboard=False, log_to_driver=False)
        remote = ray.remote(fn)
        pending: dict[Any, T] = {remote.remote(task): task for task in tasks}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            task = pending.pop(ready[0])
            yield task, ray.get(ready[0])


def make_backend(name: str, workers: int | None = None, address: str | None = None) -> Backend:
    """``"local"`` (process pool; ``workers=1``: in process) or ``"ray"``."""
    if name == "local":
        return LocalBackend(workers)
    if name == "ray":
        return RayBackend(address, workers)
    raise ValueError(f"unknown backend {name!r}; use 'local' or 'ray'")
