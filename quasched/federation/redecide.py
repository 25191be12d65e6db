"""Ours with a release-time re-decision (``ours-protect-redecide``): a job no node holds at its release does not queue
while it still has slack.

The rule's ledger and its start-now check are aggregate (GPU and CPU milli per cluster), so a flexible full-node job
deferred to a green slot may find, at its release, room on its cluster but no node that holds it. Queued there, it
heads the cluster's FIFO for days, and the start-now rule (nobody waiting) turns every later arrival away, among them
inflexible runs of up to a week (diagnosis: BENCHMARKS.md, "7-day windows: where ours loses to greedy").

At release, while ``latest_start > now``, a job that no node of its planned cluster holds now
(:meth:`.NodeFit.holds`) is decided again from now: its stale booking leaves the ledger and the rule
chooses among the starts of :meth:`~.carbon_aware.CarbonAware.options`, a start now allowed only on clusters where a
node holds it. A later start releases it again then. Once its slack is spent it is released as before (it queues if
it must). No constant. Which nodes hold a job is kept per cluster and pod shape, refreshed on the nodes changed since
(:class:`~quasched.policies.filter.Feasibility`).
"""

from __future__ import annotations

import numpy as np

from quasched.federation.carbon_aware import add_run
from quasched.federation.dispatch import Decision
from quasched.federation.nodefit import NodeFit
from quasched.federation.protection import ProtectionPriced
from quasched.model.workload import Pod


class ReleaseRedecided(NodeFit, ProtectionPriced):
    """``ours-protect`` whose releases re-decide a job that no node of its cluster holds (module docstring)."""

    name = "ours-protect-redecide"

    def release(self, job: int, now: float, cluster: int) -> Decision:
        v = self.view
        pod = v.pod(job)
        if v.latest_start[job] <= now or self.holds(cluster, pod):
            return super().release(job, now, cluster)
        return self.redecide(job, now, cluster, pod)

    def redecide(self, job: int, now: float, cluster: int, pod: Pod) -> Decision:
        """``job``, released at ``now`` with slack left, no node of ``cluster`` holding its ``pod``: its booking (which
        started now, the release time) leaves the ledger, and the new decision's enters it."""
        add_run(self.ledger, self.view, job, Decision(cluster, now), -1.0)
        return self.book(job, self.decide_again(job, now, cluster, pod))

    def decide_again(self, job: int, now: float, cluster: int, pod: Pod) -> Decision:
        """The new decision of :meth:`redecide`: the rule's choice among its options from now, a start now only where a
        node holds ``pod`` (the ledger is without the job's booking)."""
        starts, cost, blocked = self.options(job, now)
        self.hold_now(blocked, cluster, pod)
        return self.choose(job, now, starts, cost, blocked)

    def hold_now(self, blocked: np.ndarray, cluster: int, pod: Pod) -> None:
        """Blocks the starts now (``blocked[:, 0]``) on ``cluster`` and on every cluster no node of which holds ``pod``
        (asked only where the plan leaves a start now open)."""
        blocked[cluster, 0] = True
        for c in np.flatnonzero(~blocked[:, 0]):
            blocked[c, 0] = not self.holds(int(c), pod)
