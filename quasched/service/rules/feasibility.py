"""Whether a job could ever run: on the cluster as registered (every node empty) and under its queue's quota.

The service refuses such a job at submit (422) and marks an accepted one ``Unschedulable`` when nodes leave or
quotas shrink; both are measured against the nodes present now (a node that joins later makes the job schedulable
again at the next pass).
"""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.nodes import accessible
from quasched.model.workload import FULL_GPU_MILLI, NO_LIMIT, Pod
from quasched.service.domain import Job, PendingReason, Reason
from quasched.service.rules.quota import QuotaBook

#: pod shapes :func:`most_pods` remembers per cluster (all forgotten when more are asked)
MAX_SHAPES = 1024


def most_pods(cluster: Cluster, pod: Pod) -> int:
    """:func:`pods_when_empty`, remembered per pod shape until the cluster's ``inventory`` changes (submissions
    share a few shapes; nodes and devices rarely change)."""
    key = (cluster.inventory, pod.gpu_model, pod.num_gpu, pod.gpu_milli, pod.max_per_node if pod.limited else NO_LIMIT,
           pod.request.tobytes(), pod.node)
    known = cluster.caches.setdefault("most_pods", {})
    most = known.get(key)
    if most is None:
        if len(known) >= MAX_SHAPES:
            known.clear()  # with the answers of earlier inventories
        most = known[key] = pods_when_empty(cluster, pod)
    return most


def pods_when_empty(cluster: Cluster, pod: Pod) -> int:
    """How many pods shaped like ``pod`` the present nodes it may use could host if they were all empty."""
    c = cluster
    usable = np.flatnonzero(c.present & c.spec_mask(pod.gpu_model) & (c.names == pod.node if pod.node else True))
    if not len(usable):
        return 0
    request = np.asarray(pod.request)
    asked = request > 0
    per_node = (c.capacity[np.ix_(usable, np.flatnonzero(asked))] // request[asked]).min(axis=1) if asked.any() \
        else np.full(len(usable), np.iinfo(np.int64).max)
    if pod.is_gpu:
        devices = c.gpu_healthy[usable].sum(axis=1)
        slots = devices * (FULL_GPU_MILLI // pod.gpu_milli) if pod.is_sharing else devices // pod.num_gpu
        per_node = np.minimum(per_node, slots)
    if pod.limited:
        per_node = np.minimum(per_node, pod.max_per_node)
    return int(per_node.sum())


def never_fits(cluster: Cluster, pod: Pod, pods: int) -> str | None:
    """Why a gang of ``pods`` pods like ``pod`` can never be placed on the cluster (None if it can)."""
    most = most_pods(cluster, pod)
    if most >= pods:
        return None
    what = f"a gang of {pods} pods" if pods > 1 else "the job"
    where = f"the node that runs commands ({pod.node})" if pod.node else "the nodes of this cluster"
    return f"{what} can never run: {where} could host at most {most} such pod{'s' * (most != 1)} even when empty"


def never_admitted(quota: QuotaBook, models: list[str], team: str, need: int) -> str | None:
    """Why queue ``team`` could never admit ``need`` milli-GPU on any of ``models`` (None if it could on one)."""
    if not need or not quota.limited(team):
        return None
    ceiling = {m: quota.ceiling(team, m) for m in models}
    if any(need <= most for most in ceiling.values()):
        return None
    spec = quota.queues[team]
    if not any(ceiling.values()):
        return (f"queue {team}'s quota names none of the GPU models the job may use ({', '.join(models)}); "
                f"quota: {', '.join(f'{k}={v:g}' for k, v in spec.quota.items())}")
    best = max(ceiling, key=lambda m: ceiling[m])
    return (f"the job needs {need / 1000:g} GPU{'s' * (need != 1000)} but queue {team} could use at most "
            f"{ceiling[best] / 1000:g} {best} GPU{'s' * (ceiling[best] != 1000)} (its quota plus what its cohort "
            "could lend)")


def unschedulable(job: Job, why: str) -> PendingReason:
    """The ``Unschedulable`` reason of a job that could never run, as things stand."""
    return PendingReason(Reason.UNSCHEDULABLE, why + "; it waits until nodes join or quotas grow",
                         {"pods": job.spec.pods, "needed_gpus": job.gpu_total / 1000})


def accessible_models(cluster: Cluster, gpu_model: str) -> list[str]:
    """The GPU models of the cluster a job asking for ``gpu_model`` ("" = any, "A|B") may use."""
    return [str(m) for m in cluster.models if m and accessible(str(m), gpu_model)]
