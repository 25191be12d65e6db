"""Offline oracle: the cheapest plan over the whole horizon, an LP (or MILP) solved by HiGHS.

Variables ``x[j, c, s] in [0, 1]``: the share of job ``j`` run on cluster ``c`` from start ``s``
(``s`` = its arrival or a 15-minute slot boundary up to its latest start, as in :mod:`.carbon_aware`)::

    minimise   sum x[j, c, s] * g[j, c, s]       g = kw[j, c] * integral of intensity_c * PUE_c over [s, s + d_j]
    subject to sum_{c, s} x[j, c, s] = 1         every job runs once, by its deadline
               sum_{j, s} x[j, c, s] * q[r, j] * o[j, s, k] <= capacity[r, c]   every cluster c, slot k, r in (GPU, CPU)

``o[j, s, k]`` is the share of slot ``k`` the run covers: each slot's mean use must fit. With
``x`` continuous this relaxes every schedule without deadline misses whose starts are on that
grid, so its optimum bounds their dynamic carbon (job model) from below; packing into nodes,
fragmentation and queueing are ignored (a start off the grid, e.g. after a queue wait, can in
rare cases cost a little less than the grid's best). ``integral=True`` solves the MILP (one start per job). :class:`OraclePlan` replays
a plan (each job's largest share) through the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from quasched.federation.carbon_aware import candidate_starts, occupancy
from quasched.federation.dispatch import Decision, Dispatcher, View
from quasched.metrics.power import GRAMS_PER_KG
from quasched.optimize.highs import LinearModel


@dataclass(frozen=True)
class OracleResult:
    status: str
    bound_kg: float
    plan: list[Decision]
    variables: int
    time_s: float


def _columns(view: View, arrival: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per variable: job, cluster, start; and each job's first variable (plus the total)."""
    starts = [candidate_starts(now, float(view.latest_start[j])) for j, now in enumerate(arrival.tolist())]
    sizes = np.array([len(s) for s in starts]) * view.clusters
    job = np.repeat(np.arange(len(arrival)), sizes)
    cluster = np.concatenate([np.repeat(np.arange(view.clusters), len(s)) for s in starts])
    start = np.concatenate([np.tile(s, view.clusters) for s in starts])
    return job, cluster, start, np.concatenate([[0], np.cumsum(sizes)])


def solve_oracle(view: View, arrival: np.ndarray, integral: bool = False, time_limit: float = 120.0) -> OracleResult:
    """The LP/MILP above over ``view``'s horizon (bound: dynamic carbon in the job model, kg)."""
    job, cluster, start, offset = _columns(view, arrival)
    slots = view.slots
    model = LinearModel()
    x = model.add_vars(len(job), 0.0, 1.0, -view.run_grams(job, cluster, start) / GRAMS_PER_KG, integer=integral)
    for a, b in zip(offset[:-1].tolist(), offset[1:].tolist()):
        model.add_row(x[a:b], 1.0, 1.0, 1.0)
    rows, cols, values = [], [], []
    for k, (j, c, s) in enumerate(zip(job.tolist(), cluster.tolist(), start.tolist())):
        first, share = occupancy(s, float(view.duration[j]))
        h = first + np.arange(len(share))
        h, share = h[h < slots], share[h < slots]
        for r in np.flatnonzero(view.demand[:, j] > 0).tolist():
            rows.append((r * view.clusters + c) * slots + h)
            cols.append(np.full(len(h), k))
            values.append(view.demand[r, j] * share)
    if rows:
        row, col, value = (np.concatenate(a) for a in (rows, cols, values))
        order = np.argsort(row, kind="stable")
        row, col, value = row[order], col[order], value[order]
        unique, begin = np.unique(row, return_index=True)
        capacity = np.repeat(view.capacity.reshape(-1), slots)
        for r, a, b in zip(unique.tolist(), begin.tolist(), np.append(begin[1:], len(row)).tolist()):
            model.add_row(x[col[a:b]], value[a:b], hi=float(capacity[r]))
    solution = model.solve(time_limit=time_limit, rel_gap=1e-4)
    share = solution.x if solution.x is not None else np.zeros(len(job))
    best = [a + int(np.argmax(share[a:b])) for a, b in zip(offset[:-1].tolist(), offset[1:].tolist())]
    plan = [Decision(int(cluster[k]), float(start[k])) for k in best]
    return OracleResult(solution.status, -solution.bound, plan, len(job), solution.time)


class OraclePlan(Dispatcher):
    """Follows an oracle's plan: job ``j`` goes to ``plan[j]``."""

    name = "oracle-plan"

    def __init__(self, plan: list[Decision]) -> None:
        self.plan = plan

    def dispatch(self, job: int, now: float) -> Decision:
        return self.plan[job]
