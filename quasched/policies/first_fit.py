"""First fit: the first node in cluster order that can host the pod.

This is the "nearest available machine" baseline of Qua and of most batch
schedulers: nodes are tried in a fixed order and the earliest feasible one
wins, regardless of how well the pod fits there.
"""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.workload import Pod
from quasched.policies.base import Policy


class FirstFit(Policy):
    """Score = position from the end of the node list, so the first feasible node wins."""

    name = "FirstFit"

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray) -> np.ndarray:
        return cluster.n_nodes - nodes
