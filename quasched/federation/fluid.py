"""The fluid LP of the offline oracle (:mod:`.oracle`), solved by HiGHS.

One column ``v`` per (job, cluster, start); slots of :data:`~.dispatch.SLOT_S` seconds from ``t = 0``::

    minimise   sum_v x[v] * cost[v] + P * sum y[r, c, k]                   0 <= x <= 1, 0 <= y <= elastic
    subject to sum_{v of job j} x[v] = 1                                   every job
               sum_v x[v] * q[r, j(v)] * o[v, k] <= a * cap[r, c] + y[r, c, k] * cap[r, c]
                                                                           every cluster c, slot k < K, r in (GPU, CPU)

``o[v, k]`` is the share of slot ``k`` that column ``v``'s run covers (the slot's *mean* use must fit),
``a`` the derating of capacity; with ``elastic = 0`` there is no ``y``.
Costs are divided by the dearest column's (HiGHS's tolerances are absolute); ``P`` = 1000 such units
per unit of capacity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from quasched.federation.dispatch import SLOT_S
from quasched.optimize.highs import LinearModel, Solution

#: cost of one unit of capacity overflow ``y``, in units of the dearest column
PENALTY = 1000.0


@dataclass(frozen=True)
class Columns:
    """Per column: job (an index into the LP's jobs), cluster and start, s; ``offset``: each job's first column
    (plus the total)."""

    job: np.ndarray
    cluster: np.ndarray
    start: np.ndarray
    offset: np.ndarray

    @classmethod
    def of(cls, starts: Sequence[np.ndarray], placeable: np.ndarray) -> Columns:
        """Every start of ``starts[j]`` on every cluster where job ``j`` is placeable (``placeable[j]``; all if none)."""
        clusters = placeable.shape[1]
        sizes = np.array([len(s) for s in starts], dtype=np.int64) * clusters
        job = np.repeat(np.arange(len(starts)), sizes)
        cluster = np.concatenate([np.repeat(np.arange(clusters), len(s)) for s in starts])
        start = np.concatenate([np.tile(s, clusters) for s in starts])
        anywhere = np.asarray(placeable.any(axis=1))
        keep = placeable[job, cluster] | ~anywhere[job]
        job, cluster, start = job[keep], cluster[keep], start[keep]
        return cls(job, cluster, start, np.concatenate([[0], np.cumsum(np.bincount(job, minlength=len(starts)))]))


def occupancies(start: np.ndarray, duration: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For runs ``[start, start + duration)``: ``(run, slot, share)``, one entry per slot each run touches
    (at least one per run), the share of the slot it covers (:func:`~.carbon_aware.occupancy`, vectorised)."""
    first = np.floor_divide(start, SLOT_S).astype(np.int64)
    count = np.maximum(1, np.ceil((start + duration) / SLOT_S).astype(np.int64) - first)
    run = np.repeat(np.arange(len(start)), count)
    slot = first[run] + np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    end = (start + duration)[run]
    covered = np.minimum((slot + 1) * SLOT_S, end) - np.maximum(slot * SLOT_S, start[run])
    return run, slot, np.clip(covered, 0, None) / SLOT_S


@dataclass(frozen=True)
class FluidResult:
    """The solution, each column's share (zeros without a solution), each job's column of largest share and
    the cost unit (the solution's objective × ``-unit`` = the cost)."""

    solution: Solution
    share: np.ndarray
    best: np.ndarray
    unit: float


def solve_fluid(cols: Columns, cost: np.ndarray, duration: np.ndarray, demand: np.ndarray, capacity: np.ndarray,
                slots: int, derate: float = 1.0, elastic: float = 0.0, integral: bool = False,
                time_limit: float = 120.0) -> FluidResult:
    """The LP (MILP if ``integral``) above. ``duration``: per job, ``demand``: ``(2, jobs)``; ``capacity``:
    ``(2, clusters)``."""
    model = LinearModel()
    unit = max(float(cost.max(initial=0.0)), 1e-300)
    x = model.add_vars(len(cost), 0.0, 1.0, -cost / unit, integer=integral)
    for a, b in zip(cols.offset[:-1].tolist(), cols.offset[1:].tolist()):
        model.add_row(x[a:b], 1.0, 1.0, 1.0)
    clusters = capacity.shape[1]
    run, slot, share = occupancies(cols.start, duration[cols.job])
    inside = (slot >= 0) & (slot < slots)
    run, slot, share = run[inside], slot[inside], share[inside]
    rows, col, value = [], [], []
    for r in range(2):
        q = demand[r, cols.job[run]]
        on = q > 0
        rows.append((r * clusters + cols.cluster[run[on]]) * slots + slot[on])
        col.append(x[run[on]])
        value.append(q[on] * share[on])
    row, column, coef = (np.concatenate(a) for a in (rows, col, value))
    if len(row):
        order = np.argsort(row, kind="stable")
        row, column, coef = row[order], column[order], coef[order]
        unique, begin = np.unique(row, return_index=True)
        cap = np.repeat(capacity.reshape(-1), slots)[unique]
        hi = derate * cap
        y = model.add_vars(len(unique), 0.0, elastic, -PENALTY) if elastic > 0 else None
        for i, (a, b) in enumerate(zip(begin.tolist(), np.append(begin[1:], len(row)).tolist())):
            extra = ([y[i]], [-cap[i]]) if y is not None else ([], [])
            model.add_row(np.append(column[a:b], extra[0]).astype(np.int64), np.append(coef[a:b], extra[1]),
                          hi=float(hi[i]))
    solution = model.solve(time_limit=time_limit, rel_gap=1e-4)
    shares = solution.x[:len(cost)] if solution.x is not None else np.zeros(len(cost))
    best = np.array([a + int(np.argmax(shares[a:b])) for a, b in zip(cols.offset[:-1].tolist(), cols.offset[1:].tolist())],
                    dtype=np.int64)
    return FluidResult(solution, shares, best, unit)
