"""GpuClustering: keep pods of the same GPU shape together.

Nodes already hosting only pods of the incoming pod's GPU class score
highest, mixed nodes hosting the class next, empty nodes next, nodes hosting
other classes last; a small term favours nodes with less free GPU.
"""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster, gpu_class
from quasched.model.workload import Pod
from quasched.policies.base import MAX_SPEC_GPU, CycleState, ScorePlugin


class GpuClustering(ScorePlugin):
    """Affinity bonus (75/50/25/0) plus ``25·(8000 − gpu_free) div 8000``; CPU-only pods score 0."""

    name = "gpuclustering"

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        cls = gpu_class(pod)
        if cls < 0:
            return np.zeros(len(nodes), dtype=np.int64)
        used = np.maximum(MAX_SPEC_GPU - cluster.gpu_free[nodes].sum(axis=1), 0)
        base = (25 * used) // MAX_SPEC_GPU
        counts = cluster.gpu_class_count[nodes]
        n_classes = (counts > 0).sum(axis=1)
        bonus = np.where(
            counts[:, cls] > 0,
            np.where(n_classes == 1, 75, 50),
            np.where(n_classes == 0, 25, 0),
        )
        return base + bonus
