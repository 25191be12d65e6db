"""The scheduling loop of the service, on the live cluster (in memory, no I/O, deterministic).

Mutations (:meth:`Controller.submit`, :meth:`~Controller.finish`,
:meth:`~Controller.cancel`, node changes, :meth:`~Controller.tick`) change the
state and mark the loop dirty; :meth:`Controller.cycle` then runs one
scheduling pass. The caller persists :meth:`~Controller.drain_changes`.

Cycle
    Pending jobs are tried in queue order: priority (higher first), then the
    queue with the lowest fair share (:mod:`.quota`), then — with
    ``decay_alpha`` — the repeated-submission weight ``alpha^(k-1)`` of the
    k-th pending job of one user/app (higher first), then submission order.
    ``order="fifo"`` uses submission order only. Each job passes the quota
    check (which GPU models its queue may use), then the fit check of its fit
    class against every schedulable node (skipped without a scheduling cycle
    when no node fits; columns refresh after each placement, as in
    :class:`~quasched.policies.queue.PendingQueue`), then one scheduling
    cycle per pod; a gang that does not fully place is rolled back exactly.
    Jobs that stay pending get a :class:`~.domain.PendingReason`.

Preemption (``preemption=True``)
    A job blocked by capacity may stop running jobs: of lower priority, or —
    when the job is within its queue's nominal quota — jobs of queues in its
    cohort that borrow. Victim order: borrowing queues first (the one
    borrowing most first), then lowest
    priority, then the largest (fewest victims free the room), then the most
    recently started (least work lost); per node the set is minimised by
    reprieve, as kube-scheduler does, and the node needing the fewest
    victims wins. Victims get ``grace_s`` seconds
    (state ``preempting``) and are then requeued with their original order.

Defragmentation (``defrag_per_hour = K > 0``)
    When a multi-GPU job is pending as ``Fragmented``, up to K running jobs
    per hour may be migrated off one node (each re-placed by the policy on
    another node) so the waiting job fits; a trial that does not free enough
    is rolled back exactly. Every migration is an event.

With ``order="fifo"``, no quotas, no preemption and a fixed set of typical
pods, the loop places exactly as :func:`quasched.sim.replay.replay`
(:mod:`.virtual`, ``tests/test_service_virtual.py``).
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from quasched.metrics.allocation import percent
from quasched.metrics.fragmentation import (
    StateTable,
    TypicalPods,
    TypicalWindow,
    cluster_fragmentation,
    frag_amount,
    state_table,
)
from quasched.model.cluster import (
    Cluster,
    NodeSpec,
    PlacementError,
    accessible,
    spec_models,
)
from quasched.model.workload import FULL_GPU_MILLI, Pod
from quasched.policies import Scheduler, make_policy
from quasched.policies.queue import FitClasses
from quasched.service import status
from quasched.service.batch import bind_on, solve_batch
from quasched.service.defrag import try_moves
from quasched.service.domain import (
    MAX_GANG,
    PRIORITY_CLASSES,
    Event,
    Job,
    JobSpec,
    JobState,
    NodeRecord,
    PendingReason,
    QueueSpec,
    Reason,
)
from quasched.service.preemption import cheapest_node, victim_order
from quasched.service.quota import QuotaBook
from quasched.service.reasons import FitRows, capacity_reason, quota_reason
from quasched.sim.engine import RngKind, make_stream, node_ranks

HOUR = 3600.0


class SpecError(ValueError):
    """A submission the service refuses; ``field`` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class LoopOptions:
    """How the loop orders, places and preempts (module docstring)."""

    policy: str = "fgd"
    seed: int = 0
    rng: RngKind = "native"
    order: Literal["fair", "fifo"] = "fair"
    decay_alpha: float | None = None
    preemption: bool = True
    grace_s: float = 30.0
    defrag_per_hour: int = 0
    #: batch mode: assign up to ``batch_size`` pending one-pod jobs per cycle with this optimiser
    #: ("milp", "qubo-sa", "qaoa", "greedy"; None = online placement only), then the online pass for the rest
    batch_solver: str | None = None
    batch_size: int = 16
    #: seconds between time-series samples
    sample_s: float = 5.0
    priority_classes: Mapping[str, int] = field(default_factory=lambda: dict(PRIORITY_CLASSES))


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
    """Jobs, queues and the live cluster, with the scheduling loop (module docstring)."""

    def __init__(self, nodes: NodeSpec, queues: Sequence[QueueSpec] = (), options: LoopOptions = LoopOptions(),
                 typical: TypicalPods | None = None) -> None:
        self.options = options
        self.rng = make_stream(options.rng, options.seed)
        rank = node_ranks(nodes, self.rng)
        self.cluster = Cluster(nodes)
        self.window = TypicalWindow(initial=typical) if typical is None else None
        self.typical: TypicalPods | TypicalWindow = typical if typical is not None else self.window  # type: ignore[assignment]
        self.scheduler = Scheduler(self.cluster, make_policy(options.policy, self.typical), rank, self.rng)
        self.quota = QuotaBook(queues)
        self.quota.capacity_milli = FULL_GPU_MILLI * self.cluster.total_gpus
        self.jobs: dict[int, Job] = {}  # unfinished jobs (and finished ones until drained)
        self.position: dict[int, int] = {}  # pending job id -> place in the last cycle's order
        self.classes = FitClasses()
        self._timers: list[tuple[float, int, str]] = []
        self._changed: dict[int, Job] = {}
        self._events: list[Event] = []
        self._migrations: deque[float] = deque()
        self._claimed: set[int] = set()  # victims already promised to a preempting job
        #: job that preempted -> (queue, milli-GPU it awaits, its victims)
        self._nominated: dict[int, tuple[str, int, tuple[int, ...]]] = {}
        self._dirty = False
        self._fresh: set[int] = set()  # pending jobs not tried since they (re)entered the queue
        self._full = True  # the next pass tries every pending job
        self.samples: deque[tuple[float, float, float, int]] = deque(maxlen=4096)

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
        if not self._fits_empty(self._pod(spec, 0, 0)):
            raise SpecError("gpus" if spec.num_gpu else "cpu",
                            "no node of the cluster could host one pod of this job even when empty")

    def _fits_empty(self, pod: Pod) -> bool:
        c = self.cluster
        present = c.present & c.spec_mask(pod.gpu_spec)
        enough = (c.capacity >= pod.request).all(axis=1) & (c.gpu_healthy.sum(axis=1) >= pod.num_gpu)
        return bool((present & enough).any())

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
        self.observe(self._pod(spec, job_id, 0))
        self._emit(now, "submitted", job)
        self._fresh.add(job_id)
        self._dirty = True
        return job

    def cancel(self, job_id: int, now: float) -> Job:
        """End ``job_id`` as cancelled (queued or running); its resources are freed at once."""
        return self._end(job_id, now, JobState.CANCELLED)

    def finish(self, job_id: int, now: float, failed: bool = False) -> Job:
        """The job's runtime reports completion (or failure)."""
        job = self.job(job_id)
        if not job.state.holds_resources:
            raise ValueError(f"job {job_id} is {job.state}, not running")
        return self._end(job_id, now, JobState.FAILED if failed else JobState.SUCCEEDED)

    def job(self, job_id: int) -> Job:
        """The unfinished job ``job_id`` (KeyError if it has finished or never existed)."""
        job = self.jobs.get(job_id)
        if job is None:
            raise KeyError(f"no unfinished job {job_id}")
        return job

    def _end(self, job_id: int, now: float, state: JobState) -> Job:
        job = self.job(job_id)
        if job.state.finished:
            raise ValueError(f"job {job_id} already {job.state}")
        if job.state.holds_resources:
            self._release(job)
        job.state, job.finished_at, job.reason = state, now, None
        self.position.pop(job_id, None)
        self._nominated.pop(job_id, None)
        self._emit(now, state.value, job)
        self._dirty = True
        return job

    # ------------------------------------------------------------ pods
    def _pod(self, spec: JobSpec, job_id: int, index: int, models: Sequence[str] | None = None) -> Pod:
        return Pod(uid=job_id * MAX_GANG + index, name=f"{spec.name}#{job_id}.{index}", cpu_milli=spec.cpu_milli,
                   memory_mib=spec.memory_mib, num_gpu=spec.num_gpu, gpu_milli=spec.gpu_milli,
                   gpu_spec="|".join(models) if models is not None else spec.gpu_model, app=spec.app,
                   max_per_node=spec.max_per_node, team=spec.team, user=spec.user)

    def _bind(self, job: Job, now: float, placed: list[tuple[Pod, int, tuple[int, ...]]], kind: str) -> None:
        c = self.cluster
        job.placement = [(str(c.names[node]), devices) for _, node, devices in placed]
        job.quota_model = str(c.models[c.model_id[placed[0][1]]]) if job.spec.gpu_request else ""
        for _, node, _ in placed:
            self.quota.charge(job.spec.team, str(c.models[c.model_id[node]]), job.spec.gpu_request)
        job.state, job.started_at, job.reason = JobState.RUNNING, now, None
        job.solver = f"policy:{self.options.policy}"
        self._nominated.pop(job.id, None)
        self.position.pop(job.id, None)
        if job.spec.duration_s is not None:
            heapq.heappush(self._timers, (now + job.spec.duration_s, job.id, "finish"))
        self._emit(now, kind, job, node=job.placement[0][0], devices=[list(d) for _, d in job.placement])

    def _release(self, job: Job) -> None:
        self._claimed.discard(job.id)
        c = self.cluster
        for k in range(job.spec.pods):
            placement = c.remove(job.id * MAX_GANG + k)
            self.quota.charge(job.spec.team, str(c.models[c.model_id[placement.node]]), -job.spec.gpu_request)
        job.placement = []

    # ------------------------------------------------------------ nodes
    def add_node(self, record: NodeRecord, now: float) -> None:
        """Add ``record``'s node (cordoned and unhealthy devices as recorded); the GPU quota capacity follows."""
        c = self.cluster
        c.add_node(record.name, {"cpu": record.cpu_milli, "memory": record.memory_mib}, record.num_gpus,
                   record.gpu_model, record.labels)
        if record.cordoned:
            c.cordon(record.name)
        for d in record.unhealthy:
            c.set_device_health(record.name, d, False)
        self.quota.capacity_milli = FULL_GPU_MILLI * c.total_gpus
        self._events.append(Event(now, "node-added", node=record.name))
        self._dirty = True

    def remove_node(self, name: str, now: float) -> None:
        """Drain node ``name`` (its jobs are requeued) and remove it; the GPU quota capacity follows."""
        self.drain(name, now)
        self.cluster.remove_node(name)
        self.quota.capacity_milli = FULL_GPU_MILLI * self.cluster.total_gpus
        self._events.append(Event(now, "node-removed", node=name))

    def cordon(self, name: str, now: float, drain: bool = False) -> None:
        """Place nothing more on node ``name``; with ``drain`` also requeue its jobs."""
        self.cluster.cordon(name)
        self._events.append(Event(now, "node-cordoned", node=name))
        if drain:
            self.drain(name, now)

    def uncordon(self, name: str, now: float) -> None:
        """Let node ``name`` take jobs again."""
        self.cluster.uncordon(name)
        self._events.append(Event(now, "node-uncordoned", node=name))
        self._dirty = True

    def drain(self, name: str, now: float) -> None:
        """Requeue every job with a pod on node ``name``."""
        for job in self._jobs_on(self.cluster.node(name)):
            self._requeue(job, now, "evicted", node=name)

    def set_device_health(self, name: str, device: int, healthy: bool, now: float) -> None:
        """Mark a GPU device; jobs on a failed device are requeued."""
        node = self.cluster.node(name)
        self.cluster.set_device_health(node, device, healthy)
        self._events.append(Event(now, "device-healthy" if healthy else "device-unhealthy", node=name,
                                  data={"device": device}))
        if not healthy:
            for job in self._jobs_on(node, device):
                self._requeue(job, now, "evicted", node=name, device=device)
        self._dirty = True

    def _jobs_on(self, node: int, device: int | None = None) -> list[Job]:
        ids = {p.pod.uid // MAX_GANG for p in self.cluster.placements.values()
               if p.node == node and (device is None or device in p.devices)}
        return [self.jobs[i] for i in sorted(ids)]

    def _requeue(self, job: Job, now: float, kind: str, **data: Any) -> None:
        self._release(job)
        job.state, job.started_at, job.preempt_at = JobState.PENDING, None, None
        job.restarts += 1
        job.reason = PendingReason(Reason.QUEUED, f"requeued ({kind})")
        self._fresh.add(job.id)
        self._emit(now, kind, job, **data)
        self._dirty = True

    def put_queue(self, spec: QueueSpec) -> None:
        """Create or replace a queue (quota and cohort); the next cycle reconsiders every pending job."""
        self.quota.put(spec)
        self._full = self._dirty = True

    # ------------------------------------------------------------ time
    def next_timer(self) -> float | None:
        """Time of the earliest pending timer (a completion or a grace-period end), None if none."""
        return self._timers[0][0] if self._timers else None

    def _fire(self, now: float) -> None:
        """Fire every timer due at or before ``now``: completions by duration, grace-period ends."""
        while self._timers and self._timers[0][0] <= now:
            t, job_id, what = heapq.heappop(self._timers)
            job = self.jobs.get(job_id)
            if job is None:
                continue
            if what == "finish" and job.state.holds_resources and job.started_at is not None \
                    and job.spec.duration_s is not None and job.started_at + job.spec.duration_s == t:
                self._end(job_id, t, JobState.SUCCEEDED)
            elif what == "preempt" and job.state == JobState.PREEMPTING and job.preempt_at == t:
                self._requeue(job, t, "preempted")

    # ------------------------------------------------------------ the cycle
    def cycle(self, now: float) -> None:
        """Fire due timers, then schedule if anything changed; repeat while preemptions free room now."""
        for _ in range(8):
            self._fire(now)
            if not self._dirty:
                break
            self._dirty = False
            self._pass(now)
        self._sample(now)

    def _order(self, only: set[int] | None = None) -> list[Job]:
        """Pending jobs (those in ``only``, if given) in the order of the module docstring."""
        pending = sorted((j for j in self.jobs.values() if j.state == JobState.PENDING
                          and (only is None or j.id in only)), key=lambda j: j.seq)
        if self.options.order == "fifo":
            return pending
        weight: dict[int, float] = {}
        alpha, seen = self.options.decay_alpha, Counter[tuple[str, str]]()
        for job in pending:
            key = (job.spec.user, job.spec.app)
            weight[job.id] = alpha ** seen[key] if alpha is not None else 1.0
            seen[key] += 1
        by_queue: dict[str, deque[Job]] = {}
        for job in sorted(pending, key=lambda j: (-j.priority, -weight[j.id], j.seq)):
            by_queue.setdefault(job.spec.team, deque()).append(job)
        share = {q: self.quota.share(q) for q in by_queue}
        heads = [(-q[0].priority, share[name], -weight[q[0].id], q[0].seq, name) for name, q in by_queue.items()]
        heapq.heapify(heads)
        order: list[Job] = []
        gpus = Counter[str]()
        while heads:
            *_, name = heapq.heappop(heads)
            job = by_queue[name].popleft()
            order.append(job)
            gpus[name] += job.gpu_total  # the share the queue would have if it got the job
            if by_queue[name]:
                nxt = by_queue[name][0]
                spec = self.quota.queues[name]
                nominal = sum(spec.quota.values()) * 1000 or self.quota.capacity_milli or 1
                heapq.heappush(heads, (-nxt.priority, share[name] + gpus[name] / nominal / spec.weight,
                                       -weight[nxt.id], nxt.seq, name))
        return order

    def _pass(self, now: float) -> None:
        """Try the pending jobs in order: all of them if capacity or quota grew since the last pass,
        else only the jobs that arrived since (the others failed then and the state only got fuller)."""
        full = bool(len(self.cluster.take_grown())) or self._full
        fresh, self._fresh, self._full = self._fresh, set(), False
        order = self._order(None if full else fresh)
        if not order:
            return
        if self._nominated:  # jobs that preempted go first: the room their victims leave is theirs
            order = [j for j in order if j.id in self._nominated] + [j for j in order if j.id not in self._nominated]
        if full:  # what each queue's pending jobs want (a fresh pass adds the newcomers; placed ones count
            self.quota.pending = dict(_pending_gpus(order))  # until the next full pass: lenders err on keeping)
        else:
            self.quota.pending = dict(Counter(self.quota.pending) + _pending_gpus(order))
        if self.options.batch_solver:
            order = self._batch(order, now)
        first = {job.id: self._first_pod(job) for job in order}
        fits = FitRows(self.cluster, self.classes, [p for p in first.values() if p is not None])
        charged: set[str] = set()
        blocked: list[Job] = []
        base = 0 if full else len(self.position)
        for position, job in enumerate(order):
            self.position[job.id] = base + position
            pod = self._first_pod(job) if self._quota_group(job) in charged else first[job.id]
            if pod is None:
                self._set_reason(job, quota_reason(self.quota, job))
                continue
            if job.id in fresh or fits.any(pod):  # a first attempt is a full cycle, as in kube-scheduler
                placed = self._place_gang(job, pod.gpu_spec)
                if placed:
                    self._bind(job, now, placed, "started")
                    fits.refresh(sorted({node for _, node, _ in placed}))
                    charged.add(self._quota_group(job))
                    continue
            if not self._awaiting_victims(job):
                self._set_reason(job, fits.reason(pod, job.spec.pods, lambda: capacity_reason(self.cluster, job, pod)))
            blocked.append(job)
        if self.options.preemption:
            self._preempt(blocked, now)
        if self.options.defrag_per_hour > 0:
            for job in blocked:
                if job.state == JobState.PENDING and job.reason is not None and job.reason.code == Reason.FRAGMENTED:
                    self._defragment_for(job, now)

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
                self._bind(job, now, [(pod, node, devices)], "started")
                job.solver, job.gap = f"{outcome.solver} ({outcome.status})", outcome.gap
                done.add(job.id)
        return [j for j in order if j.id not in done]

    def _quota_group(self, job: Job) -> str:
        """Jobs whose admission a placement of ``job`` can change: its cohort (or its queue alone)."""
        return self.quota.queues[job.spec.team].cohort or "queue:" + job.spec.team

    def _first_pod(self, job: Job) -> Pod | None:
        """The job's first pod, restricted to the GPU models its quota admits now (None: none admits it)."""
        models = self._admissible(job)
        return None if models == [] else self._pod(job.spec, job.id, 0, models)

    def _admissible(self, job: Job) -> list[str] | None:
        """GPU models the job's queue may use now (None = any: no limit applies); [] = none."""
        if not job.gpu_total:
            return None
        team, need = job.spec.team, job.gpu_total
        models = [m for m in self.cluster.models if m and accessible(m, job.spec.gpu_model)]
        ok = [m for m in models if self.quota.admits(team, m, need)]
        return None if len(ok) == len(models) else ok

    def _place_gang(self, job: Job, gpu_spec: str) -> list[tuple[Pod, int, tuple[int, ...]]]:
        placed: list[tuple[Pod, int, tuple[int, ...]]] = []
        for k in range(job.spec.pods):
            pod = replace(self._pod(job.spec, job.id, k), gpu_spec=gpu_spec)
            decision = self.scheduler.schedule(pod)
            if not decision.placed:
                for p, _, _ in placed:
                    self.cluster.remove(p)
                return []
            placed.append((pod, decision.node, decision.devices))
        return placed

    def _set_reason(self, job: Job, reason: PendingReason) -> None:
        if job.reason is None or (job.reason.code, job.reason.message) != (reason.code, reason.message):
            job.reason = reason
            self._changed[job.id] = job

    # ------------------------------------------------------------ preemption
    def _preempt(self, blocked: list[Job], now: float) -> None:
        """Choose victims for blocked one-pod jobs, in order; a job whose kind found none stops its kind's search."""
        hopeless: set[tuple] = set()
        for job in blocked:
            if job.state != JobState.PENDING or job.spec.pods != 1 or self._awaiting_victims(job):
                continue
            pod = self._pod(job.spec, job.id, 0, self._admissible(job))
            kind = (pod.fit_key, job.spec.team, job.priority)
            if kind not in hopeless and not self._preempt_for(job, pod, now):
                hopeless.add(kind)

    def _awaiting_victims(self, job: Job) -> bool:
        """Whether ``job`` preempted and some of its victims still hold their resources."""
        entry = self._nominated.get(job.id)
        return entry is not None and any(v in self.jobs and self.jobs[v].state.holds_resources for v in entry[2])

    def _preempt_for(self, job: Job, pod: Pod, now: float) -> bool:
        """Start preempting the cheapest victim set that makes room for ``job``; False if there is none."""
        self._nominated.pop(job.id, None)  # its earlier victims left and it still did not fit: choose again
        promised = sum(milli for team, milli, _ in self._nominated.values() if team == job.spec.team)
        reclaim = job.gpu_total > 0 and any(self.quota.within_nominal(job.spec.team, m, job.gpu_total + promised)
                                            for m in self.cluster.models if m and accessible(m, pod.gpu_spec))
        running = (v for v in self.jobs.values() if v.state.holds_resources and v.id not in self._claimed)
        victims = victim_order(self.quota, running, job, reclaim)
        best = cheapest_node(self.cluster, pod, victims) if victims else None
        if best is None:
            return False
        node, chosen = best
        self._nominated[job.id] = (job.spec.team, job.gpu_total, tuple(v.id for v in chosen))
        for victim in chosen:
            self._claimed.add(victim.id)
            if victim.state == JobState.RUNNING:
                victim.state, victim.preempt_at = JobState.PREEMPTING, now + self.options.grace_s
                heapq.heappush(self._timers, (victim.preempt_at, victim.id, "preempt"))
                self._emit(now, "preempting", victim, by=job.id, grace_s=self.options.grace_s)
        self._set_reason(job, PendingReason(
            Reason.PREEMPTION_PENDING, f"{len(chosen)} job(s) on {self.cluster.names[node]} stop within "
            f"{self.options.grace_s:g} s to make room", {"node": str(self.cluster.names[node]),
                                                          "victims": [v.id for v in chosen]}))
        return True

    # ------------------------------------------------------------ defragmentation
    def _defragment_for(self, job: Job, now: float) -> None:
        window = self._migrations
        while window and window[0] <= now - HOUR:
            window.popleft()
        budget = self.options.defrag_per_hour - len(window)
        if budget <= 0 or job.spec.pods != 1:
            return
        c = self.cluster
        pod = self._pod(job.spec, job.id, 0, self._admissible(job))
        room = c.schedulable & c.spec_mask(pod.gpu_spec) & (c.gpu_healthy.sum(axis=1) >= pod.num_gpu)
        candidates = sorted(np.flatnonzero(room).tolist(), key=lambda n: (int(c.gpu_alloc[n].sum()), n))[:32]
        for node in candidates:
            movable = [j for j in self._jobs_on(node) if j.state == JobState.RUNNING and j.spec.pods == 1]
            moves = try_moves(self.cluster, self.scheduler, pod, node, sorted(movable, key=lambda j: (j.gpu_total, j.id))[:budget])
            if moves is not None:
                for moved_id, (src, dst) in moves.items():
                    moved = self.jobs[moved_id]
                    window.append(now)
                    self._emit(now, "migrated", moved, node=dst[0], source=src[0], devices=list(dst[1]))
                    moved.placement = [dst]
                    moved.restarts += 1
                    self._changed[moved.id] = moved
                self._dirty = True
                return

    # ------------------------------------------------------------ state out
    def _emit(self, now: float, kind: str, job: Job, node: str = "", **data: Any) -> None:
        self._changed[job.id] = job
        self._events.append(Event(now, kind, job.id, node, data))

    def drain_changes(self) -> tuple[list[Job], list[Event]]:
        """Jobs changed and events since the last drain (finished jobs leave memory here)."""
        jobs, events = list(self._changed.values()), self._events
        self._changed, self._events = {}, []
        for job in jobs:
            if job.state.finished:
                self.jobs.pop(job.id, None)
        return jobs, events

    def _sample(self, now: float) -> None:
        if self.samples and now - self.samples[-1][0] < self.options.sample_s:
            return
        frag = self.fragmentation()
        pending = sum(1 for j in self.jobs.values() if j.state == JobState.PENDING)
        self.samples.append((now, self.gpu_allocation(), frag, pending))

    def gpu_allocation(self) -> float:
        """Allocated GPU milli as % of the cluster's GPUs."""
        return percent(self.cluster.gpu_allocated, FULL_GPU_MILLI * self.cluster.total_gpus)

    def _table(self) -> StateTable | None:
        """The fragmentation table of the current typical pods (None before any is known)."""
        typical = self.typical.current if isinstance(self.typical, TypicalWindow) else self.typical
        return None if typical is None else state_table(self.cluster, typical)

    def fragmentation(self) -> float:
        """Fragmentation ratio (% of idle GPU milli) for the current typical pods (0 before any is known)."""
        table = self._table()
        return 0.0 if table is None else cluster_fragmentation(table).frag_ratio

    def node_fragmentation(self) -> np.ndarray:
        """Fragmented milli-GPU of every node slot (FGD's measure for the current typical pods)."""
        table = self._table()
        if table is None:
            return np.zeros(self.cluster.n_nodes)
        ids = table.ids()
        return frag_amount(table.vectors[ids])

    def snapshot(self) -> dict[str, Any]:
        """Per node: GPU model, cordon, per-device used milli and health, CPU/memory use, jobs; and totals."""
        return status.snapshot(self)

    def queue_status(self) -> list[dict[str, Any]]:
        """Per queue: quota, cohort, GPUs used and borrowed, fair share, pending and running jobs."""
        return status.queue_status(self)

    # ------------------------------------------------------------ recovery
    def observe(self, pod: Pod) -> None:
        """An arrival the policy's typical pods learn from (as :meth:`submit` does for its jobs)."""
        if self.window is not None:
            self.window.observe(pod)

    def restore(self, jobs: Sequence[Job], observe: bool = True) -> None:
        """Re-admit unfinished jobs from the store: running ones at their recorded nodes and devices.

        ``observe``: the typical pods relearn their shapes (False: they were observed on arrival)."""
        for job in sorted(jobs, key=lambda j: j.seq):
            self.jobs[job.id] = job
            if observe:  # typical pods: relearned from the jobs that are still around
                self.observe(self._pod(job.spec, job.id, 0))
            if job.state.holds_resources:
                problem = self._restore_placement(job)
                if problem:  # the node left or changed while the service was down
                    job.placement, job.state, job.started_at = [], JobState.PENDING, None
                    self._fresh.add(job.id)
                    self._emit(job.submitted_at, "requeued", job, error=problem)
                    continue
                if job.state == JobState.PREEMPTING and job.preempt_at is not None:
                    heapq.heappush(self._timers, (job.preempt_at, job.id, "preempt"))
                if job.spec.duration_s is not None and job.started_at is not None:
                    heapq.heappush(self._timers, (job.started_at + job.spec.duration_s, job.id, "finish"))
        self._full = self._dirty = True

    def _restore_placement(self, job: Job) -> str:
        """Bind a restored running job where the store says it runs; the error ("" = none, nothing bound)."""
        c, placed = self.cluster, []
        try:
            for k, (name, devices) in enumerate(job.placement):
                placed.append(c.place(self._pod(job.spec, job.id, k), c.node(name), devices))
        except PlacementError as err:
            for p in placed:
                c.remove(p.pod)
            return str(err)
        for p in placed:
            self.quota.charge(job.spec.team, str(c.models[c.model_id[p.node]]), job.spec.gpu_request)
        return ""


def _pending_gpus(jobs: list[Job]) -> Counter[str]:
    """Milli-GPU wanted per queue by ``jobs``."""
    wanted = Counter[str]()
    for job in jobs:
        wanted[job.spec.team] += job.gpu_total
    return wanted
