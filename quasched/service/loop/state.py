"""What every part of the service's scheduling loop shares: its options (:class:`LoopOptions`),
the refusal of a submission (:class:`SpecError`), and :class:`LoopState`, the explicit state of jobs,
queues and quota, the live cluster and its scheduler, the change log (:mod:`.changes`) and the timers
(:mod:`.timers`), with the helpers every collaborator uses (a job's pods, the jobs on a node, a pending
reason, the GPU models a queue may use now). :class:`~.controller.Controller` composes the loop's
collaborators on it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, Mapping, Sequence

from quasched.metrics.typical import TypicalPods, TypicalWindow
from quasched.model.cluster import Cluster
from quasched.model.nodes import NodeSpec, accessible
from quasched.model.workload import FULL_GPU_MILLI, Pod
from quasched.policies import Scheduler, make_policy
from quasched.policies.queue import FitClasses
from quasched.policies.registry import PolicySpec, parse_spec
from quasched.service.domain import (DEFAULT_POLICY, LOG_CAP, MAX_GANG, PRIORITY_CLASSES, TEAM_LOG_CAP, Job, JobSpec,
                                     PendingReason, QueueSpec)
from quasched.service.loop.assumed import Assumptions
from quasched.service.loop.changes import Changes
from quasched.service.loop.timers import Timers
from quasched.service.rules.quota import QuotaBook
from quasched.sim.engine import RngKind, make_stream, node_ranks

#: the node a command job is bound to on a server that runs no commands (no node has this name: it never runs)
NO_COMMAND_NODE = "none: this server runs no commands"


#: most unfinished (pending or running) jobs a team may have; a submission past it is refused with 429
MAX_UNFINISHED_PER_TEAM = 10_000


class SpecError(ValueError):
    """A submission the service refuses; ``field`` names the offending input, ``status`` the HTTP status."""

    def __init__(self, field: str, message: str, status: int = 422) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status


class JobTable(dict[int, Job]):
    """The loop's jobs by id (unfinished ones, and finished ones until drained), counted per team."""

    def __init__(self) -> None:
        super().__init__()
        self.per_team: Counter[str] = Counter()

    def __setitem__(self, job_id: int, job: Job) -> None:
        old = self.get(job_id)
        if old is not None:
            self.per_team[old.spec.team] -= 1
        super().__setitem__(job_id, job)
        self.per_team[job.spec.team] += 1

    def __delitem__(self, job_id: int) -> None:
        self.per_team[self[job_id].spec.team] -= 1
        super().__delitem__(job_id)

    def pop(self, job_id: int, *default: Any) -> Any:  # type: ignore[override]
        if job_id in self:
            self.per_team[self[job_id].spec.team] -= 1
        return super().pop(job_id, *default)


@dataclass(frozen=True)
class LoopOptions:
    """How the loop orders, places and preempts (docstring of :mod:`.controller`); ``policy`` is a parsed spec
    (:func:`quasched.policies.registry.parse_spec`), :data:`DEFAULT_POLICY` unless given."""

    policy: PolicySpec = field(default_factory=lambda: parse_spec(DEFAULT_POLICY))
    seed: int = 0
    rng: RngKind = "native"
    order: Literal["fair", "fifo"] = "fair"
    decay_alpha: float | None = None
    preemption: bool = True
    grace_s: float = 30.0
    #: the node whose jobs' commands this service runs (None: none); a job with a command is placed only there
    local_node: str | None = None
    #: bytes kept of each job's log (half its start, half its end) and of the logs of a team's jobs (:mod:`quasched.service.executor.joblog` keeps them)
    log_cap: int = LOG_CAP
    team_log_cap: int = TEAM_LOG_CAP
    defrag_per_hour: int = 0
    #: batch mode: assign up to ``batch_size`` pending one-pod jobs per cycle with this optimiser
    #: ("milp", "qubo-sa", "qaoa", "greedy"; None = online placement only), then the online pass for the rest
    batch_solver: str | None = None
    batch_size: int = 16
    #: seconds between time-series samples
    sample_s: float = 5.0
    #: a job without GPUs goes to a node without GPUs whenever one fits it (off: as the simulators place)
    cpu_pods_off_gpu_nodes: bool = True
    #: the typical pods FGD-style policies score against (None: learned from the arrivals, a sliding window)
    typical: TypicalPods | None = None
    priority_classes: Mapping[str, int] = field(default_factory=lambda: dict(PRIORITY_CLASSES))


