"""The service's vocabulary: jobs, queues, pending reasons and the events they emit.

Plain dataclasses, shared by the scheduling loop (:mod:`quasched.service.loop.controller`), the
store (:mod:`quasched.service.store.database`) and the API (:mod:`quasched.service.api.app`); none of them depends on the
others' libraries. Units follow the core: CPU in milli-cores, memory in MiB,
GPUs in milli-GPU per device (1000 = one whole device), times in seconds.

A job is ``pods`` identical pods placed all-or-nothing (a gang; 1 by default).
A job asks either for a fraction of one GPU (``gpu_milli < 1000``,
``num_gpu == 1``) or for ``num_gpu`` whole GPUs per pod.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

#: Largest gang; pod uid = job id * MAX_GANG + pod index.
MAX_GANG = 1024
#: Key of a queue's quota that covers every GPU model it does not name.
ANY_MODEL = "*"
#: Default priority classes (name -> value; higher runs sooner and may preempt lower).
PRIORITY_CLASSES: dict[str, int] = {"low": 0, "normal": 100, "high": 1000}
#: Bytes kept by default of a job's log (half its start, half its end) and of the logs of a team's jobs
LOG_CAP = 64 << 20
TEAM_LOG_CAP = 1 << 30
#: The service's placement policy when none is given (``quasched serve --policy``, ``LoopOptions()``)
DEFAULT_POLICY = "guard"


class JobState(StrEnum):
    """A job's life: pending, running, preempting, then one of the finished states."""
    PENDING = "pending"
    RUNNING = "running"
    #: running, chosen as a preemption victim, stopping within its grace period
    PREEMPTING = "preempting"
    #: running, being stopped (cancelled, or past its time limit) within its grace period
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)

    @property
    def holds_resources(self) -> bool:
        return self in (JobState.RUNNING, JobState.PREEMPTING, JobState.STOPPING)


class Reason(StrEnum):
    """Why a job is pending (one code per pending job, refreshed every cycle), stopping, or how it ended."""

    #: not considered yet, or behind jobs that come first; evidence: ``position``
    QUEUED = "Queued"
    #: at a federation front: held for the member and the time its dispatcher chose, or sent there and not started;
    #: evidence: ``member``, ``release_at`` or ``remote_id``
    DISPATCHED = "Dispatched"
    #: the queue's quota (and its cohort's unused quota) has no room; evidence: usage, nominal, borrowable
    WAITING_FOR_QUOTA = "WaitingForQuota"
    #: enough free capacity in total, but no single node (set of nodes, for a gang) can host it
    FRAGMENTED = "Fragmented"
    #: not enough free capacity of the kind the job needs anywhere right now
    INSUFFICIENT = "InsufficientResources"
    #: victims were chosen and are stopping within their grace period
    PREEMPTION_PENDING = "PreemptionPending"
    #: the job can never run on the cluster as it is or under its queue's quota (it waits for nodes or quota)
    UNSCHEDULABLE = "Unschedulable"
    #: preempting: chosen as a victim, stopping within its grace period; evidence: ``preempted_by``, ``preempted_at``
    #: (carried into the reasons of the job while it waits again)
    PREEMPTED = "Preempted"
    #: stopping: cancelled while its process runs (it gets the grace period)
    CANCELLING = "Cancelling"
    #: stopping, then failed: it ran longer than its ``time_limit_s``
    TIME_LIMIT = "TimeLimitExceeded"
    #: failed: its command exited with a non-zero code; evidence: ``exit_code``, ``log_tail``
    EXIT_CODE = "NonZeroExit"
    #: failed: its process ended while the service was down and left no exit code
    LOST = "Lost"
    #: failed: the kernel's OOM killer killed a process of its cgroup (past its memory request); evidence:
    #: ``exit_code``, ``memory_mib``, ``log_tail``
    OUT_OF_MEMORY = "OutOfMemory"


