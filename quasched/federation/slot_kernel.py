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


@njit(cache=True, nogil=True)
def displaced_each(sample: np.ndarray, room: np.ndarray, after: np.ndarray,
                   expected: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``(clusters, samples, slots)``: ``F_s(room − q_j on c) − F_s(room)`` of :mod:`.displacement` per sample ``s``, from
    the samples ``(samples, 2 + clusters, slots)``, the room without and with the job (``room``, ``after``: ``(2, clusters,
    slots)``) and the intensity ``expected`` ``(clusters, slots)``. The water-filling: clusters by ``unit = P_s[c] I[c]``
    ascending (ties: cluster order), each takes ``min(left, share)`` of the load (``share = min_r room[r, c] / D_s[r]``,
    infinite for ``D_s[r] = 0``), the rest goes to the dirtiest; carbon ``sum take × unit + left × unit_last``."""
    samples, clusters, slots = sample.shape[0], room.shape[1], room.shape[2]
    out = np.empty((clusters, samples, slots))
    unit = np.empty(clusters)
    base = np.empty(clusters)
    held = np.empty(clusters)
    order = np.empty(clusters, dtype=np.int64)
    carbon = np.empty(clusters + 1)
    for s in range(samples):
        for k in range(slots):
            for c in range(clusters):
                unit[c] = sample[s, 2 + c, k] * expected[c, k]
                base[c] = _share(room, sample, s, c, k)
                held[c] = _share(after, sample, s, c, k)
                i = c  # stable insertion sort of the clusters by unit
                while i > 0 and unit[order[i - 1]] > unit[c]:
                    order[i] = order[i - 1]
                    i -= 1
                order[i] = c
            for v in range(clusters + 1):  # 0: as is; v: the job on cluster v − 1
                left, total = 1.0, 0.0
                for i in range(clusters):
                    c = order[i]
                    share = held[c] if c == v - 1 else base[c]
                    take = left if left <= share else share
                    total = total + take * unit[c]
                    left = left - take
                carbon[v] = total + left * unit[order[clusters - 1]]
            for c in range(clusters):
                out[c, s, k] = carbon[c + 1] - carbon[0]
    return out


@njit(cache=True, nogil=True)
def _share(room: np.ndarray, sample: np.ndarray, s: int, c: int, k: int) -> float:  # pragma: no cover - compiled
    """``min_r room[r, c, k] / D_s[r]`` (infinite where ``D_s[r] = 0``)."""
    gpu = room[0, c, k] / sample[s, 0, k] if sample[s, 0, k] > 0 else np.inf
    cpu = room[1, c, k] / sample[s, 1, k] if sample[s, 1, k] > 0 else np.inf
    return gpu if gpu <= cpu else cpu


@njit(cache=True, nogil=True)
def covered(first: int, last: int, start: float, end: float, slot_s: float) -> np.ndarray:  # pragma: no cover - compiled
    """Share of each slot ``first .. last − 1`` (``slot_s`` s each) that ``[start, end)`` covers:
    ``max(0, min((k + 1) slot_s, end) − max(k slot_s, start)) / slot_s``."""
    out = np.empty(last - first)
    for i in range(last - first):
        lo, hi = (first + i) * slot_s, (first + i + 1) * slot_s
        share = (hi if hi <= end else end) - (lo if lo >= start else start)
        out[i] = (share if share > 0.0 else 0.0) / slot_s
    return out


@njit(cache=True, nogil=True)
def loads_at(past: np.ndarray, lead: np.ndarray, least: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``(kept, 2 + clusters, slots)``: the load samples ``past`` ``(samples, 2 + clusters, leads)`` at each slot's ``lead``,
    only those whose demand exceeds ``least`` ``(2, slots)`` in some resource and slot (the others fit any cluster)."""
    samples, rows, slots = past.shape[0], past.shape[1], len(lead)
    keep = np.zeros(samples, dtype=np.bool_)
    for s in range(samples):
        for r in range(2):
            for k in range(slots):
                if least[r, k] < past[s, r, lead[k]]:
                    keep[s] = True
                    break
            if keep[s]:
                break
    out = np.empty((keep.sum(), rows, slots))
    i = 0
    for s in range(samples):
        if keep[s]:
            for r in range(rows):
                for k in range(slots):
                    out[i, r, k] = past[s, r, lead[k]]
            i += 1
    return out