class LoopState:
    """What every part of the loop reads and changes: options, jobs, queues and quota, the live cluster with its
    scheduler and assumed placements, the change log, the timers, and what the next pass tries (``dirty``: a pass
    is due; ``fresh``: pending jobs not tried since they (re)entered the queue; ``full``: the next pass tries every
    pending job). Its functions are the helpers every part shares; behaviour is the collaborators'."""

    def __init__(self, nodes: NodeSpec, queues: Sequence[QueueSpec] = (), options: LoopOptions = LoopOptions(),
                 typical: TypicalPods | None = None) -> None:
        self.options = options
        self.rng = make_stream(options.rng, options.seed)
        rank = node_ranks(nodes, self.rng)
        self.cluster = Cluster(nodes)
        typical = typical if typical is not None else options.typical
        self.window = TypicalWindow(initial=typical) if typical is None else None
        self.typical: TypicalPods | TypicalWindow = typical if typical is not None else self.window  # type: ignore[assignment]
        self.scheduler = Scheduler(self.cluster, make_policy(options.policy, self.typical), rank, self.rng,
                                   cpu_pods_off_gpu_nodes=options.cpu_pods_off_gpu_nodes)
        self.quota = QuotaBook(queues)
        self.quota.capacity_milli = FULL_GPU_MILLI * self.cluster.total_gpus
        #: placements assumed on decisions not yet durable (never jobs: :mod:`.assumed`)
        self.assumptions = Assumptions(self.cluster, self.quota)
        self.jobs = JobTable()
        self.position: dict[int, int] = {}  # pending job id -> place (1, 2, ...) in the last cycle's order
        self.classes = FitClasses()
        self.changes = Changes()
        self.timers = Timers()
        #: node name -> device -> why new pods avoid it (its live state: hot, throttling, erroring, lost; the device
        #: cordoned in the cluster model); the pods on it keep running
        self.avoided: dict[str, dict[int, str]] = {}
        self.dirty = False
        self.fresh: set[int] = set()
        self.full = True

    def job(self, job_id: int) -> Job:
        """The unfinished job ``job_id`` (KeyError if it has finished or never existed)."""
        job = self.jobs.get(job_id)
        if job is None:
            raise KeyError(f"no unfinished job {job_id}")
        return job

    def observe(self, pod: Pod) -> None:
        """An arrival the policy's typical pods learn from (as :meth:`~.controller.Controller.submit` does for its
        jobs)."""
        if self.window is not None:
            self.window.observe(pod)

    def pod(self, spec: JobSpec, job_id: int, index: int, models: Sequence[str] | None = None) -> Pod:
        """Pod ``index`` of a job (:func:`job_pod`)."""
        return job_pod(spec, job_id * MAX_GANG + index, f"{spec.name}#{job_id}.{index}", models, self.options.local_node)

    def jobs_on(self, node: int, device: int | None = None) -> list[Job]:
        """The jobs with a pod on node slot ``node`` (with ``device``: on that device), by id."""
        ids = {p.pod.uid // MAX_GANG for p in self.cluster.placements.values()
               if p.node == node and (device is None or device in p.devices) and not self.assumptions.owns(p.pod.uid)}
        return [self.jobs[i] for i in sorted(ids)]

    def set_reason(self, job: Job, reason: PendingReason) -> None:
        """Say why ``job`` is pending (a change only if the code or message differs)."""
        reason = carried(job.reason, reason)
        if job.reason is None or (job.reason.code, job.reason.message) != (reason.code, reason.message):
            job.reason = reason
            self.changes.touch(job)

    def admissible(self, job: Job) -> list[str] | None:
        """GPU models the job's queue may use now (None = any: no limit applies); [] = none."""
        if not job.gpu_total:
            return None
        team, need = job.spec.team, job.gpu_total
        models = [m for m in self.cluster.models if m and accessible(m, job.spec.gpu_model)]
        ok = [m for m in models if self.quota.admits(team, m, need)]
        return None if len(ok) == len(models) else ok


def carried(old: PendingReason | None, new: PendingReason) -> PendingReason:
    """``new``, saying when and by whom the job was preempted if ``old`` did (until the job runs again)."""
    if old is None or "preempted_by" not in old.evidence or "preempted_by" in new.evidence:
        return new
    by, at = old.evidence["preempted_by"], old.evidence["preempted_at"]
    return PendingReason(new.code, f"{new.message} (preempted by job {by} at {utc(at)})",
                         {**new.evidence, "preempted_by": by, "preempted_at": at})


def job_pod(spec: JobSpec, uid: int = 0, name: str = "", models: Sequence[str] | None = None,
            local_node: str | None = None) -> Pod:
    """The pod of job spec ``spec`` as the fit rule and the policy see it (named ``name``, else the spec's), allowed
    the GPU ``models`` (None: the spec's); a command runs only on ``local_node``, so a command job's pods are bound
    to it (the loop's and the extender's one conversion)."""
    return Pod(uid=uid, name=name or spec.name, cpu_milli=spec.cpu_milli, memory_mib=spec.memory_mib,
               num_gpu=spec.num_gpu, gpu_milli=spec.gpu_milli,
               gpu_model="|".join(models) if models is not None else spec.gpu_model, app=spec.app,
               max_per_node=spec.max_per_node, team=spec.team, user=spec.user,
               node=(local_node or NO_COMMAND_NODE) if spec.command else "")


def utc(t: float) -> str:
    """``t`` (seconds since the epoch) as ``2026-11-28 09:15:02 UTC``."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
