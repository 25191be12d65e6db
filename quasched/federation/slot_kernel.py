"""Compiled per-slot terms of the carbon-aware rule (numba): one pass over a ``(2, clusters, slots)`` ledger window
instead of one NumPy temporary per operation.

Each kernel does the float operations of the NumPy expression it replaces, in the same order, so it returns the same
values (``tests/federation/test_federation_slot_kernel.py`` and ``tests/federation/test_federation_plan_kernel.py`` hold them equal under
hypothesis). Powers stay in NumPy: its ``np.power`` (SIMD) and the C library's ``pow`` differ in the last bit; so do
SciPy's Poisson odds and the dot products NumPy hands to BLAS. ``cache=True`` keeps the compiled code in
``__pycache__``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from quasched.federation.dispatch import SLOT_S
from quasched.metrics.power import SECONDS_PER_HOUR as HOUR


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
        out[i] = _covered(first + i, start, end, slot_s)
    return out


@njit(cache=True, nogil=True)
def _covered(k: int, start: float, end: float, slot_s: float) -> float:  # pragma: no cover - compiled
    """The share of slot ``k`` that ``[start, end)`` covers (:func:`covered`)."""
    lo, hi = k * slot_s, (k + 1) * slot_s
    share = (hi if hi <= end else end) - (lo if lo >= start else start)
    return (share if share > 0.0 else 0.0) / slot_s


@njit(cache=True, nogil=True)
def add_run(ledger: np.ndarray, cluster: int, first: int, stop: int, start: float, end: float, demand: np.ndarray,
            sign: float) -> None:  # pragma: no cover - compiled
    """Adds ``sign × demand[r] × share of slot k`` to ``ledger[r, cluster, k]`` for the slots ``first .. stop − 1`` of
    the run ``[start, end)`` (:func:`covered`)."""
    for r in range(ledger.shape[0]):
        scaled = sign * demand[r]
        for k in range(first, stop):
            ledger[r, cluster, k] += scaled * _covered(k, start, end, SLOT_S)


@njit(cache=True, nogil=True)
def cheapest(cost: np.ndarray, blocked: np.ndarray) -> tuple[int, int]:  # pragma: no cover - compiled
    """``(cluster, start)`` of the least ``cost`` not ``blocked`` (blocked: infinite), starts first, then clusters,
    the first of equals, a NaN first (``np.argmin`` of the transposed costs); ``(0, 0)`` if all are blocked."""
    best, at = np.inf, (0, 0)
    for s in range(cost.shape[1]):
        for c in range(cost.shape[0]):
            value = np.inf if blocked[c, s] else cost[c, s]
            if np.isnan(value):
                return c, s
            if value < best:
                best, at = value, (c, s)
    return at


@njit(cache=True, nogil=True)
def loads_at(past: np.ndarray, ahead: np.ndarray, least: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``(kept, 2 + clusters, slots)``: the load samples ``past`` ``(samples, 2 + clusters, leads)`` at each slot's ``ahead``,
    only those whose demand exceeds ``least`` ``(2, slots)`` in some resource and slot (the others fit any cluster)."""
    samples, rows, slots = past.shape[0], past.shape[1], len(ahead)
    keep = np.zeros(samples, dtype=np.bool_)
    for s in range(samples):
        for r in range(2):
            for k in range(slots):
                if least[r, k] < past[s, r, ahead[k]]:
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
                    out[i, r, k] = past[s, r, ahead[k]]
            i += 1
    return out


