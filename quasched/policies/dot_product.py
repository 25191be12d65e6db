"""DotProd: align the pod's request with the node's free resources (Tetris-style).

The dot product of free (CPU, GPU) and requested (CPU, GPU), both scaled by
fixed maxima (128 cores, 8 GPUs), is small when the pod uses up what the node
has left; smaller dot product = higher score (packing).
"""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.workload import Pod
from quasched.policies.base import MAX_SPEC_CPU, MAX_SPEC_GPU, CycleState, ScorePlugin


class DotProduct(ScorePlugin):
    """``trunc(100 (1 - a/2))`` with ``a = cpu_free·cpu + gpu_free·gpu`` (normalised)."""

    name = "dotprod"

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        cpu_free = cluster.cpu_free[nodes]
        gpu_free = cluster.gpu_free[nodes].sum(axis=1)
        a = (cpu_free / MAX_SPEC_CPU) * (pod.cpu_milli / MAX_SPEC_CPU) + (
            gpu_free / MAX_SPEC_GPU
        ) * (pod.gpu_request / MAX_SPEC_GPU)
        return np.trunc(100 * (1 - a / 2)).astype(np.int64)