@dataclass(frozen=True)
class JobSpec:
    """What a user submits (validated at the API boundary)."""

    name: str
    team: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_model: str = ""
    pods: int = 1
    user: str = ""
    app: str = ""
    max_per_node: int = -1
    priority_class: str = "normal"
    #: seconds of run time; the service finishes the job after it (simulated-run mode), None = the runtime reports
    duration_s: float | None = None
    #: client-chosen idempotency key: a resubmission with the same key returns the first job
    client_token: str | None = None
    #: what runs when the job is placed on this machine's node: argv (empty: no command, bookkeeping only)
    command: tuple[str, ...] = ()
    #: environment variables added to the service's for the command
    env: tuple[tuple[str, str], ...] = ()
    #: working directory of the command ("" = the service's state directory for the job)
    workdir: str = ""
    #: seconds a job may run; past it, it is stopped as a cancel is and fails (None = no limit)
    time_limit_s: float | None = None

    @property
    def gpu_request(self) -> int:
        """Milli-GPU per pod (``num_gpu * gpu_milli``)."""
        return self.num_gpu * self.gpu_milli


@dataclass
class PendingReason:
    """Why a pending job waits: a :class:`Reason` code, a sentence and its evidence."""
    code: Reason
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class Job:
    """A submitted job and everything the service knows about it (a row of the store)."""

    id: int
    spec: JobSpec
    priority: int
    submitted_at: float
    #: submission order, the FIFO tiebreak (kept across restarts)
    seq: int
    state: JobState = JobState.PENDING
    started_at: float | None = None
    finished_at: float | None = None
    #: per pod: (node name, GPU device indices); empty unless running/preempting
    placement: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    reason: PendingReason | None = None
    #: GPU model charged to the queue's quota while running
    quota_model: str = ""
    #: when a preempting job is stopped (grace period end)
    preempt_at: float | None = None
    #: placed by which solver ("policy:fgd", "milp", ...) and its proven optimality gap (batch mode)
    solver: str = ""
    gap: float | None = None
    restarts: int = 0
    #: the command's exit status (-N: killed by signal N); None while running or without a command
    exit_code: int | None = None
    #: usage of the runs that ended (the current run is added by :meth:`usage`)
    wall_s: float = 0.0
    gpu_hours: float = 0.0

    def usage(self, now: float) -> tuple[float, float]:
        """Wall seconds run and GPU-hours booked until ``now`` (the current run included)."""
        if self.started_at is None or not self.state.holds_resources:
            return self.wall_s, self.gpu_hours
        run = max(0.0, now - self.started_at)
        return self.wall_s + run, self.gpu_hours + run * self.gpu_total / 1000 / 3600

    @property
    def gpu_total(self) -> int:
        """Milli-GPU of the whole gang."""
        return self.spec.gpu_request * self.spec.pods


@dataclass
class QueueSpec:
    """A team's queue (Kueue's ClusterQueue): quota per GPU model, borrowing within a cohort, weight.

    ``quota`` maps GPU model (or :data:`ANY_MODEL`) to a nominal number of
    GPUs; a queue with a quota admits only the models it names (all with
    :data:`ANY_MODEL`), a queue with an empty quota is not limited.
    ``borrowing_limit`` caps GPUs used beyond nominal (None = unlimited,
    bounded by the cohort's unused quota); queues without a cohort never
    borrow. ``weight`` scales the queue's fair share.
    """

    name: str
    quota: dict[str, float] = field(default_factory=dict)
    cohort: str = ""
    borrowing_limit: float | None = None
    weight: float = 1.0


@dataclass
class Event:
    """One line of the audit log (and of the live stream)."""

    time: float
    kind: str  # submitted, started, finished, failed, cancelled, preempting, preempted, migrated, node-*, ...
    job_id: int | None = None
    node: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    id: int | None = None


@dataclass
class NodeRecord:
    """A node as registered with the service (a row of the store)."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpus: int = 0
    gpu_model: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    cordoned: bool = False
    #: device indices marked unhealthy
    unhealthy: tuple[int, ...] = ()
