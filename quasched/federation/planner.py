"""Ours with a plan (``ours-lp``): a rolling-horizon fluid LP over the forecast, re-solved every ``every`` hours.

Flexible jobs are *held* from arrival until they start. At each re-plan point (the first arrival or
release at or after a multiple of ``every`` hours) the planner solves the fluid LP of :mod:`.fluid`
(the oracle's, over the forecast and only the jobs that have arrived) on hourly capacity slots over the
next ``horizon`` hours:

- jobs: the held ones (arrived, not started), at most ``jobs`` (those with the most energy, kw × duration);
- columns: each placeable cluster × start in {now} ∪ the boundaries of ``step``-hour slots up to
  min(latest start, end of the horizon);
- cost: ``kw[j, c] × ∫ I_c`` over the run × ``(1 + delay × wait / 1 h)``, ``I`` the intensity × PUE
  *forecast at now* (:meth:`~.carbon_aware.CarbonAware.expected`: the observed hour, then the forecast;
  never the future);
- capacity per cluster and hour: ``room`` × capacity − the hourly mean of the runs already committed
  (the ledger of :class:`~.carbon_aware.CarbonAware`), elastic (overflow costs :data:`~.fluid.PENALTY`);
  with ``expect`` > 0 also a divisible :class:`~.fluid.Load`: ``expect`` × the mean load of the inflexible
  jobs that arrived in the past :data:`MEMORY_H` hours, at its forecast carbon on each cluster.

Each held job follows its largest share (cluster, start): a start now commits it to that cluster if it
fits there now with nobody waiting; a later one holds it until ``min(start, next re-plan)``, when it
is re-decided. Inflexible jobs, held jobs outside the plan that are due before the next one, and planned
starts that do not fit take the rule of :class:`~.carbon_aware.CarbonAware`, whose ledger holds every
committed run and ``show`` × the held jobs' planned runs. Every solve has a HiGHS ``time_limit`` (s);
without a solution the held jobs keep to the rule. Defaults (``every`` 2 h, ``expect`` 0, ``show`` 0,
``step`` 1 h, ``horizon`` 24 h) were chosen on the tuning set only (BENCHMARKS.md).
"""

from __future__ import annotations

import time

import numpy as np

from quasched.federation.carbon_aware import CarbonAware, add_run, candidate_starts
from quasched.federation.dispatch import SLOTS_PER_HOUR, Decision, View, integral
from quasched.federation.fluid import Columns, Load, solve_fluid
from quasched.metrics.power import SECONDS_PER_HOUR as HOUR

#: hours of past inflexible arrivals behind the expected load
MEMORY_H = 24


