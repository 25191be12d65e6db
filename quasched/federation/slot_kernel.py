"""Compiled per-slot terms of the carbon-aware rule (numba): one pass over a ``(2, clusters, slots)`` ledger window
instead of one NumPy temporary per operation.

Each kernel does the float operations of the NumPy expression it replaces, in the same order, so it returns the same
values (``tests/test_federation_slot_kernel.py`` holds them equal under hypothesis). Powers stay in NumPy: its
``np.power`` (SIMD) and the C library's ``pow`` differ in the last bit. ``cache=True`` keeps the compiled code in
``__pycache__``.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def load_share(ledger: np.ndarray, demand: np.ndarray, capacity: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``(clusters, slots)``: ``min(1, max_r (ledger[r] + demand[r]) / capacity[r]))``, ``capacity`` ``(2, clusters)``."""
    clusters, slots = ledger.shape[1], ledger.shape[2]
    out = np.empty((clusters, slots))
    for c in range(clusters):
        for k in range(slots):
            gpu = (ledger[0, c, k] + demand[0]) / capacity[0, c]
            cpu = (ledger[1, c, k] + demand[1]) / capacity[1, c]
            share = gpu if gpu >= cpu else cpu
            out[c, k] = share if share <= 1.0 else 1.0
    return out


@njit(cache=True, nogil=True)
def over_limit(ledger: np.ndarray, demand: np.ndarray, limit: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``(clusters, slots)``: is ``ledger[r] + demand[r] > limit[r]`` for some resource ``r`` (``limit`` ``(2, clusters)``)."""
    clusters, slots = ledger.shape[1], ledger.shape[2]
    out = np.empty((clusters, slots), dtype=np.bool_)
    for c in range(clusters):
        for k in range(slots):
            out[c, k] = ledger[0, c, k] + demand[0] > limit[0, c] or ledger[1, c, k] + demand[1] > limit[1, c]
    return out


@njit(cache=True, nogil=True)
def least_after(ledger: np.ndarray, demand: np.ndarray, top: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``(2, slots)``: ``min_c max(0, max(0, top[r, c] − ledger[r, c]) − demand[r])``, the room per resource left by a
    job of ``demand`` on the fullest cluster (``top``: ``fill`` × capacity, ``(2, clusters)``)."""
    resources, clusters, slots = ledger.shape
    out = np.empty((resources, slots))
    for r in range(resources):
        for c in range(clusters):
            for k in range(slots):
                room = top[r, c] - ledger[r, c, k]
                room = room if room > 0.0 else 0.0
                after = room - demand[r]
                after = after if after > 0.0 else 0.0
                if c == 0 or after < out[r, k]:
                    out[r, k] = after
    return out
