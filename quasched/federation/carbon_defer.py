"""Our dispatcher (``carbon-defer``): the carbon-aware rule of :mod:`.carbon_aware`, its slots priced by the carbon
they take from other jobs, its starts checked at node level, with nested bookings.

- **Prices.** A candidate run's rate is the rule's (forecast intensity plus the crowding price), plus the carbon its
  use of a slot is expected to displace from jobs not yet arrived (:mod:`.displacement`), plus, for a flexible job,
  the expected carbon of the inflexible jobs it turns away from clean room (:mod:`.protection`; ``protect=false``
  drops it).
- **Node-level starts.** The rule's start-now check is aggregate (free GPU and CPU milli, an empty queue); a start
  now also needs a node of the cluster that holds the job now, asked lazily of the start now that would win, then of
  the next (the same choice as asking every cluster first). The fallback (no feasible candidate) starts the job on
  the cheapest cluster where a node holds it, else queues it on the least loaded.
- **Re-decisions.** At its release a job with slack left that no node of its planned cluster holds does not queue:
  its booking leaves the ledger and it is decided again from then (a start now only where a node holds it, never on
  that cluster). Within the clock hour of its last re-decision it only waits a slot more on its cluster (its booking
  moves with it): the inputs that move a choice are hourly. Its last release before its latest start is always
  decided again.
- **Nested bookings.** A flexible job deferred hours ahead only *books* room; as in nested booking limits of revenue
  management, an inflexible job (no slack: it starts now or misses its deadline) reads only the *held* ledger, the
  runs of released jobs, and may take room a deferred job has only booked. The bumped job is decided again at its
  release (above). Flexible jobs read the whole ledger.

Which nodes hold a job is kept per cluster and pod shape, refreshed on the nodes changed since
(:class:`~quasched.policies.filter.Feasibility`). No constant beyond the rule's and the price terms'.
"""

from __future__ import annotations

import numpy as np

from quasched.federation.carbon_aware import CarbonAware, add_run, cheapest, fallback
from quasched.federation.dispatch import SLOT_S, Decision, View
from quasched.federation.displacement import Displacement
from quasched.federation.protection import Protection
from quasched.metrics.power import SECONDS_PER_HOUR as HOUR
from quasched.model.workload import Pod
from quasched.policies.filter import Feasibility, demand_key


class CarbonDefer(CarbonAware):
    """The dispatcher of the module docstring; ``memory`` and ``flexible``: the displacement term's, ``tau`` the
    protection's (hours), ``rule``: the rule's parameters."""

    name = "carbon-defer"

    def __init__(self, memory: int = 24, flexible: float = 0.0, tau: float = 24.0, protect: bool = True,
                 **rule: float) -> None:
        super().__init__(**rule)  # type: ignore[arg-type]
        self.memory, self.flexible, self.tau, self.protect = memory, flexible, tau, protect

    def reset(self, view: View) -> None:
        super().reset(view)
        self.displacement = Displacement(view, self.top[:, :, 0], self.memory, self.flexible)
        self.protection = Protection(view, self.top[0, :, 0], self.tau) if self.protect else None
        self.held = np.zeros_like(self.ledger)  # the ledger's runs of released jobs
        self.decided: dict[int, int] = {}  # job -> hour of its last re-decision
        self.feasible = [Feasibility(nodes) for nodes in view.nodes]
        self.last_key: tuple[Pod | None, tuple] = (None, ())  # the last pod asked and its demand key

    def dispatch(self, job: int, now: float) -> Decision:
        if self.protection is not None:
            self.protection.record(job, now)
        self.displacement.record(job, now)
        return super().dispatch(job, now)

    def rate(self, job: int, now: float, index: np.ndarray, ledger: np.ndarray) -> np.ndarray:
        expected, gap = self.priced(now, index)
        rate = self.displacement.add(self.crowded(job, expected, gap, ledger), job, now, index, ledger, expected)
        if self.protection is not None:
            rate = self.protection.add(rate, job, now, index, expected, ledger[0])
        return rate

    def ledger_for(self, job: int, now: float) -> np.ndarray:
        return self.held if self.view.latest_start[job] <= now else self.ledger

    def holds(self, cluster: int, pod: Pod) -> bool:
        """Does some node of ``cluster`` hold ``pod`` now."""
        if pod is not self.last_key[0]:
            self.last_key = (pod, demand_key(pod))
        return bool(self.feasible[cluster].mask(pod, self.last_key[1]).any())

    def choose(self, job: int, now: float, starts: np.ndarray, cost: np.ndarray, planned: np.ndarray) -> Decision:
        """:meth:`CarbonAware.choose` with the node-level check asked lazily (module docstring)."""
        load, fits, blocked = self.open_now(job, planned)
        pod = self.view.pod(job)
        while not blocked.all():
            pick = cheapest(starts, cost, blocked)
            if pick.start > now or self.holds(pick.cluster, pod):
                return pick
            blocked[pick.cluster, 0], fits[pick.cluster] = True, False
        for c in np.flatnonzero(fits):  # the fallback's clusters, not asked yet
            fits[c] = self.holds(int(c), pod)
        return fallback(now, cost, fits, load)

    def release(self, job: int, now: float, cluster: int) -> Decision:
        v = self.view
        pod = v.pod(job)
        if v.latest_start[job] <= now or self.holds(cluster, pod):
            pick = Decision(cluster, now)
        else:  # its booking (which started now, the release time) leaves the ledger; the new decision's enters it
            add_run(self.ledger, v, job, Decision(cluster, now), -1.0)
            pick = self.book(job, self.decide_again(job, now, cluster))
        if pick.start <= now:  # released now: its booking (its last one, from now on ``pick.cluster``) is held
            add_run(self.held, v, job, pick)
        return pick

    def decide_again(self, job: int, now: float, cluster: int) -> Decision:
        """``job`` at its release at ``now``, with slack left, no node of ``cluster`` holding it: waits a slot more on
        ``cluster`` if it was decided again within this clock hour and this is not its last release before its latest
        start; else the rule's choice among its options from now, never a start now on ``cluster``."""
        following = (now // SLOT_S + 1) * SLOT_S
        if self.view.latest_start[job] > following:
            hour = int(now // HOUR)
            if self.decided.get(job) == hour:
                return Decision(cluster, following)
            self.decided[job] = hour
        starts, cost, blocked = self.options(job, now)
        blocked[cluster, 0] = True
        return self.choose(job, now, starts, cost, blocked)
