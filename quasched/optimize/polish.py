"""Classical polish of pricing samples: repair, then steepest ascent over small moves.

A QUBO sample of the pricing question (:func:`quasched.optimize.qubo.pattern_qubo`)
decodes to shape counts that may overfill the machine and are rarely a local
optimum: single-flip annealing cannot cross the penalty barriers between tight
machine contents (moving a job means changing its bits and the slack bits at
once). The polish repairs a sample (drops the job that buys the most overflow
relief per unit of price) and then climbs: add a job, swap one job for another,
or swap one for two, taking the best feasible gain until none is left.

This is the usual classical post-processing of annealer samples; it is measured
separately (``benchmarks/qubo_ablation.py``) so its share of the result is known.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import combinations_with_replacement

import numpy as np

from quasched.optimize.colgen import Shapes


@lru_cache(maxsize=8)
def moves(n_shapes: int) -> np.ndarray:
    """Count changes of the neighbourhood: +1 of a shape, +1/-1 of two, +2/-1 of three (rows)."""
    unit = np.eye(n_shapes, dtype=np.int64)
    swaps = (unit[:, None, :] - unit[None, :, :]).reshape(-1, n_shapes)
    pairs = np.array([unit[i] + unit[j] for i, j in combinations_with_replacement(range(n_shapes), 2)])
    two_for_one = (pairs[:, None, :] - unit[None, :, :]).reshape(-1, n_shapes)
    out = np.concatenate([unit, swaps, two_for_one])
    return out[out.any(axis=1)]


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


def polish(sh: Shapes, t: int, a: np.ndarray, price: np.ndarray) -> np.ndarray:
    """A feasible pattern at least as valuable at ``price`` as the repaired ``a``, with no
    improving move left."""
    a = repair(sh, t, a, price)
    step = moves(sh.n_shapes)
    step = step[step @ price > 1e-12]
    gain = step @ price
    while len(step):
        ok = sh.feasible_rows(t, a[None] + step)
        if not ok.any():
            break
        best = np.flatnonzero(ok)[np.argmax(gain[ok])]
        a = a + step[best]
    return a
