"""BestFit: the node with the least CPU and GPU left after placing the pod."""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.workload import Pod
from quasched.policies.base import MAX_SPEC_CPU, MAX_SPEC_GPU, CycleState, ScorePlugin


class BestFit(ScorePlugin):
    """``trunc(100 (1 - s))`` with ``s`` the mean normalised leftover; min-max normalised per cycle."""

    name = "bestfit"

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        cpu_left = cluster.cpu_free[nodes] - pod.cpu_milli
        gpu_left = cluster.gpu_free[nodes].sum(axis=1) - pod.gpu_request
        s = (cpu_left / MAX_SPEC_CPU) * 0.5 + (gpu_left / MAX_SPEC_GPU) * 0.5
        return np.trunc((1 - s) * 100).astype(np.int64)

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        hi, lo = scores.max(), scores.min()
        if hi == lo:
            return np.zeros_like(scores)
        return ((scores - lo) * 100) // (hi - lo)
