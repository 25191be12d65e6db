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

from quasched.federation.carbon_aware import candidate_starts
from quasched.federation.dispatch import Decision, Dispatcher, View
from quasched.federation.engine import FederationRun, make_view, run_federation
from quasched.federation.fluid import Columns, solve_fluid
from quasched.federation.metrics import job_carbon_kg, missed
from quasched.federation.scenario import Scenario
from quasched.metrics.power import GRAMS_PER_KG

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


def solve_oracle(view: View, arrival: np.ndarray, integral: bool = False, time_limit: float = 120.0,
                 derate: float = 1.0) -> OracleResult:
    """The LP/MILP above over ``view``'s horizon with capacity rows derated to ``derate``."""
    starts = [candidate_starts(now, float(view.latest_start[j])) for j, now in enumerate(arrival.tolist())]
    cols = Columns.of(starts, np.asarray(view.placeable))
    grams = view.run_grams(cols.job, cols.cluster, cols.start)
    fit = solve_fluid(cols, grams, view.duration, view.demand, view.capacity, view.slots, derate=derate,
                      elastic=1.0 - derate, integral=integral, time_limit=time_limit)
    solution, best = fit.solution, fit.best
    plan = [Decision(int(cols.cluster[k]), float(cols.start[k])) for k in best]
    return OracleResult(solution.status, -solution.bound * fit.unit / GRAMS_PER_KG, float(grams[best].sum() / GRAMS_PER_KG),
                        plan, int((fit.share[best] < 1 - 1e-6).sum()), solution.gap, len(cols.job), solution.time)


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
