"""Placing: one pass over the pending jobs in queue order (:mod:`.controller`'s docstring): the quota check, the
fit check of each job's fit class, one scheduling cycle per pod of a gang (rolled back whole unless every pod
places), batch mode through the optimiser, then making room for the jobs that stay blocked."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Sequence

import numpy as np

from quasched.model.workload import Pod
from quasched.policies.framework import Scheduler
from quasched.service.domain import Job, JobState, Reason
from quasched.service.loop.lifecycle import Lifecycle
from quasched.service.loop.queueing import Queueing
from quasched.service.loop.room import RoomMaker
from quasched.service.loop.state import LoopState
from quasched.service.rules.batch import bind_on, solve_batch
from quasched.service.rules.feasibility import accessible_models
from quasched.service.rules.reasons import FitRows, capacity_reason, quota_reason


class Placer:
    """Places the pending jobs of ``state`` in the order of ``queueing``, making room with ``room``."""

    def __init__(self, state: LoopState, queueing: Queueing, room: RoomMaker, life: Lifecycle) -> None:
        self.state, self.queueing, self.room, self.life = state, queueing, room, life
        self.options, self.cluster, self.scheduler = state.options, state.cluster, state.scheduler
        self.quota, self.position = state.quota, state.position

    def place_pending(self, now: float) -> None:
        """Try the pending jobs in order: all of them if capacity or quota grew since the last pass,
        else only the jobs that arrived since (the others failed then and the state only got fuller)."""
        st = self.state
        full = bool(len(self.cluster.take_grown())) or st.full
        fresh, st.fresh, st.full = st.fresh, set(), False
        order = self.queueing.order(None if full else fresh)
        if not order:
            self.queueing.number([], full)
            return
        order = self.room.nominated_first(order)
        if full:  # what each queue's pending jobs want (a fresh pass adds the newcomers; placed ones count
            self.quota.pending = dict(_pending_gpus(order))  # until the next full pass: lenders err on keeping)
        else:
            self.quota.pending = dict(Counter(self.quota.pending) + _pending_gpus(order))
        if self.options.batch_solver:
            order = self._batch(order, now)
        first = {job.id: self._first_pod(job) for job in order}
        fits = FitRows(self.cluster, self.state.classes, [p for p in first.values() if p is not None])
        charged: set[str] = set()
        blocked: list[Job] = []
        for job in order:
            pod = self._first_pod(job) if self._quota_group(job) in charged else first[job.id]
            if pod is None:
                self.state.set_reason(job, quota_reason(self.quota, job, accessible_models(self.cluster, job.spec.gpu_model)))
                continue
            if job.id in fresh or fits.any(pod):  # a first attempt is a full cycle, as in kube-scheduler
                placed = self._place_gang(job, pod.gpu_model)
                if placed:
                    self.bind(job, now, placed, "started")
                    fits.refresh(sorted({node for _, node, _ in placed}))
                    charged.add(self._quota_group(job))
                    continue
            if not self.room.awaiting_victims(job):
                self.state.set_reason(job, fits.reason(pod, job.spec.pods, lambda: capacity_reason(self.cluster, job, pod)))
            blocked.append(job)
        if self.options.preemption:
            self.room.preempt(blocked, now)
        if self.options.defrag_per_hour > 0:
            for job in blocked:
                if job.state == JobState.PENDING and job.reason is not None and job.reason.code == Reason.FRAGMENTED:
                    self.room.defragment_for(job, now)
        self.queueing.number([job.id for job in order], full)

    def _batch(self, order: list[Job], now: float) -> list[Job]:
        """Bind what the batch optimiser assigns among the first admissible one-pod jobs; the rest, in order."""
        batch: list[tuple[Job, Pod]] = []
        for job in order:
            pod = self._first_pod(job) if job.spec.pods == 1 else None
            if pod is not None:
                batch.append((job, pod))
            if len(batch) == self.options.batch_size:
                break
        if not batch:
            return order
        outcome = solve_batch(self.cluster, [p for _, p in batch], self.options.batch_solver or "milp")
        c, done = self.cluster, set()
        for (job, pod), node in zip(batch, outcome.nodes):
            if node < 0 or not self.quota.admits(job.spec.team, str(c.models[c.model_id[node]]), job.gpu_total):
                continue
            devices = bind_on(c, self.scheduler.policy, pod, node)
            if devices is not None:
                self.bind(job, now, [(pod, node, devices)], "started")
                job.solver, job.gap = f"{outcome.solver} ({outcome.status})", outcome.gap
                done.add(job.id)
        return [j for j in order if j.id not in done]

    def _quota_group(self, job: Job) -> str:
        """Jobs whose admission a placement of ``job`` can change: its cohort (or its queue alone)."""
        return self.quota.queues[job.spec.team].cohort or "queue:" + job.spec.team

    def _first_pod(self, job: Job) -> Pod | None:
        """The job's first pod, restricted to the GPU models its quota admits now (None: none admits it)."""
        models = self.state.admissible(job)
        return None if models == [] else self.state.pod(job.spec, job.id, 0, models)

    def _place_gang(self, job: Job, gpu_model: str) -> list[tuple[Pod, int, tuple[int, ...]]]:
        pods = [replace(self.state.pod(job.spec, job.id, k), gpu_model=gpu_model) for k in range(job.spec.pods)]
        return place_together(self.scheduler, pods)

    def bind(self, job: Job, now: float, placed: list[tuple[Pod, int, tuple[int, ...]]], kind: str) -> None:
        """``job`` runs from ``now`` where ``placed`` put its pods: charged to its queue, timers armed, ``kind`` emitted."""
        c = self.cluster
        job.placement = [(str(c.names[node]), devices) for _, node, devices in placed]
        job.quota_model = str(c.models[c.model_id[placed[0][1]]]) if job.spec.gpu_request else ""
        for _, node, _ in placed:
            self.quota.charge(job.spec.team, str(c.models[c.model_id[node]]), job.spec.gpu_request)
        job.state, job.started_at, job.reason = JobState.RUNNING, now, None
        job.solver = f"policy:{self.options.policy}"
        self.room.done(job.id)
        self.position.pop(job.id, None)
        self.life.arm(job)
        self.state.changes.emit(now, kind, job, node=job.placement[0][0], devices=[list(d) for _, d in job.placement])


