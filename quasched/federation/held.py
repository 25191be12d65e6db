"""Node-level starts (``ours-protect-held``, ``ours-redecide-held`` and ``ours-redecide-hourly``, ours in session 9, the
base of ours, :mod:`.nested`): a job starts now only on a cluster where a node holds it.

The rule's start-now check is aggregate (the cluster's free GPU and CPU milli after the job, and an empty queue), so
an inflexible job can be sent "now" to a cluster with room in sum but no node that holds it. It queues there and
misses its deadline (slack 0), while a node of another cluster held it: every inflexible miss of ``ours-protect`` and
``ours-protect-redecide`` on the 7-day seeds 121, 123, 130 and 132 was one of these (BENCHMARKS.md). Here a start now
also needs a node of the cluster that holds the job now (:meth:`.NodeFit.holds`, asked lazily of the start now that
would win); the fallback (no feasible candidate) starts it on the cheapest such cluster, else queues it on the least
loaded, as before. No constant.
"""

from __future__ import annotations

import numpy as np

from quasched.federation.carbon_aware import CarbonAware, cheapest, fallback
from quasched.federation.dispatch import SLOT_S, Decision, View
from quasched.federation.nodefit import NodeFit
from quasched.federation.protection import ProtectionPriced
from quasched.federation.redecide import ReleaseRedecided
from quasched.metrics.power import SECONDS_PER_HOUR as HOUR
from quasched.model.workload import Pod


class NodeHeld(NodeFit, CarbonAware):
    """A rule whose starts now need a node that holds the job (module docstring)."""

    def choose(self, job: int, now: float, starts: np.ndarray, cost: np.ndarray, planned: np.ndarray) -> Decision:
        """:meth:`CarbonAware.choose` with the node-level check asked lazily: of the start now that would win, then
        of the next; the same choice as asking every cluster first."""
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


class ProtectionHeld(NodeHeld, ProtectionPriced):
    """``ours-protect`` with node-level starts."""

    name = "ours-protect-held"


class RedecideHeld(NodeHeld, ReleaseRedecided):
    """``ours-protect-redecide`` with node-level starts."""

    name = "ours-redecide-held"

    def hold_now(self, blocked: np.ndarray, cluster: int, pod: Pod) -> None:
        """Only ``cluster`` (no node of it holds ``pod``): :meth:`choose` asks the other clusters' nodes itself."""
        blocked[cluster, 0] = True


class HourlyRedecideHeld(RedecideHeld):
    """``ours-redecide-held`` deciding a waiting job again at most once per clock hour.

    A job that waits for a node of its planned cluster is released, and decided again, at every 15-minute slot until a
    node holds it (a median of 11 times in the DLRM year's first 30 days, most of the replay's CPU). The rule's inputs
    that move a choice are hourly (intensity, forecast), so within the hour of its last re-decision it only waits a slot
    more on its cluster (the booking moves with it); it is decided again in the next hour, and always at its last
    release before its latest start (its last chance to start elsewhere on time). No constant.
    """

    name = "ours-redecide-hourly"

    def reset(self, view: View) -> None:
        super().reset(view)
        self.decided: dict[int, int] = {}  # job -> hour of its last re-decision

    def decide_again(self, job: int, now: float, cluster: int, pod: Pod) -> Decision:
        following = (now // SLOT_S + 1) * SLOT_S
        if self.view.latest_start[job] > following:  # not its last release before the latest start
            hour = int(now // HOUR)
            if self.decided.get(job) == hour:
                return Decision(cluster, following)  # waits a slot more on its cluster
            self.decided[job] = hour
        return super().decide_again(job, now, cluster, pod)
