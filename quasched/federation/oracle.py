"""Offline oracle: the cheapest plan over the whole horizon, an LP (or MILP) solved by HiGHS.

Variables ``x[j, c, s] in [0, 1]``: the share of job ``j`` run on cluster ``c`` from start ``s``
(``s`` = its arrival or a 15-minute slot boundary up to its latest start, as in :mod:`.carbon_aware`)::

    minimise   sum x[j, c, s] * g[j, c, s] + P * sum y[r, c, k]      g = kw[j, c] * integral of intensity_c * PUE_c over [s, s + d_j]
    subject to sum_{c, s} x[j, c, s] = 1                             every job runs once, starting by its latest start
               sum_{j, s} x[j, c, s] * q[r, j] * o[j, s, k] <= (a + y[r, c, k]) * capacity[r, c]
                                                                     every cluster c, slot k, r in (GPU, CPU); 0 <= y <= 1 - a

``o[j, s, k]`` is the share of slot ``k`` the run covers: each slot's mean use must fit. With
``a = 1`` (no ``y``) and ``x`` continuous this relaxes every schedule without deadline misses whose
starts are on that grid, so its optimum bounds their dynamic carbon (job model) from below
(``oracle-bound``); packing into nodes, fragmentation and queueing are ignored (a start off the
grid, e.g. after a queue wait, can in rare cases cost a little less than the grid's best).
``integral=True`` solves the MILP (one start per job; its optimum is >= the LP's).

The bound's plan collides in real clusters (the slot *mean* fits, the instant does not; nodes
fragment). :func:`replay_plans` and :func:`at_most` make an offline plan that replays with at most a target
number of misses: it derates the capacity rows to ``a`` < 1 (elastic: overflow ``y`` costs
``P`` = 1000 × the dearest run per unit of capacity, so inflexible peaks stay feasible), rounds each
job to its largest share, replays the plan through the engine (:class:`OraclePlan`: a job that does
not fit its planned cluster at its start goes to the cheapest other one where it fits), and keeps
the cheapest replay over ``a`` in :data:`DERATE` that misses at most the target (else the fewest).
It knows the future (arrivals, durations, intensities): an oracle, not a bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from quasched.federation.carbon_aware import candidate_starts, occupancy
from quasched.federation.dispatch import Decision, Dispatcher, View
from quasched.federation.engine import FederationRun, make_view, run_federation
from quasched.federation.metrics import job_carbon_kg, missed
from quasched.federation.scenario import Scenario
from quasched.metrics.power import GRAMS_PER_KG
from quasched.optimize.highs import LinearModel

#: capacity derating factors ``a`` tried by :func:`replay_plans`, in order
DERATE = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)


@dataclass(frozen=True)
class OracleResult:
    """Solver status, the dual bound and the rounded plan's carbon (job model, kg), the plan, the
    jobs whose largest share is below 1, the MIP gap (0 for the LP), size and solve time."""

    status: str
    bound_kg: float
    plan_kg: float
    plan: list[Decision]
    fractional: int
    gap: float
    variables: int
    time_s: float


def _columns(view: View, arrival: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per variable: job, cluster (where the job is placeable; all if nowhere), start; and each job's
    first variable (plus the total)."""
    starts = [candidate_starts(now, float(view.latest_start[j])) for j, now in enumerate(arrival.tolist())]
    sizes = np.array([len(s) for s in starts]) * view.clusters
    job = np.repeat(np.arange(len(arrival)), sizes)
    cluster = np.concatenate([np.repeat(np.arange(view.clusters), len(s)) for s in starts])
    start = np.concatenate([np.tile(s, view.clusters) for s in starts])
    anywhere = np.asarray(view.placeable.any(axis=1))
    keep = view.placeable[job, cluster] | ~anywhere[job]
    job, cluster, start = job[keep], cluster[keep], start[keep]
    return job, cluster, start, np.concatenate([[0], np.cumsum(np.bincount(job, minlength=len(arrival)))])


def solve_oracle(view: View, arrival: np.ndarray, integral: bool = False, time_limit: float = 120.0,
                 derate: float = 1.0) -> OracleResult:
    """The LP/MILP above over ``view``'s horizon with capacity rows derated to ``derate``."""
    job, cluster, start, offset = _columns(view, arrival)
    slots = view.slots
    model = LinearModel()
    grams = view.run_grams(job, cluster, start)
    unit = max(float(grams.max(initial=0.0)), 1e-300)  # costs in units of the dearest run: HiGHS's tolerances are absolute
    x = model.add_vars(len(job), 0.0, 1.0, -grams / unit, integer=integral)
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
        capacity = np.repeat(view.capacity.reshape(-1), slots)[unique]
        penalty = 1000.0
        y = model.add_vars(len(unique), 0.0, 1.0 - derate, -penalty) if derate < 1 else None
        for i, (a, b) in enumerate(zip(begin.tolist(), np.append(begin[1:], len(row)).tolist())):
            extra = ([y[i]], [-capacity[i]]) if y is not None else ([], [])
            model.add_row(np.append(x[col[a:b]], extra[0]).astype(np.int64), np.append(value[a:b], extra[1]),
                          hi=derate * float(capacity[i]))
    solution = model.solve(time_limit=time_limit, rel_gap=1e-4)
    share = solution.x[:len(job)] if solution.x is not None else np.zeros(len(job))
    best = np.array([a + int(np.argmax(share[a:b])) for a, b in zip(offset[:-1].tolist(), offset[1:].tolist())],
                    dtype=np.int64)
    plan = [Decision(int(cluster[k]), float(start[k])) for k in best]
    return OracleResult(solution.status, -solution.bound * unit / GRAMS_PER_KG, float(grams[best].sum() / GRAMS_PER_KG), plan,
                        int((share[best] < 1 - 1e-6).sum()), solution.gap, len(job), solution.time)


class OraclePlan(Dispatcher):
    """Follows an oracle's plan: job ``j`` goes to ``plan[j]``; if it does not fit there at its start,
    to the other clusters in order of its carbon from then."""

    name = "oracle-plan"

    def __init__(self, plan: list[Decision]) -> None:
        self.plan = plan

    def dispatch(self, job: int, now: float) -> Decision:
        return self.plan[job]

    def reroute(self, job: int, now: float, cluster: int) -> list[int]:
        others = np.array([c for c in range(self.view.clusters) if c != cluster], dtype=np.int64)
        cost = self.view.run_grams(np.full(len(others), job), others, np.full(len(others), now))
        return others[np.argsort(cost, kind="stable")].tolist()


@dataclass(frozen=True)
class Executable:
    """One derated plan: its derating, solve and replay (misses, job-model kg)."""

    derate: float
    result: OracleResult
    run: FederationRun
    missed: int
    carbon_kg: float


def replay_plans(scenario: Scenario, policy: str = "fgd", seed: int = 42, derate: Sequence[float] = DERATE,
                 time_limit: float = 60.0) -> list[Executable]:
    """The LP's rounded plan with each capacity derating of ``derate``, replayed through the engine."""
    view, tried = make_view(scenario), []
    for a in derate:
        result = solve_oracle(view, scenario.arrival, time_limit=time_limit, derate=a)
        run = run_federation(scenario, OraclePlan(result.plan), policy, seed)
        tried.append(Executable(a, result, run, int(missed(run).sum()), job_carbon_kg(run)))
    return tried


def at_most(tried: Sequence[Executable], target: int) -> Executable:
    """The cheapest replay missing at most ``target`` deadlines (else, of those missing the fewest)."""
    return min(tried, key=lambda e: (max(e.missed - target, 0), e.carbon_kg))
