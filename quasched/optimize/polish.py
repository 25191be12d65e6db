"""Classical polish of pricing samples: repair, then steepest ascent over small moves.

A QUBO sample of the pricing question (:func:`quasched.optimize.qubo.pattern_qubo`)
decodes to shape counts that may overfill the machine and are rarely a local
optimum: single-flip annealing cannot cross the penalty barriers between tight
machine contents (moving a job means changing its bits and the slack bits at
once). The polish repairs a sample (drops the job that buys the most overflow
relief per unit of price) and then climbs: add a job, swap one job for another,
or swap one for two, taking the best feasible gain until none is left.

This is the usual classical post-processing of annealer samples; it is measured
separately (``benchmarks/batch.py ablation``) so its share of the result is known.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import combinations_with_replacement

import numpy as np

from quasched.optimize.colgen import Shapes


@lru_cache(maxsize=8)
def moves(n_shapes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The neighbourhood as ``(plus, plus2, minus)`` shape indices, ``n_shapes`` meaning none:
    add a job, swap one for another, swap one for two."""
    none = n_shapes
    shapes = range(n_shapes)
    triples = [(i, none, none) for i in shapes]
    triples += [(i, none, k) for i in shapes for k in shapes if k != i]
    triples += [(i, j, k) for i, j in combinations_with_replacement(shapes, 2) for k in shapes if k not in (i, j)]
    plus, plus2, minus = (np.array(column, dtype=np.int64) for column in zip(*triples))
    return plus, plus2, minus


def repair(sh: Shapes, t: int, a: np.ndarray, price: np.ndarray) -> np.ndarray:
    """Drop jobs from counts ``a`` until they fit a machine of type ``t``."""
    a = np.clip(np.minimum(a, sh.fit[t]), 0, None)
    scale = np.maximum(sh.capacity[t], 1)
    while not sh.feasible(t, a):
        over = np.maximum(a @ sh.demand - sh.capacity[t], 0)
        present = np.flatnonzero(a)
        if over.any():
            relief = (np.minimum(sh.demand[present], over) / scale).sum(axis=1)
        else:  # only the heavy-job rule is broken: drop a heavy or lo-heavy job
            relief = (sh.hi[t] | sh.lo_only[t])[present].astype(float)
        a[present[np.argmin(price[present] / (relief + 1e-12))]] -= 1
    return a


def polish(sh: Shapes, t: int, starts: np.ndarray, price: np.ndarray) -> np.ndarray:
    """Each row of ``starts`` (counts) repaired, then climbed to a pattern with no improving
    move at ``price``: feasible and at least as valuable as the repaired start.

    Moves are checked incrementally (capacity left, room per shape, heavy counts), the
    best gain first, so a step costs O(moves) rather than O(moves x shapes).
    """
    plus, plus2, minus = moves(sh.n_shapes)

    def padded(values: np.ndarray) -> np.ndarray:  # index n_shapes is "no shape"
        return np.append(values, 0)

    gain = padded(price)[plus] + padded(price)[plus2] - padded(price)[minus]
    order = np.flatnonzero(gain > 1e-12)
    order = order[np.argsort(-gain[order], kind="stable")]
    plus, plus2, minus = plus[order], plus2[order], minus[order]
    demand = np.vstack([sh.demand, np.zeros(sh.demand.shape[1], dtype=sh.demand.dtype)])
    use = demand[plus] + demand[plus2] - demand[minus]
    hi, lo = padded(sh.hi[t]).astype(np.int64), padded(sh.lo_only[t]).astype(np.int64)
    d_hi, d_lo = hi[plus] + hi[plus2] - hi[minus], lo[plus] + lo[plus2] - lo[minus]
    need = 1 + (plus == plus2)
    out = np.empty_like(starts)
    for row, start in enumerate(starts):
        a = np.append(repair(sh, t, start, price), 0)  # a[-1]: the "no shape" slot
        while len(order):
            room = np.append(sh.fit[t] - a[:-1], 2)
            heavy, light = d_hi + a @ hi, d_lo + a @ lo
            ok = ((room[plus] >= need) & (room[plus2] >= 1) & ((a[minus] >= 1) | (minus == sh.n_shapes))
                  & np.all(use <= sh.capacity[t] - a[:-1] @ sh.demand, axis=1)
                  & (heavy <= 1) & ((heavy == 0) | (light == 0)))
            if not ok.any():
                break
            k = int(np.argmax(ok))  # moves are sorted by gain: the first feasible one is the best
            a[plus[k]] += 1
            a[plus2[k]] += 1
            a[minus[k]] -= 1
            a[-1] = 0
        out[row] = a[:-1]
    return out
