"""First fit: the first node in cluster order that can host the pod.

This is the "nearest available machine" baseline of Qua and of most batch
schedulers: nodes are tried in a fixed order and the earliest feasible one
wins, regardless of how well the pod fits there.
"""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.workload import Pod
from quasched.policies.base import CycleState, ScorePlugin


class FirstFit(ScorePlugin):
    """Raw score = position from the end of the node list; normalised to ``100·(s − min)/(max − min)``
    (floats, so no two nodes tie and the first feasible node wins)."""

    name = "firstfit"

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        return cluster.n_nodes - nodes

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        span = scores.max() - scores.min()
        return 100.0 * (scores - scores.min()) / span if span else np.zeros(len(scores))