class RollingPlanner(CarbonAware):
    name = "ours-lp"

    def __init__(self, horizon: float = 24, every: float = 2, jobs: float = 200, room: float = 1.0, expect: float = 0.0,
                 show: float = 0.0, step: float = 1.0, time_limit: float = 1.0, **rule: float) -> None:
        super().__init__(**rule)  # type: ignore[arg-type]
        if horizon < 1 or every <= 0 or jobs < 1 or not 0 < room <= 1 or expect < 0 or not 0 <= show <= 1 \
                or not 0 < step <= horizon or time_limit <= 0:
            raise ValueError("need horizon >= 1, every > 0, jobs >= 1, 0 < room <= 1, expect >= 0, 0 <= show <= 1, "
                             f"0 < step <= horizon, time_limit > 0; got {horizon}, {every}, {jobs}, {room}, {expect}, "
                             f"{show}, {step}, {time_limit}")
        self.horizon, self.every, self.jobs = int(horizon), every * HOUR, int(jobs)
        self.room, self.expect, self.show, self.step, self.time_limit = room, expect, show, step * HOUR, time_limit

    def reset(self, view: View) -> None:
        super().reset(view)
        self.held: dict[int, Decision | None] = {}  # held job -> its planned (cluster, start), None: not in the plan
        self.committed = self.ledger.copy()  # the ledger without the held jobs' plans
        self.next_plan = -np.inf
        self.solves, self.plan_cpu_s = 0, 0.0
        hours = view.intensity.shape[1] + 1
        self.inflexible = np.zeros((2, hours))  # per hour of arrival: the inflexible jobs' demand × duration / 1 h
        self.inflexible_kwh = np.zeros((view.clusters, hours))  # ... and their energy on each cluster

    def dispatch(self, job: int, now: float) -> Decision:
        v = self.view
        if v.latest_start[job] <= now:
            hour = min(int(now // HOUR), self.inflexible.shape[1] - 1)
            self.inflexible[:, hour] += v.demand[:, job] * v.duration[job] / HOUR
            self.inflexible_kwh[:, hour] += v.kw[job] * v.duration[job] / HOUR
            return super().dispatch(job, now)
        self.held[job] = None
        return self._follow(job, now)

    def release(self, job: int, now: float, cluster: int) -> Decision:
        return self._follow(job, now) if job in self.held else Decision(cluster, now)

    def _follow(self, job: int, now: float) -> Decision:
        """Re-plans if due, then starts, holds or hands over held ``job`` (module docstring)."""
        if now >= self.next_plan:
            self.plan(now)
        v, planned = self.view, self.held[job]
        if planned is not None and planned.start > now:
            return Decision(planned.cluster, min(planned.start, self.next_plan))
        if planned is None and v.latest_start[job] >= self.next_plan:
            return Decision(int(np.argmax(v.placeable[job])), self.next_plan)
        del self.held[job]
        if planned is not None:
            add_run(self.ledger, v, job, planned, -self.show)
        if planned is not None and v.load_after(job)[planned.cluster] <= 1 and v.queued[planned.cluster] == 0:
            return self.book(job, Decision(planned.cluster, now))
        return super().dispatch(job, now)

    def book(self, job: int, pick: Decision) -> Decision:
        add_run(self.committed, self.view, job, pick)
        return super().book(job, pick)

    def plan(self, now: float) -> None:
        """Solves the LP of the module docstring at ``now`` and records each held job's rounded plan."""
        began = time.process_time()
        v = self.view
        self.next_plan = (np.floor(now / self.every) + 1) * self.every
        held = np.array(sorted(self.held), dtype=np.int64)
        energy = v.kw[held].max(axis=1) * v.duration[held]
        jobs = held[np.sort(np.argsort(-energy, kind="stable")[:self.jobs])]
        self.held = dict.fromkeys(self.held.keys())
        self.ledger = self.committed.copy()
        if not len(jobs):
            return
        origin = now // HOUR * HOUR
        end = origin + self.horizon * HOUR
        cols = Columns.of([candidate_starts(now, min(float(v.latest_start[j]), end), self.step) for j in jobs],
                          np.asarray(v.placeable[jobs]))
        forecast = self.expected(now, int(now // HOUR) + np.arange(self.horizon + int(np.ceil(v.duration[jobs].max() / HOUR)) + 1))
        fit = solve_fluid(cols, self._grams(now, origin, forecast, jobs, cols), v.duration[jobs], v.demand[:, jobs], v.capacity,
                          self.horizon, used=self._committed_use(origin), slot_s=HOUR, origin=origin, derate=self.room,
                          elastic=np.inf, time_limit=self.time_limit, load=self.expected_load(now, forecast))
        if fit.solution.x is not None:
            for j, k in zip(jobs.tolist(), fit.best.tolist()):
                self.held[j] = pick = Decision(int(cols.cluster[k]), float(cols.start[k]))
                add_run(self.ledger, v, j, pick, self.show)
        self.solves += 1
        self.plan_cpu_s += time.process_time() - began

    def _grams(self, now: float, origin: float, forecast: np.ndarray, jobs: np.ndarray, cols: Columns) -> np.ndarray:
        """Each column's cost: its run's carbon on the hourly ``forecast`` from ``origin``, × the delay price."""
        prefix = np.hstack([np.zeros((len(forecast), 1)), np.cumsum(forecast, axis=1)])
        start = cols.start - origin
        end = start + self.view.duration[jobs[cols.job]]
        run = integral(forecast, prefix, cols.cluster, end) - integral(forecast, prefix, cols.cluster, start)
        return self.view.kw[jobs[cols.job], cols.cluster] * run * (1 + self.delay * (cols.start - now) / HOUR)

    def _committed_use(self, origin: float) -> np.ndarray:
        """``(2, clusters, horizon)``: the committed runs' mean use of each hour from ``origin``."""
        first = int(origin // HOUR) * SLOTS_PER_HOUR
        window = self.committed[:, :, first:first + self.horizon * SLOTS_PER_HOUR]
        used = np.zeros((2, self.view.clusters, self.horizon * SLOTS_PER_HOUR))
        used[:, :, :window.shape[2]] = window
        return used.reshape(2, self.view.clusters, self.horizon, SLOTS_PER_HOUR).mean(axis=3)

    def expected_load(self, now: float, forecast: np.ndarray) -> Load | None:
        """``expect`` × the mean hourly load of the inflexible jobs that arrived in the past :data:`MEMORY_H` hours
        (before the current one), flat over the horizon (the current hour: its remaining share)."""
        first = min(int(now // HOUR), self.inflexible.shape[1] - 1)
        past = slice(max(0, first - MEMORY_H), first)
        if self.expect == 0 or first == 0:
            return None
        left = np.ones(self.horizon)
        left[0] = 1 - (now - first * HOUR) / HOUR
        demand = self.expect * self.inflexible[:, past].mean(axis=1)[:, None] * left
        kwh = self.expect * self.inflexible_kwh[:, past].mean(axis=1)[:, None] * left
        return Load(demand, kwh * forecast[:, :self.horizon])
