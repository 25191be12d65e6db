"""Working cores: the linear model's CPU watts a pod adds, ranked among the nodes where all else is equal.

Under the linear power model (:mod:`quasched.metrics.power`) a node's sockets draw ``c`` W per
working core (``c = (full − idle) / cores_per_socket``, 6.56 W for the Xeon E5-2682 v4); a node
with ``k`` allocated cores (allocated vCPU / 2) has ``⌈k⌉`` working, the last one idle for its
residue ``r = ⌈k⌉ − k``. A pod of ``p`` cores sets ``ΔW = ⌈k + p⌉ − ⌈k⌉`` more working (``c · ΔW``
W, the model's own derivative) and leaves the residue ``r' = ⌈k + p⌉ − (k + p)``. Summed over the
nodes the residues are what is left of the linear power above its reachable floor on openb-default
(``benchmarks/power_decompose.py``); among nodes of equal ``ΔW`` the one left with the smallest
``r'`` (best fit) keeps the larger residues for larger fractions. The term never trades GPU or
socket watts for working-core watts: it ranks the feasible nodes only within groups ``G`` of equal
GPU model and equal step-model watts added (GPUs and sockets, :func:`~quasched.policies.pwr.added_power_w`),
and every group's best node scores 100::

    cost  = ΔW + r' / 2                                       (cores; r' < 1, so ΔW decides first)
    score = max(0, 100 − 100 · (cost − min { cost(n') : n' feasible, n' ∈ G(n) }))
"""

from __future__ import annotations

import numpy as np

from quasched.metrics.power import MILLI_PER_VCPU, VCPUS_PER_CORE
from quasched.model.cluster import Cluster
from quasched.model.resources import CPU
from quasched.model.workload import Pod
from quasched.policies.base import CycleState
from quasched.policies.pwr import PWR, added_power_w

MILLI_PER_CORE = MILLI_PER_VCPU * VCPUS_PER_CORE


class WorkingCores(PWR):
    """Best fit of a pod's cores into the working cores of otherwise equal nodes (module docstring)."""

    name = "pwr-cores"

    def __init__(self, until: float = 100.0) -> None:
        super().__init__("linear", until=until, terms="cpu")

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        if not self.steering(cluster):
            return np.zeros(len(nodes))
        cap, free = cluster.capacity[nodes, CPU], cluster.free[nodes, CPU]
        after = free - pod.cpu_milli
        working = -(-cap // MILLI_PER_CORE) - after // MILLI_PER_CORE
        added = free // MILLI_PER_CORE - after // MILLI_PER_CORE
        cost = added + (working - (cap - after) / MILLI_PER_CORE) / 2
        step_w = added_power_w(cluster, pod, nodes, self._idle, self._full, self.model, "step", "all")
        _, group = np.unique(np.stack([cluster.model_id[nodes], step_w]), axis=1, return_inverse=True)
        least = np.full(group.max(initial=-1) + 1, np.inf)
        np.minimum.at(least, group, cost)
        return np.maximum(0.0, 100 - 100 * (cost - least[group]))

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        return scores  # already 0..100, each group's best node at 100

    def __repr__(self) -> str:
        return f"WorkingCores(until={self.until:g})"
