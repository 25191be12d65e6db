"""Random: a uniformly random feasible node (the device is drawn by the policy's ``uniform`` Reserve rule)."""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.workload import Pod
from quasched.policies.base import CycleState, ScorePlugin


class RandomScore(ScorePlugin):
    """One feasible node drawn uniformly scores 100, all others 0 (Go's RandomScore)."""

    name = "random"

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        scores = np.zeros(len(nodes), dtype=np.int64)
        scores[self.rng.intn(len(nodes))] = 100
        return scores
