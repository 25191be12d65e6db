"""Memo of per-node-state scores, shared by the state-based scorers (FGD, Headroom)."""

from __future__ import annotations

from typing import Callable, Hashable

import numpy as np


class StateScoreMemo:
    """Scores per (pod key, node state id), grown as new node states appear.

    ``lookup`` returns the scores of ``states`` and calls ``compute(missing)``
    (returning one score per missing state) only for states never scored
    with that key.
    """

    def __init__(self, unknown: int) -> None:
        self.unknown = unknown
        self._tables: dict[Hashable, np.ndarray] = {}

    def lookup(self, key: Hashable, states: np.ndarray, n_states: int,
               compute: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        memo = self._tables.get(key)
        if memo is None or len(memo) < n_states:
            grown = np.full(max(2 * n_states, 64), self.unknown, dtype=np.int64)
            if memo is not None:
                grown[: len(memo)] = memo
            memo = self._tables[key] = grown
        scores = memo[states]
        missing = np.unique(states[scores == self.unknown])
        if len(missing):
            memo[missing] = compute(missing)
            scores = memo[states]
        return scores
