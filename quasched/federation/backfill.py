"""Ours with backfilling (``carbon-aware-backfill``, ``ours-displace-backfill``): an inflexible job is not sent to a
dirtier cluster only because someone waits in the cleaner one's queue.

The rule starts a job now only where it fits the aggregate free capacity *and* nobody waits in the queue; the
tuning-set diagnosis (BENCHMARKS.md) found that in 125 of the 177 arrivals where an inflexible job's cheaper
cluster was ruled out, only the queue ruled it out: a job waiting for a node that no free space fits
(fragmentation). The cluster's scheduler still tries a released job before its queue, so here an inflexible job
(one candidate start: now) goes to the cheapest cluster ``c`` that is cheaper than the rule's pick ``p``, whose
ledger holds its run and whose aggregate free capacity fits it, queue or not::

    c = argmin { cost[c, now] : cost[c, now] < cost[p, now],  ledger room over the run,  load_after[c] <= 1 }

and is rerouted to ``p`` (:meth:`reroute`) if no node of ``c`` holds it at release (if neither does, it waits in
``c``'s queue). Flexible jobs keep the rule (they may wait for a clean slot instead). No constant is added.

Guarded variants: a job may pass a queue only if it does not hold room that a queued job needs by its reservation
(EASY and conservative backfilling). The engine does not know when a node will free room for a queued job
(fragmentation: the head often fits the aggregate free capacity already), so the reservation is the latest start that
still meets the job's deadline (slack-based backfilling); with known durations the test is exact for the passing job::

    carbon-aware-easy, ours-displace-easy (EASY: the head only; a late head blocks every pass)
        c needs  queue of c empty  or  now + duration[j] <= latest_start[head of c's queue]
    carbon-aware-conservative, ours-displace-conservative (every queued job that can still meet its deadline)
        c needs  now + duration[j] <= min { latest_start[q] : q queued on c, latest_start[q] >= now }

Unguarded, on the busy clusters of the full-year DLRM replay the passing jobs kept queued ones past their deadlines
(BENCHMARKS.md).
"""

from __future__ import annotations

import numpy as np

from quasched.federation.carbon_aware import CarbonAware
from quasched.federation.dispatch import Decision, View
from quasched.federation.displacement import DisplacementPriced


class Backfilling(CarbonAware):
    """The rule (or one derived from it) with backfilling of inflexible jobs (module docstring)."""

    def reset(self, view: View) -> None:
        super().reset(view)
        self.fallback: dict[int, int] = {}  # job -> the rule's pick, tried when the backfill does not place
        self.second: int | None = None  # that of the job being released

    def choose(self, job: int, now: float, starts: np.ndarray, cost: np.ndarray, planned: np.ndarray) -> Decision:
        pick = super().choose(job, now, starts, cost, planned)
        if len(starts) > 1:
            return pick
        v = self.view
        room = ~planned[:, 0] & (v.load_after(job) <= 1) & (cost[:, 0] < cost[pick.cluster, 0])
        if room.any():
            room &= self.passable(job, now, room)
        if not room.any():
            return pick
        self.fallback[job] = pick.cluster
        return Decision(int(np.argmin(np.where(room, cost[:, 0], np.inf))), now)

    def passable(self, job: int, now: float, among: np.ndarray) -> np.ndarray:
        """Per cluster (asked for those of ``among``): may ``job``, started now, pass its queue (unguarded:
        everywhere; module docstring)."""
        return np.ones(self.view.clusters, dtype=bool)

    def release(self, job: int, now: float, cluster: int) -> Decision:
        self.second = self.fallback.pop(job, None)
        return super().release(job, now, cluster)

    def reroute(self, job: int, now: float, cluster: int) -> list[int]:
        return [] if self.second is None else [self.second]


class BackfillRule(Backfilling):
    """``carbon-aware`` with backfilling."""

    name = "carbon-aware-backfill"


class BackfillDisplacement(Backfilling, DisplacementPriced):
    """``ours-displace`` with backfilling."""

    name = "ours-displace-backfill"


class EasyGuard(Backfilling):
    """Passes a queue only if the job ends by the head's latest start (module docstring)."""

    def passable(self, job: int, now: float, among: np.ndarray) -> np.ndarray:
        v = self.view
        return (v.head < 0) | (now + v.duration[job] <= v.latest_start[v.head])


class ConservativeGuard(Backfilling):
    """Passes a queue only if the job ends by every latest start still ahead in it (module docstring)."""

    def passable(self, job: int, now: float, among: np.ndarray) -> np.ndarray:
        return now + self.view.duration[job] <= self.view.earliest_due(now)


class EasyRule(EasyGuard, BackfillRule):
    name = "carbon-aware-easy"


class EasyDisplacement(EasyGuard, BackfillDisplacement):
    name = "ours-displace-easy"


class ConservativeRule(ConservativeGuard, BackfillRule):
    name = "carbon-aware-conservative"


class ConservativeDisplacement(ConservativeGuard, BackfillDisplacement):
    name = "ours-displace-conservative"
