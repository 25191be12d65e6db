"""Working cores: the linear model's CPU watts a pod adds, ranked among the nodes of one GPU model.

Under the linear power model (:mod:`quasched.metrics.power`) a node's sockets draw ``c`` W per
working core (``c = (full − idle) / cores_per_socket``, 6.56 W for the Xeon E5-2682 v4), and a node
with ``k`` allocated cores (allocated vCPU / 2) has ``⌈k⌉`` of them working. A pod of ``p`` cores
therefore adds ``ΔP = c · (⌈k + p⌉ − ⌈k⌉)``: ``c · ⌊p⌋`` where its fraction fits in the residue
``⌈k⌉ − k`` of the node's last working core, one core more elsewhere. Summed over a cluster these
residues are the only part of the linear power above its reachable floor that a placement can still
save on openb-default (``benchmarks/power_decompose.py``). The term never trades GPU watts for CPU
watts: it ranks the feasible nodes *within* each GPU model ``m``, so every model's best nodes score
alike and the choice between models stays with the GPU terms::

    score = 100 if ΔP = min { ΔP(n') : n' feasible, model(n') = m } else 0
"""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.workload import Pod
from quasched.policies.base import CycleState
from quasched.policies.pwr import PWR, added_power_w


class WorkingCores(PWR):
    """100 on the nodes where a pod sets the fewest cores working for their GPU model, else 0 (module docstring)."""

    name = "pwr-cores"

    def __init__(self, until: float = 100.0) -> None:
        super().__init__("linear", until=until, terms="cpu")

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        if not self.steering(cluster):
            return np.zeros(len(nodes), dtype=np.int64)
        added = added_power_w(cluster, pod, nodes, self._idle, self._full, self.model, "linear", "cpu")
        model = cluster.model_id[nodes]
        least = np.full(len(cluster.models), np.inf)
        np.minimum.at(least, model, added)
        return np.where(added <= least[model] + 1e-9, 100, 0).astype(np.int64)

    def __repr__(self) -> str:
        return f"WorkingCores(until={self.until:g})"
