"""Pending reasons: why a job waits, with a message and machine-readable evidence; what of them other teams see.

Computed once per fit class within a pass (:class:`FitRows`), which also
keeps, for the pass, which schedulable nodes each fit class fits now; the
loop skips a job whose class fits nowhere without a scheduling cycle (the
guard of :class:`~quasched.policies.queue.PendingQueue`, in any order).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.fit import fit_matrix, fit_reasons
from quasched.model.resources import CPU
from quasched.model.workload import FULL_GPU_MILLI, Pod
from quasched.policies.queue import FitClasses
from quasched.service.domain import Job, PendingReason, Reason
from quasched.service.rules.feasibility import never_admitted, never_fits, unschedulable
from quasched.service.rules.quota import QuotaBook

#: evidence and event data taken from a job's run (its exit, its output): only its readers see them
#: (:meth:`~quasched.service.runtime.auth.Principal.may_read`)
RUN_DETAILS = frozenset({"exit_code", "log_tail"})
#: the message other teams see of a reason whose own message tells how the run ended
PUBLIC_MESSAGES = {Reason.EXIT_CODE: "the command failed"}


def without_run_details(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without the keys of :data:`RUN_DETAILS`."""
    return {k: v for k, v in data.items() if k not in RUN_DETAILS}


def public_reason(reason: PendingReason) -> PendingReason:
    """``reason`` as another team sees it: the code, a message and the evidence that do not come from the run."""
    return PendingReason(reason.code, PUBLIC_MESSAGES.get(reason.code, reason.message),
                         without_run_details(reason.evidence))


def quota_reason(quota: QuotaBook, job: Job, models: list[str]) -> PendingReason:
    """``WaitingForQuota``: the queue's usage and quota per GPU model the job may use, the cohort, the need
    (``Unschedulable`` if the queue could never admit it on any of ``models``)."""
    team = job.spec.team
    never = never_admitted(quota, models, team, job.gpu_total)
    if never:
        return unschedulable(job, never)
    spec = quota.queues[team]
    usage = {k: quota.usage[team, k] / 1000 for k in spec.quota}
    keys = sorted({k for m in models if (k := quota.key(team, m)) is not None})
    per_model = ", ".join(f"{k}: uses {usage[k]:g} of {spec.quota[k]:g}" for k in keys)
    return PendingReason(
        Reason.WAITING_FOR_QUOTA,
        f"queue {team} has no room in its quota ({per_model} nominal GPUs); the job needs "
        f"{job.gpu_total / 1000:g} and the cohort has no unused quota to lend",
        {"queue": team, "usage_gpus": usage, "nominal_gpus": dict(spec.quota),
         "borrowing_limit": spec.borrowing_limit, "cohort": spec.cohort, "needed_gpus": job.gpu_total / 1000})


def capacity_reason(cluster: Cluster, job: Job, pod: Pod) -> PendingReason:
    """``Fragmented`` (enough free in total, no node fits) or ``InsufficientResources``, with per-check node counts
    (``Unschedulable`` if the present nodes could never host the job)."""
    c = cluster
    never = never_fits(c, replace(pod, gpu_model=job.spec.gpu_model), job.spec.pods)
    if never:
        return unschedulable(job, never)
    usable = c.schedulable & c.spec_mask(pod.gpu_model) & (c.names == pod.node if pod.node else True)
    failing = fit_reasons(c, pod, np.flatnonzero(usable))
    evidence: dict[str, Any] = {"nodes_failing": failing, "pods": job.spec.pods}
    gang = f" for each of {job.spec.pods} pods" if job.spec.pods > 1 else ""
    if pod.is_gpu:
        free = int(c.gpu_free[usable].sum())
        evidence.update(free_gpus=free / 1000, needed_gpus=job.gpu_total / 1000)
        held = c.gpu_cordoned[usable] & c.gpu_healthy[usable]
        held_back = f"; {int(held.sum())} held back for their live state (heat, throttling, errors)" if held.any() else ""
        if held.any():
            evidence["gpus_held_back"] = int(held.sum())
        what = (f"{pod.num_gpu} whole GPU{'s' * (pod.num_gpu != 1)}" if pod.gpu_milli == FULL_GPU_MILLI
                else f"{pod.gpu_milli} milli-GPU on one device")
        if free >= job.gpu_total:
            return PendingReason(Reason.FRAGMENTED, f"{free / 1000:g} GPU{'s' * (free != 1000)} free in total but no "
                                 f"node has {what} free" + gang + held_back, evidence)
        return PendingReason(Reason.INSUFFICIENT, f"needs {job.gpu_total / 1000:g} GPU{'s' * (job.gpu_total != 1000)}; "
                             f"{free / 1000:g} free on nodes it may use" + held_back, evidence)
    free_cpu = int(c.free[usable, CPU].sum())
    evidence.update(free_cpu_milli=free_cpu, needed_cpu_milli=pod.cpu_milli * job.spec.pods)
    code = Reason.FRAGMENTED if free_cpu >= pod.cpu_milli * job.spec.pods else Reason.INSUFFICIENT
    checks = ", ".join(f"{k}: {v} node{'s' * (v != 1)}" for k, v in failing.items())
    return PendingReason(code, f"no node can host it now ({checks})" + gang, evidence)


class FitRows:
    """Within one pass: the schedulable nodes each fit class fits now, refreshed where pods were placed."""

    def __init__(self, cluster: Cluster, classes: FitClasses, pods: list[Pod]) -> None:
        self.cluster, self.classes = cluster, classes
        self.nodes = np.flatnonzero(cluster.schedulable)
        self.rows: dict[int, np.ndarray] = {}
        self.reasons: dict[tuple[int, int], PendingReason] = {}
        if pods:
            self._compute(np.unique([classes.of(p) for p in pods]))

    def _compute(self, ids: np.ndarray) -> None:
        fit = fit_matrix(self.cluster, self.classes.demand(ids), self.nodes)
        self.rows.update(zip(ids.tolist(), fit))

    def any(self, pod: Pod) -> bool:
        cls = self.classes.of(pod)
        if cls not in self.rows:
            self._compute(np.array([cls]))
        return bool(self.rows[cls].any())

    def refresh(self, nodes: list[int]) -> None:
        """Recompute the columns of ``nodes`` (where pods were just placed)."""
        cols = np.searchsorted(self.nodes, nodes)
        ids = np.array(sorted(self.rows))
        fit = fit_matrix(self.cluster, self.classes.demand(ids), self.nodes[cols])
        for i, cls in enumerate(ids.tolist()):
            self.rows[cls][cols] = fit[i]
        self.reasons.clear()

    def reason(self, pod: Pod, pods: int, explain: Callable[[], PendingReason]) -> PendingReason:
        """``explain()``, once per fit class and gang size between placements (such jobs share the reason)."""
        key = (self.classes.of(pod), pods)
        if key not in self.reasons:
            self.reasons[key] = explain()
        return self.reasons[key]
