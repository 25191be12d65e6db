"""The Filter step: which nodes can host a pod right now.

Combines kube's ``NodeResourcesFit`` (CPU, memory, pod count), the
Open-GPU-Share filter (GPU model and device fit) and the v2025 limits (RDMA,
disk, instances of one app per node). Vectorised over all nodes.
"""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import MAX_PODS_PER_NODE, Cluster
from quasched.model.workload import NO_LIMIT, Pod


def feasible_mask(cluster: Cluster, pod: Pod) -> np.ndarray:
    """Boolean mask over nodes that can host ``pod``.

    A pod asking for ``k`` GPUs of ``m`` milli each needs ``k`` distinct
    devices with at least ``m`` free milli each.
    """
    mask = (cluster.cpu_free >= pod.cpu_milli) & (cluster.mem_free >= pod.memory_mib)
    mask &= cluster.pod_count < MAX_PODS_PER_NODE
    if pod.rdma:
        mask &= cluster.rdma_free >= pod.rdma
    if pod.disk_mib:
        mask &= cluster.disk_free >= pod.disk_mib
    if pod.app >= 0 and pod.max_per_node != NO_LIMIT:
        mask &= cluster.app_count[:, pod.app] < pod.max_per_node
    if pod.is_gpu:
        mask &= cluster.spec_mask(pod.gpu_spec)
        if pod.num_gpu == 1:
            mask &= cluster.gpu_free.max(axis=1) >= pod.gpu_milli
        else:
            mask &= (cluster.gpu_free >= pod.gpu_milli).sum(axis=1) >= pod.num_gpu
    return mask


def feasible_nodes(cluster: Cluster, pod: Pod) -> np.ndarray:
    """Indices of the nodes that can host ``pod``, ascending."""
    return np.flatnonzero(feasible_mask(cluster, pod))
