"""Random: a uniformly random feasible node and, for sharing pods, device."""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.workload import Pod
from quasched.policies import devices
from quasched.policies.base import Policy


class RandomScore(Policy):
    """One feasible node drawn uniformly scores 100, all others 0 (Go's RandomScore)."""

    name = "Random"

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray) -> np.ndarray:
        scores = np.zeros(len(nodes), dtype=np.int64)
        scores[self.rng.intn(len(nodes))] = 100
        return scores

    def select_devices(self, cluster: Cluster, pod: Pod, node: int) -> tuple[int, ...]:
        return devices.uniform(cluster.gpu_free[node], pod, self.rng)