@njit(cache=True, nogil=True)
def plan(ledger: np.ndarray, demand: np.ndarray, limit: np.ndarray, rate: np.ndarray, now_slots: int, share: np.ndarray,
         starts: np.ndarray, now: float, kw: np.ndarray, delay: float, placeable: np.ndarray,
         cost: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """The plan's side of :meth:`~.carbon_aware.CarbonAware.options` for the ``(clusters, starts)`` candidates; returns
    ``blocked``: not ``placeable``, or a slot of the run (the first ``now_slots`` slots for the start now, slots
    ``s .. s + len(share) − 1`` for the ``s``-th later start) with ``ledger[r] + demand[r] > limit[r]``. Fills
    ``cost[:, 1:]`` when there are two or more later starts, ``sum_k rate[c, s + k] × share[k]`` in NumPy's order for
    them (from 0, term by term; for a single one NumPy calls BLAS, which sums in its own order, so the caller fills
    it, as it fills the start now's), then scales every cost by the run's energy per slot and the price of waiting:
    ``× kw[c] × SLOT_S / 1 h × (1 + delay × (start − now) / 1 h)``."""
    clusters, later, width = rate.shape[0], len(starts) - 1, len(share)
    blocked = np.empty((clusters, later + 1), dtype=np.bool_)
    full = over_limit(ledger, demand, limit)
    for c in range(clusters):
        blocked[c, 0] = full[c, :now_slots].any()
        count = 0  # full slots in the window of the s-th later start, slots s .. s + width − 1
        for k in range(1, width):
            count += full[c, k]
        for s in range(1, later + 1):
            count += full[c, s + width - 1]
            blocked[c, s] = count > 0
            count -= full[c, s]
            if later > 1:
                total = 0.0
                for k in range(width):
                    total += rate[c, s + k] * share[k]
                cost[c, s] = total
        energy = kw[c] * SLOT_S / HOUR
        for s in range(later + 1):
            blocked[c, s] |= not placeable[c]
            cost[c, s] *= energy * (1 + delay * (starts[s] - now) / HOUR)
    return blocked


@njit(cache=True, nogil=True)
def leads(index: np.ndarray, now: float, longest: int) -> np.ndarray:  # pragma: no cover - compiled
    """Per slot of ``index``: how far its end lies ahead of ``now``, in whole slots (rounded half to even), within
    ``0 .. longest``."""
    out = np.empty(len(index), dtype=np.int64)
    for i in range(len(index)):
        ahead = int(np.rint(((index[i] + 1) * SLOT_S - now) / SLOT_S))
        out[i] = min(max(ahead, 0), longest)
    return out


@njit(cache=True, nogil=True)
def _clip0(x: float) -> float:  # pragma: no cover - compiled
    """``np.clip(x, 0, None)`` (``np.maximum(x, 0)``)."""
    return x if x >= 0.0 or np.isnan(x) else 0.0


@njit(cache=True, nogil=True)
def busy_slots(ledger: np.ndarray, demand: np.ndarray, top: np.ndarray, most: np.ndarray, ahead: np.ndarray,
               expected: np.ndarray, past: np.ndarray) -> tuple[np.ndarray, ...]:  # pragma: no cover - compiled
    """What :meth:`~.displacement.Displacement.add` prices: the busy slots (where some sample's demand ``most``
    at the slot's ``ahead`` exceeds the room after the job on the fullest cluster, :func:`least_after`), ``alike``, per
    busy slot the run of alike busy slots it belongs to (equal time ahead, room and ``expected``: priced once), and per run
    the room without and with the job (``(2, clusters, runs)``, ``max(0, top − ledger)`` and ``max(0, that − demand)``),
    the samples that exceed the room somewhere (:func:`loads_at`) and ``expected``."""
    resources, clusters, slots = ledger.shape
    least = least_after(ledger, demand, top)
    busy = np.empty(slots, dtype=np.int64)
    count = 0
    for k in range(slots):
        if least[0, k] < most[0, ahead[k]] or least[1, k] < most[1, ahead[k]]:
            busy[count] = k
            count += 1
    busy = busy[:count]
    alike = np.empty(count, dtype=np.int64)
    pick = np.empty(count, dtype=np.int64)
    runs = 0
    for b in range(count):
        k = busy[b]
        new = b == 0 or ahead[k] != ahead[busy[b - 1]]
        for c in range(clusters):
            for r in range(resources):
                new = new or _clip0(top[r, c] - ledger[r, c, k]) != _clip0(top[r, c] - ledger[r, c, busy[b - 1]])
            new = new or expected[c, k] != expected[c, busy[b - 1]]
        if new:
            pick[runs] = k
            runs += 1
        alike[b] = runs - 1
    pick = pick[:runs]
    room = np.empty((resources, clusters, runs))
    after = np.empty((resources, clusters, runs))
    priced = np.empty((clusters, runs))
    for i in range(runs):
        for c in range(clusters):
            for r in range(resources):
                room[r, c, i] = _clip0(top[r, c] - ledger[r, c, pick[i]])
                after[r, c, i] = _clip0(room[r, c, i] - demand[r])
            priced[c, i] = expected[c, pick[i]]
    sample = loads_at(past, ahead[pick], least[:, pick])
    return busy, alike, room, after, sample, priced


@njit(cache=True, nogil=True)
def with_displaced(rate: np.ndarray, displaced: np.ndarray, busy: np.ndarray, alike: np.ndarray, hours: int,
                   kw: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``rate + d / hours / max(kw, 1e-9)`` per cluster, ``d`` the ``displaced`` carbon of the run of alike busy slots
    (:func:`busy_slots`) a slot belongs to, 0 elsewhere."""
    clusters, slots = rate.shape
    out = np.empty((clusters, slots))
    for c in range(clusters):
        per = kw[c] if kw[c] >= 1e-9 or np.isnan(kw[c]) else 1e-9
        b = 0
        for k in range(slots):
            d = 0.0
            if b < len(busy) and busy[b] == k:
                d = displaced[c, alike[b]]
                b += 1
            out[c, k] = rate[c, k] + d / hours / per
    return out


@njit(cache=True, nogil=True)
def boundaries(now: float, latest: float, slot_s: float) -> np.ndarray:  # pragma: no cover - compiled
    """``now``, then the slot boundaries ``k × slot_s`` after it up to ``latest``, ``k`` from ``floor(now / slot_s) + 1``
    (a float count, as ``np.arange`` gives it)."""
    first, stop = np.floor(now / slot_s) + 1, np.floor(max(now, latest) / slot_s) + 1
    out = np.empty(1 + max(int(np.ceil(stop - first)), 0))
    out[0], kept = now, 1
    for i in range(len(out) - 1):
        start = (first + i) * slot_s
        if start <= latest:
            out[kept], kept = start, kept + 1
    return out[:kept]


@njit(cache=True, nogil=True)
def crowded(expected: np.ndarray, gap: np.ndarray, scale: np.ndarray, price: float) -> np.ndarray:  # pragma: no cover
    """``expected + price × gap × scale``, elementwise ``(clusters, slots)`` (the rule's rate, ``scale = min(1, u) **
    power``)."""
    clusters, slots = expected.shape
    out = np.empty((clusters, slots))
    for c in range(clusters):
        for k in range(slots):
            out[c, k] = expected[c, k] + price * gap[c, k] * scale[c, k]
    return out


@njit(cache=True, nogil=True)
def protection_terms(load: np.ndarray, mu: np.ndarray, top: np.ndarray, used: np.ndarray,
                     intensity: np.ndarray) -> tuple[np.ndarray, ...]:  # pragma: no cover - compiled
    """The terms of :meth:`~.protection.Protection.charge` per slot ``k``: ``g = load / mu`` (0 where ``mu``
    is 0; ``live``: ``g > 0``, elsewhere ``g`` is 1), the clusters by ``intensity`` (``order``, stable, greenest
    first), per rank the ``room`` ``floor(sum of the free GPU milli max(0, top − used) of it and the greener / g)``
    (infinite free counts 0) and the ``gap`` to the next dirtier one (0 for the dirtiest)."""
    clusters, slots = intensity.shape
    g, live = np.empty(slots), np.empty(slots, dtype=np.bool_)
    order = np.empty((clusters, slots), dtype=np.int64)
    room, gap = np.empty((clusters, slots)), np.empty((clusters, slots))
    for k in range(slots):
        share = load[k] / mu[k] if mu[k] > 0 else 0.0
        live[k] = share > 0
        g[k] = share if live[k] else 1.0
        for c in range(clusters):  # stable insertion sort by intensity
            i = c
            while i > 0 and intensity[order[i - 1, k], k] > intensity[c, k]:
                order[i, k] = order[i - 1, k]
                i -= 1
            order[i, k] = c
        free = 0.0
        for i in range(clusters):
            c = order[i, k]
            room_c = _clip0(top[c] - used[c, k])
            room_c = room_c if np.isfinite(room_c) else 0.0
            free = room_c if i == 0 else free + room_c
            room[i, k] = np.floor(free / g[k])
            last = order[i + 1, k] if i + 1 < clusters else c
            gap[i, k] = intensity[last, k] - intensity[c, k]
    return g, live, order, room, gap


@njit(cache=True, nogil=True)
def protection_charge(odds: np.ndarray, gap: np.ndarray, g: np.ndarray, q: float, order: np.ndarray,
                      live: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """Per cluster and slot: ``odds × gap × g / q`` of the cluster's rank (:func:`protection_terms`), 0 where not live."""
    clusters, slots = odds.shape
    out = np.empty((clusters, slots))
    for k in range(slots):
        for i in range(clusters):
            out[order[i, k], k] = odds[i, k] * gap[i, k] * g[k] / q if live[k] else 0.0
    return out
