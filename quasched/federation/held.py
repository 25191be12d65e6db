"""Ours with node-level starts (``ours-protect-held``, ``ours-redecide-held``): a job starts now only on a cluster
where a node holds it.

The rule's start-now check is aggregate (the cluster's free GPU and CPU milli after the job, and an empty queue), so
an inflexible job can be sent "now" to a cluster with room in sum but no node that holds it. It queues there and
misses its deadline (slack 0), while a node of another cluster held it: every inflexible miss of ``ours-protect`` and
``ours-protect-redecide`` on the 7-day seeds 121, 123, 130 and 132 was one of these (BENCHMARKS.md). Here a start now
also needs a node of the cluster that holds the job now (:meth:`.NodeFit.holds`, asked only of the clusters that
pass the aggregate check); the fallback (no feasible candidate) starts it on the cheapest such cluster,
else queues it on the least loaded, as before. No constant.
"""

from __future__ import annotations

import numpy as np

from quasched.federation.carbon_aware import CarbonAware
from quasched.federation.nodefit import NodeFit
from quasched.federation.protection import ProtectionPriced
from quasched.federation.redecide import ReleaseRedecided


class NodeHeld(NodeFit, CarbonAware):
    """A rule whose starts now need a node that holds the job (module docstring)."""

    def startable(self, job: int, load: np.ndarray) -> np.ndarray:
        fits = super().startable(job, load)
        pod = self.view.pod(job)
        for c in np.flatnonzero(fits):
            fits[c] = self.holds(int(c), pod)
        return fits


class ProtectionHeld(NodeHeld, ProtectionPriced):
    """``ours-protect`` with node-level starts."""

    name = "ours-protect-held"


class RedecideHeld(NodeHeld, ReleaseRedecided):
    """``ours-protect-redecide`` with node-level starts."""

    name = "ours-redecide-held"
