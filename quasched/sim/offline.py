"""Offline packings of the arrival experiment's pods: what a scheduler that sees them all can place.

:func:`arrival_prefix` rebuilds the pods a run of the arrival experiment
(:mod:`quasched.sim.arrival`) receives for a seed; :func:`ffd_packing` places
its GPU pods *largest first* (GPU request, then CPU, then memory, descending;
the first-fit-decreasing order), *densest first* (GPU milli per CPU milli: where
CPU binds, the pods that bring most GPU for their CPU) or as they arrive (an online
run without the CPU-only pods) with a registered policy choosing the node, on
the real cluster model, so every placement is feasible. CPU-only pods are left
out: they add no GPU allocation and only take room. The result is an
achievable allocation, a lower bound on the offline optimum; the upper bound
is :func:`quasched.optimize.bound.gpu_bound`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from quasched.metrics.typical import TypicalPods
from quasched.model.cluster import Cluster
from quasched.model.nodes import NodeSpec
from quasched.model.random import NumpyStream
from quasched.model.workload import FULL_GPU_MILLI, Workload
from quasched.policies import Scheduler, make_policy
from quasched.sim.arrival import ExperimentConfig, tune_workload
from quasched.sim.engine import make_stream

Order = Literal["size", "density", "arrival"]


def arrival_prefix(nodes: NodeSpec, workload: Workload, config: ExperimentConfig) -> Workload:
    """The (tuned) pods a run of ``config`` receives, in arrival order."""
    rng = make_stream(config.rng, config.seed, config.compat_data)
    rng.after_seed()
    return tune_workload(workload, FULL_GPU_MILLI * nodes.total_gpus, config.tune_ratio, rng)


def ffd_order(workload: Workload, key: Order = "size") -> np.ndarray:
    """Indices of the GPU pods, largest GPU request first (``size``; then CPU, then memory; stable),
    most GPU milli per CPU milli first (``density``; then largest GPU request) or as they arrive (``arrival``)."""
    gpu = np.flatnonzero(workload.gpu_request > 0)
    request, cpu = workload.gpu_request[gpu], workload.cpu_milli[gpu]
    if key == "arrival":
        return gpu
    if key == "density":
        return gpu[np.lexsort((-request, -request / np.maximum(cpu, 1)))]
    return gpu[np.lexsort((-workload.memory_mib[gpu], -cpu, -request))]


def ffd_packing(nodes: NodeSpec, workload: Workload, policy: str = "bestfit", key: Order = "size",
                typical: TypicalPods | None = None, cluster: Cluster | None = None) -> int:
    """GPU milli placed by ``policy`` when the GPU pods arrive in :func:`ffd_order` (ties to node order).

    ``cluster``: fill this partly packed cluster of ``nodes`` (pods keyed by workload row; those on it are skipped).
    """
    typical = typical or TypicalPods.from_workload(workload)
    cluster = cluster or Cluster(nodes)
    scheduler = Scheduler(cluster, make_policy(policy, typical), np.arange(len(nodes)), NumpyStream(0))
    for i in ffd_order(workload, key).tolist():
        if i not in cluster.placements:
            scheduler.schedule(workload.pod(i))
    return cluster.used_gpu_milli
