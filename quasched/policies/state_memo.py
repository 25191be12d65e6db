"""Memo of per-node-state scores, shared by the state-based score plugins (FGD, Headroom)."""

from __future__ import annotations

from typing import Callable, Hashable

import numpy as np

from quasched.metrics.fragmentation import NodeStates


class StateScoreMemo:
    """Scores per (pod key, node state), ``width`` columns each, grown as new states appear.

    ``lookup`` returns the rows of ``states`` and calls ``compute(missing)``
    (one ``(len(missing), width)`` block) only for states never scored with
    that key (NaN marks a state not computed yet; scores are never NaN). Bounded: it forgets everything when the state table starts a new
    generation or when more than ``max_keys`` pod keys were seen.
    """

    def __init__(self, states: NodeStates, max_keys: int = 4096) -> None:
        self.states = states
        self.max_keys = max_keys
        self._generation = states.generation
        self._tables: dict[Hashable, np.ndarray] = {}

    def lookup(self, key: Hashable, ids: np.ndarray, width: int,
               compute: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """Scores of states ``ids``: ``(n,)`` when ``width`` is 1, else ``(n, width)`` (``(n, 0)`` for no columns)."""
        if width == 0:  # e.g. a model without GPU shapes: nothing to compute or keep
            return np.zeros((len(ids), 0))
        if self._generation != self.states.generation or len(self._tables) > self.max_keys:
            self._tables.clear()
            self._generation = self.states.generation
        n_states = len(self.states)
        values = self._tables.get(key)
        if values is None or len(values) < n_states:
            grown = np.full((max(2 * n_states, 64), width) if width > 1 else max(2 * n_states, 64), np.nan)
            if values is not None:
                grown[: len(values)] = values
            values = self._tables[key] = grown
        scores = values[ids]
        unknown = np.isnan(scores if width == 1 else scores[:, 0])  # NaN: never computed (rows fill at once)
        if unknown.any():
            missing = np.unique(ids[unknown])
            computed = compute(missing)
            values[missing] = computed if width > 1 else computed[:, 0]
            scores = values[ids]
        return scores

    def lookup_best(self, key: Hashable, ids: np.ndarray, width: int,
                    compute: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """Row maxima of :meth:`lookup` ``(n,)``, memoised per state too: no ``(n, width)`` gather."""
        if width == 1:
            return self.lookup(key, ids, 1, compute)
        return self.lookup((key, "best"), ids, 1,
                           lambda missing: self.lookup(key, missing, width, compute).max(axis=1, keepdims=True))
