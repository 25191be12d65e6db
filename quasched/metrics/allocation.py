"""End-state allocation of a cluster (the reference's ``ClusterAnalysis`` block)."""

from __future__ import annotations

import numpy as np

from quasched.metrics.frag_categories import CATEGORIES
from quasched.metrics.fragmentation import FragReport
from quasched.model.cluster import Cluster
from quasched.model.workload import FULL_GPU_MILLI


def percent(used: float, total: float) -> float:
    """``100 · used / total`` (0 when there is no capacity)."""
    return 100.0 * used / total if total else 0.0


def allocation_summary(cluster: Cluster, frag: FragReport | None = None) -> dict[str, float]:
    """Allocation in % of every registered resource, GPU devices and GPU milli, pods and apps placed,
    plus the fragmentation categories (milli-GPU) when ``frag`` is given."""
    used_devices = int(np.count_nonzero(cluster.gpu_alloc))
    apps = {p.pod.app for p in cluster.placements.values() if p.pod.app}
    # capacities summed in float: "unlimited" capacities (a quarter of int64's range) overflow int64 sums
    capacity, used = cluster.capacity.sum(axis=0, dtype=np.float64), (cluster.capacity - cluster.free).sum(axis=0)
    summary = {
        f"{name}_alloc_pct": percent(int(used[i]), float(capacity[i])) for i, name in enumerate(cluster.resources.names)
    }
    summary = {
        "cpu_alloc_pct": summary.pop("cpu_alloc_pct"),
        "mem_alloc_pct": summary.pop("memory_alloc_pct"),
        **summary,
        "gpu_devices_alloc_pct": percent(used_devices, cluster.total_gpus),
        "gpu_milli_alloc_pct": percent(cluster.used_gpu_milli, FULL_GPU_MILLI * cluster.total_gpus),
        "pods_placed": len(cluster.placements),
        "apps_placed": len(apps),
    }
    if frag is not None:
        summary.update({f"frag_{name}_milli": float(v) for name, v in zip(CATEGORIES, np.asarray(frag.categories))})
        summary["idle_gpu_milli"] = frag.idle_milli
        summary["frag_gpu_milli"] = frag.frag_milli
        summary["frag_ratio_pct"] = frag.frag_ratio
    return summary