def place_together(scheduler: Scheduler, pods: Sequence[Pod], *, counted: bool = True,
                   first: np.ndarray | None = None) -> list[tuple[Pod, int, tuple[int, ...]]]:
    """A gang's pods placed in order, one scheduling cycle each, or none: when one does not place (or anything
    fails), those before it are removed exactly. The one rule of all-or-nothing placement, for the loop's gangs and
    Kubernetes pod groups alike; ``counted``: the cycles are the loop's (:meth:`Scheduler.decide`); ``first``: the
    node slots the first pod may take (kube-scheduler's candidates for it; None: any)."""
    placed: list[tuple[Pod, int, tuple[int, ...]]] = []
    whole = False
    try:
        for k, pod in enumerate(pods):
            decision = scheduler.decide(pod, first if k == 0 else None, counted=counted)
            if not decision.placed:
                return []
            scheduler.cluster.place(pod, decision.node, decision.devices, filtered_at=decision.version)
            placed.append((pod, decision.node, decision.devices))
        whole = True
        return placed
    finally:
        if not whole:
            for p, _, _ in placed:
                scheduler.cluster.remove(p)


def _pending_gpus(jobs: list[Job]) -> Counter[str]:
    """Milli-GPU wanted per queue by ``jobs``."""
    wanted = Counter[str]()
    for job in jobs:
        wanted[job.spec.team] += job.gpu_total
    return wanted
