"""The scheduling loop of the service, on the live cluster (in memory, no I/O, deterministic).

Mutations (:meth:`Controller.submit`, :meth:`~Controller.finish`,
:meth:`~Controller.cancel`, node changes, timers falling due) change the
state and mark the loop dirty; :meth:`Controller.cycle` then runs one
scheduling pass. The caller persists :meth:`~Controller.drain_changes`.

Cycle
    Pending jobs are tried in queue order: priority (higher first), then the
    queue with the lowest fair share (:mod:`quasched.service.rules.quota`), then — with
    ``decay_alpha`` — the repeated-submission weight ``alpha^(k-1)`` of the
    k-th pending job of one user/app (higher first), then submission order.
    ``order="fifo"`` uses submission order only. Each job passes the quota
    check (which GPU models its queue may use), then the fit check of its fit
    class against every schedulable node (skipped without a scheduling cycle
    when no node fits; columns refresh after each placement, as in
    :class:`~quasched.policies.queue.PendingQueue`), then one scheduling
    cycle per pod; a gang that does not fully place is rolled back exactly.
    Jobs that stay pending get a :class:`~quasched.service.domain.PendingReason`.

Placements assumed on decisions not yet durable (:meth:`Controller.assume`, :mod:`.assumed`) take their
devices, are never jobs, and end forgotten, confirmed by a stored job, expired or lost with their node.

Composition
    The :class:`Controller` owns the cycle (assumptions expired, timers fired, a pass while anything
    changed) and composes, on one explicit :class:`~.state.LoopState` (jobs, quota, cluster, scheduler,
    change log, timers): queueing (the order and positions, :mod:`.queueing`), placing (the pass,
    gangs, batch mode, :mod:`.placing`), the room-maker (preemption and job swapping, :mod:`.room`),
    the lifecycle (ending, requeueing, arming a job, :mod:`.lifecycle`), node changes and recovery
    (:mod:`.nodes`), the runs of commands (:mod:`.runs`) and the views (:mod:`.views`). Each owns its
    part; the controller's public methods are theirs or its own.

With ``order="fifo"``, no quotas, no preemption and a fixed set of typical
pods, the loop places exactly as :func:`quasched.sim.replay.replay`
(:mod:`.virtual`, ``tests/service/loop/test_service_virtual.py``).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from quasched.metrics.typical import TypicalPods
from quasched.model.nodes import NodeSpec, spec_models
from quasched.model.workload import FULL_GPU_MILLI, Pod
from quasched.service.domain import (ANY_MODEL, MAX_GANG, Event, Job, JobSpec, JobState, NodeRecord, PendingReason,
                                     QueueSpec, Reason)
from quasched.service.loop import status
from quasched.service.loop.assumed import Assumption
from quasched.service.loop.lifecycle import Lifecycle
from quasched.service.loop.nodes import NodeChanges
from quasched.service.loop.placing import Placer
from quasched.service.loop.queueing import Queueing
from quasched.service.loop.room import RoomMaker
from quasched.service.loop.runs import Runs
from quasched.service.loop.state import MAX_UNFINISHED_PER_TEAM, LoopOptions, LoopState, SpecError
from quasched.service.loop.timers import TimerKind
from quasched.service.loop.views import Views
from quasched.service.rules.feasibility import accessible_models, most_pods, never_admitted, never_fits


def nodes_of(records: Sequence[NodeRecord]) -> NodeSpec:
    """A :class:`NodeSpec` of registered nodes (cordon and health are applied by the caller)."""
    return NodeSpec(
        name=np.array([r.name for r in records], dtype=object),
        cpu_milli=np.array([r.cpu_milli for r in records], dtype=np.int64),
        memory_mib=np.array([r.memory_mib for r in records], dtype=np.int64),
        num_gpus=np.array([r.num_gpus for r in records], dtype=np.int64),
        gpu_model=np.array([r.gpu_model for r in records], dtype=object),
        labels=np.array([dict(r.labels) for r in records] or [], dtype=object),
        source="service",
    )


def records_of(nodes: NodeSpec) -> list[NodeRecord]:
    """The registered form of every node of ``nodes``."""
    labels = nodes.labels if nodes.labels is not None else [None] * len(nodes)
    return [NodeRecord(str(n), int(c), int(m), int(g), str(model), dict(lab or {}))
            for n, c, m, g, model, lab in zip(nodes.name, nodes.cpu_milli, nodes.memory_mib, nodes.num_gpus,
                                              nodes.gpu_model, labels)]


class Controller:
    """Jobs, queues and the live cluster, with the scheduling loop (module docstring): the cycle is its own,
    the rest of its public methods are its collaborators'."""

    def __init__(self, nodes: NodeSpec, queues: Sequence[QueueSpec] = (), options: LoopOptions = LoopOptions(),
                 typical: TypicalPods | None = None) -> None:
        self.state = st = LoopState(nodes, queues, options, typical)
        self.room = RoomMaker(st)
        self.life = Lifecycle(st, self.room)
        self.runs = Runs(st, self.life)
        self.node_changes = NodeChanges(st, self.life)
        self.views = Views(st)
        self.queueing = Queueing(st)
        self.placer = Placer(st, self.queueing, self.room, self.life)
        # what callers read of the state
        self.options, self.cluster, self.scheduler = st.options, st.cluster, st.scheduler
        self.quota, self.assumptions, self.window = st.quota, st.assumptions, st.window
        self.jobs, self.position, self.samples = st.jobs, st.position, self.views.samples
        self.job, self.observe = st.job, st.observe
        # the collaborators' public methods
        nc = self.node_changes
        self.add_node, self.add_nodes, self.remove_node = nc.add_node, nc.add_nodes, nc.remove_node
        self.cordon, self.uncordon, self.drain = nc.cordon, nc.uncordon, nc.drain
        self.set_device_health, self.put_queue, self.restore = nc.set_device_health, nc.put_queue, nc.restore
        self.avoid_devices = nc.avoid_devices
        self.runs_here, self.exited, self.lost = self.runs.runs_here, self.runs.exited, self.runs.lost
        self.gpu_allocation, self.fragmentation = self.views.gpu_allocation, self.views.fragmentation
        self.fragmentation_report = self.views.fragmentation_report
        self.node_fragmentation = self.views.node_fragmentation
        self._on_timer: dict[TimerKind, Callable[[Job, float], None]] = {
            TimerKind.FINISH: self.life.finished_by_duration, TimerKind.PREEMPT: self.life.grace_over,
            TimerKind.STOP: self.runs.stopped, TimerKind.LIMIT: self.runs.over_limit}

    @classmethod
    def rebuilt(cls, records: Sequence[NodeRecord], queues: Sequence[QueueSpec], jobs: Sequence[Job],
                options: LoopOptions = LoopOptions()) -> Controller:
        """The loop as a store describes it: nodes with their cordons and failed devices, queues, unfinished jobs."""
        ctl = cls(nodes_of(records), queues, options)
        ctl.restore(jobs)  # first: jobs still run on nodes cordoned since they started
        for record in records:
            if record.cordoned:
                ctl.cluster.cordon(record.name)
            for device in record.unhealthy:
                ctl.cluster.set_device_health(record.name, device, False)
        return ctl

    # ----------------------------------------------------------------- jobs
    def validate(self, spec: JobSpec) -> None:
        """Raise :class:`SpecError` for a job this service can never run."""
        if spec.team not in self.quota.queues:
            raise SpecError("team", f"unknown team {spec.team!r}; known: {', '.join(sorted(self.quota.queues))} "
                                    "(an admin adds one with `quasched queue NAME`)")
        unfinished = self.jobs.per_team[spec.team]
        if unfinished >= MAX_UNFINISHED_PER_TEAM:
            raise SpecError("team", f"team {spec.team} has {unfinished:,} unfinished jobs, the most a team may have "
                                    f"({MAX_UNFINISHED_PER_TEAM:,}): wait for some to end or cancel them", status=429)
        if spec.priority_class not in self.options.priority_classes:
            raise SpecError("priority_class", f"unknown priority class {spec.priority_class!r}; "
                                              f"known: {', '.join(sorted(self.options.priority_classes))}")
        models = [m for m in self.cluster.models if m]
        unknown = [m for m in spec_models(spec.gpu_model) if m not in models]
        if unknown:
            raise SpecError("gpu_model", f"no node has GPU model {unknown[0]!r}; models: {', '.join(models)} "
                                         "(several allowed models: 'A|B')")
        if not 1 <= spec.pods <= MAX_GANG:
            raise SpecError("pods", f"a gang has 1 to {MAX_GANG} pods")
        if spec.gpu_milli < FULL_GPU_MILLI and spec.num_gpu > 1:
            raise SpecError("gpus", "a GPU share (less than one GPU) is for one device only")
        pod = self.state.pod(spec, 0, 0)
        if not most_pods(self.cluster, pod):
            where = f"the node that runs commands ({pod.node})" if pod.node else "no node of the cluster"
            raise SpecError("gpus" if spec.num_gpu else "cpu",
                            f"{where} could {'never ' if pod.node else ''}host one pod of this job even when empty")
        too_big = never_fits(self.cluster, pod, spec.pods)
        if too_big:
            raise SpecError("pods", too_big)
        over_quota = never_admitted(self.quota, accessible_models(self.cluster, spec.gpu_model), spec.team,
                                    spec.gpu_request * spec.pods)
        if over_quota:
            raise SpecError("gpus", over_quota)

    def validate_queue(self, spec: QueueSpec) -> None:
        """Raise :class:`SpecError` for a quota on a GPU model no node has."""
        models = sorted({str(m) for m in self.cluster.models if m})
        unknown = sorted(k for k in spec.quota if k != ANY_MODEL and k not in models)
        if unknown:
            raise SpecError("quota", f"no node has GPU model {unknown[0]!r}; models: {', '.join(models)} "
                                     f"('{ANY_MODEL}' covers every model not named)")

    def submit(self, job_id: int, spec: JobSpec, now: float, seq: int | None = None, validate: bool = True) -> Job:
        """Accept a job (``job_id`` and ``seq`` from the store; ``seq`` defaults to ``job_id``).

        ``validate=False`` accepts jobs no node could ever host (they stay pending): a trace replay's rows.
        """
        if validate:
            self.validate(spec)
        if job_id in self.jobs:
            raise ValueError(f"job {job_id} exists")
        job = Job(job_id, spec, self.options.priority_classes[spec.priority_class], now,
                  job_id if seq is None else seq, reason=PendingReason(Reason.QUEUED, "waiting for the next cycle"))
        self.jobs[job_id] = job
        self.observe(self.state.pod(spec, job_id, 0))
        self.state.changes.emit(now, "submitted", job)
        self.state.fresh.add(job_id)
        self.state.dirty = True
        return job

    def cancel(self, job_id: int, now: float) -> Job:
        """End ``job_id`` as cancelled (queued or running); its resources are freed at once, except that a
        process this machine runs gets the grace period to stop (state ``stopping``)."""
        job = self.job(job_id)
        if self.runs_here(job):
            if job.state == JobState.RUNNING:
                self.runs.stop(job, now, Reason.CANCELLING, "cancelled; the process gets the grace period to stop")
            return job
        return self.life.end(job_id, now, JobState.CANCELLED)

    def finish(self, job_id: int, now: float, failed: bool = False) -> Job:
        """The job's runtime reports completion (or failure)."""
        job = self.job(job_id)
        if not job.state.holds_resources:
            raise ValueError(f"job {job_id} is {job.state}, not running")
        return self.life.end(job_id, now, JobState.FAILED if failed else JobState.SUCCEEDED)

    def preempting(self, job_id: int, now: float, by: str, grace_s: float) -> Job:
        """Running ``job_id`` is being stopped by its runtime for ``by`` (e.g. Kubernetes evicts its pod, granting
        ``grace_s``): state ``preempting`` until the runtime reports its end; no timer of the loop requeues it."""
        job = self.job(job_id)
        if job.state != JobState.RUNNING:
            raise ValueError(f"job {job_id} is {job.state}, not running")
        self.room.stopping(job, now, by, by, grace_s, timer=False)
        return job

    def preempted(self, job_id: int, now: float) -> Job:
        """A job :meth:`preempting` stopped, as its runtime reports (however its process exited): it ends
        cancelled, its reason ``Preempted`` kept."""
        job = self.job(job_id)
        if job.state != JobState.PREEMPTING:
            raise ValueError(f"job {job_id} is {job.state}, not preempting")
        return self.life.end(job_id, now, JobState.CANCELLED, job.reason)

    # ------------------------------------------------------------ assumed placements
    def assume(self, key: str, pod: Pod, node: str, devices: tuple[int, ...], ttl_s: float, now: float,
               on_lost: Callable[[str], None] | None = None) -> bool:
        """Take ``devices`` of ``node`` for ``pod`` under ``key`` until ``now + ttl_s``, never as a job
        (:mod:`.assumed`); ``on_lost(key)`` if its node or a device goes first. False (nothing taken): they do not fit."""
        return self.assumptions.assume(key, pod, node, devices, ttl_s, now, on_lost) is not None

    def assumed(self, key: str) -> Assumption | None:
        """The placement assumed under ``key``, if any."""
        return self.assumptions.get(key)

    def forget(self, key: str) -> bool:
        """End the placement assumed under ``key``; exactly what it took is free again (False: there was none)."""
        forgotten = self.assumptions.forget(key) is not None
        self.state.dirty |= forgotten
        return forgotten

    def expire(self, now: float) -> list[str]:
        """Forget the assumptions whose TTL ran out by ``now`` (each reported to its ``on_lost``); their keys."""
        expired = self.assumptions.expire(now)
        self.state.dirty |= bool(expired)
        return expired

    def confirm(self, key: str, job: Job) -> bool:
        """Stored job ``job`` (one pod, running) takes the place assumed under ``key``: the same node, devices and
        request, else refused (False, the assumption kept). It enters the loop as a job restored from the store."""
        held = self.assumptions.get(key)
        pod = self.state.pod(job.spec, job.id, 0)
        if held is None or job.id in self.jobs or job.spec.pods != 1 or not job.state.holds_resources \
                or job.placement != [(held.node, held.devices)] or not np.array_equal(pod.request, held.pod.request) \
                or (pod.num_gpu, pod.gpu_milli, pod.team) != (held.pod.num_gpu, held.pod.gpu_milli, held.pod.team):
            return False
        c = self.cluster
        self.assumptions.forget(key)  # what it freed, the job takes: its devices only are checked again
        c.place(pod, held.slot, held.devices, filtered_at=int(c.version[held.slot]))
        self.quota.charge(job.spec.team, held.model, job.spec.gpu_request)
        self.jobs[job.id] = job
        self.life.arm(job)
        return True

    def reject(self, job: Job, now: float) -> Job:
        """A stored job that never entered the loop (its confirmation refused) ends cancelled; the change is
        handed out with the others (:meth:`drain_changes`)."""
        job.state, job.finished_at, job.placement, job.reason = JobState.CANCELLED, now, [], None
        self.state.changes.emit(now, JobState.CANCELLED.value, job)
        return job

    def drain_changes(self) -> tuple[list[Job], list[Event]]:
        """Jobs changed and events since the last drain (finished jobs leave memory here)."""
        jobs, events = self.state.changes.drain()
        for job in jobs:
            if job.state.finished:
                self.jobs.pop(job.id, None)
        return jobs, events

    # ------------------------------------------------------------ views
    def snapshot(self) -> dict[str, Any]:
        """Per node: GPU model, cordon, per-device used milli and health, CPU/memory use, jobs; and totals."""
        return status.snapshot(self)

    def queue_status(self) -> list[dict[str, Any]]:
        """Per queue: quota, cohort, GPUs used and borrowed, fair share, pending and running jobs."""
        return status.queue_status(self)

    # ------------------------------------------------------------ pods
    # ------------------------------------------------------------ time
    def next_timer(self) -> float | None:
        """Time of the earliest pending timer (a completion, a time limit or a grace-period end), None if none."""
        return self.state.timers.next_at

    def _fire(self, now: float) -> None:
        """Fire every timer due at or before ``now`` (one that no longer applies to its job does nothing)."""
        for timer in self.state.timers.due(now):
            job = self.jobs.get(timer.job_id)
            if job is not None:
                self._on_timer[timer.kind](job, timer.at)

    # ------------------------------------------------------------ the cycle
    def cycle(self, now: float) -> None:
        """Expire assumed placements, fire due timers, then schedule if anything changed; repeat while preemptions
        free room now."""
        self.expire(now)
        for _ in range(8):
            self._fire(now)
            if not self.state.dirty:
                break
            self.state.dirty = False
            self.placer.place_pending(now)
        self.views.sample(now)


