"""Memo of per-node-state scores, shared by the state-based score plugins (FGD, Headroom)."""

from __future__ import annotations

from typing import Callable, Hashable

import numpy as np

from quasched.metrics.fragmentation import NodeStates


class StateScoreMemo:
    """Scores per (pod key, node state), ``width`` columns each, grown as new states appear.

    ``lookup`` returns the rows of ``states`` and calls ``compute(missing)``
    (one ``(len(missing), width)`` block) only for states never scored with
    that key. Bounded: it forgets everything when the state table starts a new
    generation or when more than ``max_keys`` pod keys were seen.
    """

    def __init__(self, states: NodeStates, max_keys: int = 4096) -> None:
        self.states = states
        self.max_keys = max_keys
        self._generation = states.generation
        self._tables: dict[Hashable, tuple[np.ndarray, np.ndarray]] = {}

    def lookup(self, key: Hashable, ids: np.ndarray, width: int,
               compute: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        if self._generation != self.states.generation or len(self._tables) > self.max_keys:
            self._tables.clear()
            self._generation = self.states.generation
        n_states = len(self.states)
        entry = self._tables.get(key)
        if entry is None or len(entry[0]) < n_states:
            known = np.zeros(max(2 * n_states, 64), dtype=bool)
            values = np.zeros((len(known), width))
            if entry is not None:
                known[: len(entry[0])], values[: len(entry[0])] = entry
            entry = self._tables[key] = (known, values)
        known, values = entry
        missing = np.unique(ids[~known[ids]])
        if len(missing):
            values[missing] = compute(missing)
            known[missing] = True
        return values[ids]
