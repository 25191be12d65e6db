"""End-state allocation of a cluster (the reference's ``ClusterAnalysis`` block)."""

from __future__ import annotations

import numpy as np

from quasched.metrics.fragmentation import CATEGORIES, FragReport
from quasched.model.cluster import Cluster
from quasched.model.workload import FULL_GPU_MILLI


def _pct(used: float, total: float) -> float:
    return 100.0 * used / total if total else 0.0


def allocation_summary(cluster: Cluster, frag: FragReport | None = None) -> dict[str, float]:
    """CPU, memory, GPU-device and GPU-milli allocation in %, pods and apps placed,
    plus the fragmentation categories (milli-GPU) when ``frag`` is given."""
    spec = cluster.nodes
    used_devices = int(((cluster.gpu_free < FULL_GPU_MILLI) & cluster.device_exists).sum())
    apps = {p.pod.app for p in cluster.placements.values() if p.pod.app >= 0}
    summary = {
        "cpu_alloc_pct": _pct(int(spec.cpu_milli.sum() - cluster.cpu_free.sum()), int(spec.cpu_milli.sum())),
        "mem_alloc_pct": _pct(int(spec.memory_mib.sum() - cluster.mem_free.sum()), int(spec.memory_mib.sum())),
        "gpu_devices_alloc_pct": _pct(used_devices, spec.total_gpus),
        "gpu_milli_alloc_pct": _pct(cluster.used_gpu_milli, FULL_GPU_MILLI * spec.total_gpus),
        "pods_placed": len(cluster.placements),
        "apps_placed": len(apps),
    }
    if frag is not None:
        summary.update({f"frag_{name}_milli": float(v) for name, v in zip(CATEGORIES, np.asarray(frag.categories))})
        summary["idle_gpu_milli"] = frag.idle_milli
        summary["frag_gpu_milli"] = frag.frag_milli
        summary["frag_ratio_pct"] = frag.frag_ratio
    return summary
