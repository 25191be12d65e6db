"""What the service shows: the cluster snapshot and the queues' quota, usage and fair share."""

from __future__ import annotations

from typing import Any, Mapping, Protocol

import numpy as np

from quasched.metrics.fragmentation import FragReport
from quasched.model.cluster import Cluster
from quasched.model.resources import CPU, MEMORY
from quasched.model.workload import FULL_GPU_MILLI
from quasched.service.domain import MAX_GANG, Job, JobState
from quasched.service.loop.assumed import Assumptions
from quasched.service.rules.quota import QuotaBook


class LoopViews(Protocol):
    """What the status reads of the scheduling loop (:class:`~quasched.service.loop.controller.Controller`)."""

    cluster: Cluster
    quota: QuotaBook
    assumptions: Assumptions

    @property
    def jobs(self) -> Mapping[int, Job]: ...

    def node_fragmentation(self) -> np.ndarray: ...

    def gpu_allocation(self) -> float: ...

    def fragmentation_report(self) -> FragReport | None: ...


def snapshot(ctl: LoopViews) -> dict[str, Any]:
    """Per node: model, cordon, per-device used milli and health, CPU/memory use, jobs, fragmented milli-GPU;
    and totals."""
    c = ctl.cluster
    jobs_on: dict[int, list[int]] = {}
    for p in c.placements.values():
        if not ctl.assumptions.owns(p.pod.uid):  # an assumed placement takes its devices but is no job
            jobs_on.setdefault(p.node, []).append(p.pod.uid // MAX_GANG)
    nodes = []
    frag = ctl.node_fragmentation()
    for n in np.flatnonzero(c.present).tolist():
        g = int(c.num_gpus[n])
        nodes.append({
            "name": str(c.names[n]), "gpu_model": str(c.models[c.model_id[n]]), "cordoned": bool(c.cordoned[n]),
            "gpu_used_milli": c.gpu_alloc[n, :g].tolist(), "gpu_healthy": c.gpu_healthy[n, :g].tolist(),
            "cpu_milli": int(c.capacity[n, CPU]), "cpu_used_milli": int(c.capacity[n, CPU] - c.free[n, CPU]),
            "memory_mib": int(c.capacity[n, MEMORY]), "memory_used_mib": int(c.capacity[n, MEMORY] - c.free[n, MEMORY]),
            "jobs": sorted(set(jobs_on.get(n, []))), "frag_milli": round(float(frag[n]), 1),
        })
    pending = sum(1 for j in ctl.jobs.values() if j.state == JobState.PENDING)
    free = c.gpu_free[c.present]  # 0 on unhealthy devices
    report = ctl.fragmentation_report()
    return {"nodes": nodes, "gpus": c.total_gpus, "gpu_allocation_pct": ctl.gpu_allocation(),
            "free_gpus": int(free.sum()) / FULL_GPU_MILLI, "free_whole_gpus": int((free >= FULL_GPU_MILLI).sum()),
            "fragmentation_pct": 0.0 if report is None else report.frag_ratio,
            "fragmented_gpus": None if report is None else round(report.frag_milli / FULL_GPU_MILLI, 3),
            "pending": pending, "running": sum(1 for j in ctl.jobs.values() if j.state.holds_resources)}

def queue_status(ctl: LoopViews) -> list[dict[str, Any]]:
    """Per queue: quota, cohort, weight, GPUs used (in all and per quota key: a GPU model or '*') and borrowed, fair
    share, share, pending and running jobs."""
    fair = ctl.quota.fair_share()
    out = []
    for name, spec in ctl.quota.queues.items():
        used = sum(v for (q, _), v in ctl.quota.usage.items() if q == name)
        jobs = [j for j in ctl.jobs.values() if j.spec.team == name]
        out.append({"name": name, "cohort": spec.cohort, "weight": spec.weight, "quota": dict(spec.quota),
                    "borrowing_limit": spec.borrowing_limit, "used_gpus": used / 1000,
                    "used_gpus_by_model": {k: v / 1000 for (q, k), v in sorted(ctl.quota.usage.items())
                                           if q == name and v},
                    "borrowed_gpus": ctl.quota.borrowed(name) / 1000, "fair_share_gpus": fair[name] / 1000,
                    "share": ctl.quota.share(name),
                    "pending": sum(1 for j in jobs if j.state == JobState.PENDING),
                    "running": sum(1 for j in jobs if j.state.holds_resources)})
    return out
