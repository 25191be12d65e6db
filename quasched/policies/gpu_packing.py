"""GpuPacking: fill partially used GPUs first, then partially used nodes, then idle nodes."""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.workload import FULL_GPU_MILLI, Pod
from quasched.policies.base import CycleState, ScorePlugin


class GpuPacking(ScorePlugin):
    """Three tiers: pod fits on used devices (50..100), needs idle devices of a used node (33..49),
    node fully idle (25..32). CPU-only pods score 0."""

    name = "gpupacking"

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        if not pod.is_gpu:
            return np.zeros(len(nodes), dtype=np.int64)
        free = np.sort(cluster.gpu_free[nodes], axis=1)
        n_full = (free == FULL_GPU_MILLI).sum(axis=1)
        fits = free >= pod.gpu_milli
        taken = fits & (np.cumsum(fits, axis=1) <= pod.num_gpu)
        idle_taken = (taken & (free == FULL_GPU_MILLI)).sum(axis=1)
        leftover_pct = np.where(taken, (free * 100) // FULL_GPU_MILLI, 0).sum(axis=1)
        return np.where(
            n_full == cluster.num_gpus[nodes],
            np.maximum(33 - n_full, n_full),
            np.where(
                idle_taken > 0,
                np.maximum(50 - idle_taken, 33),
                np.maximum(100 - leftover_pct // 10, 50),
            ),
        )
