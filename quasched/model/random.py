"""Random streams used by experiments.

Every random decision of an experiment goes through a :class:`RandomStream`,
so one seed reproduces a run. :class:`NumpyStream` is the native stream; the
bit-exact port of Go's ``math/rand`` (with the extra draws the Go simulator
spends at the engine events below) lives in :mod:`quasched.model.gorand`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class RandomStream(Protocol):
    """The draws an experiment needs."""

    def intn(self, n: int) -> int:
        """Uniform integer in ``[0, n)``."""

    def shuffle(self, items: list) -> None:
        """Shuffle ``items`` in place."""

    def perm(self, n: int) -> list[int]:
        """A uniform random permutation of ``range(n)``."""

    def pick(self, items: list) -> object:
        """One of ``items``, uniformly."""

    def after_seed(self) -> None:
        """Called right after seeding (hooks let a reference stream spend its extra draws)."""

    def after_tuning(self) -> None:
        """Called between workload tuning and the node ranking."""

    def on_schedule_cycle(self) -> None:
        """Called once per scheduling cycle (Go spends one draw there)."""


class NumpyStream:
    """Native stream on :func:`numpy.random.default_rng`."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def intn(self, n: int) -> int:
        return int(self.rng.integers(n))

    def shuffle(self, items: list) -> None:
        order = self.rng.permutation(len(items))
        items[:] = [items[i] for i in order]

    def perm(self, n: int) -> list[int]:
        return self.rng.permutation(n).tolist()

    def pick(self, items: list) -> object:
        return items[int(self.rng.integers(len(items)))]

    def after_seed(self) -> None:
        return None

    def after_tuning(self) -> None:
        return None

    def on_schedule_cycle(self) -> None:
        return None
