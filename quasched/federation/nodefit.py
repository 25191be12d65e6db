"""Node-level fit for dispatchers: does some node of a cluster hold a job now.

The rules' room checks are aggregate (free GPU and CPU milli per cluster); the re-decision (:mod:`.redecide`) and
node-level starts (:mod:`.held`) also ask whether a node holds the job, from one incrementally refreshed fit mask per
cluster and pod shape (:class:`~quasched.policies.filter.Feasibility`).
"""

from __future__ import annotations

from quasched.federation.dispatch import Dispatcher, View
from quasched.model.workload import Pod
from quasched.policies.filter import Feasibility, demand_key


class NodeFit(Dispatcher):
    """Mixin: :meth:`holds` over the clusters of the view."""

    def reset(self, view: View) -> None:
        super().reset(view)
        self.feasible = [Feasibility(nodes) for nodes in view.nodes]
        self.last_key: tuple[Pod | None, tuple] = (None, ())  # the last pod asked and its demand key

    def holds(self, cluster: int, pod: Pod) -> bool:
        """Does some node of ``cluster`` hold ``pod`` now."""
        if pod is not self.last_key[0]:
            self.last_key = (pod, demand_key(pod))
        return bool(self.feasible[cluster].mask(pod, self.last_key[1]).any())
