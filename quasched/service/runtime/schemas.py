"""Request and response bodies of the HTTP API (pydantic v2).

Requests are validated here, field by field, before anything reaches the
controller or the store: a bad value is a 422 naming the field
(``{"detail": [{"loc": ["body", "gpus"], "msg": ...}]}``). Units at the API
are the ones people write (CPU cores, memory with binary units, GPUs as a
share of one device or a whole number, durations like ``2h``); the domain's
integer units (milli-cores, MiB, milli-GPU, seconds) appear in responses
where they are named so (``memory_mib``, ``duration_s``).
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from quasched.model.nodes import MAX_NODE_GPUS, MODEL_NAME, MODEL_NAME_HINT
from quasched.service.domain import (ANY_MODEL, MAX_GANG, Event, Job, JobSpec, JobState, NodeRecord, PendingReason,
                                     QueueSpec, Reason)
from quasched.service.rules.reasons import public_reason, without_run_details
from quasched.traces.units import parse_gpu, parse_memory

#: limits of one request (far beyond any node, below anything that overflows a database integer)
MAX_CPU_CORES = 1024.0
MAX_MEMORY_MIB = 64 * 1024 * 1024  # 64 TiB
MAX_GPUS = 128
MAX_DURATION_S = 366 * 24 * 3600.0
MAX_ID = 2**53
NAME_MAX = 200
#: team, GPU model and node names: letters, digits, '_', '.', '-' (and '|' between GPU models)
TEAM_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
#: a command's arguments and environment: at most this many, each at most MAX_ARG characters
MAX_ARGS = 4096
MAX_ARG = 131072
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
#: variables the executor sets for a job (docs/service.md, "Running jobs")
RESERVED_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                          "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"})
#: character categories a name must not hold: controls, and format characters (bidirectional controls such as
#: U+202E, zero-width ones such as U+200B, U+FEFF) that make a name read as another; surrogates; line separators
HIDDEN = {"Cc": "a control character", "Cf": "an invisible formatting character (bidirectional control or "
          "zero width)", "Cs": "a lone surrogate", "Zl": "a line separator", "Zp": "a paragraph separator"}
#: environment variables whose values the API shows as :data:`MASK` (the job still gets them)
SECRET_ENV = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
MASK = "***"
_DURATION = re.compile(r"\s*(?:(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*)")
DURATION_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
DURATION_HINT = "write seconds (3600) or a duration such as 30s, 90m, 2h, 1h30m, 1d"


class Strict(BaseModel):
    """Unknown keys, NaN and infinities are errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def _printable(value: str) -> str:
    """``value`` if it holds no character of the :data:`HIDDEN` categories (a 422 naming the first)."""
    for char in value:
        kind = HIDDEN.get(unicodedata.category(char))
        if kind is not None:
            raise ValueError(f"must not contain U+{ord(char):04X}, {kind}")
    return value


def _printable_map(value: dict[str, str]) -> dict[str, str]:
    for key, text in value.items():
        _printable(key)
        _printable(text)
    return value


def masked_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the values of secret-looking names (:data:`SECRET_ENV`) replaced by :data:`MASK`."""
    return {k: MASK if SECRET_ENV.search(k) else v for k, v in env.items()}


def _models(value: str, *, single: bool) -> str:
    """``value`` if it is "" or GPU model names separated by ``|`` (one name if ``single``)."""
    if single and "|" in value:
        raise ValueError("a node has one GPU model")
    bad = [token for token in value.split("|") if not MODEL_NAME.fullmatch(token)] if value else []
    if bad:
        raise ValueError(f"{bad[0]!r} is not a GPU model name: {MODEL_NAME_HINT}"
                         + ("" if single else ", models separated by '|' (A100|H100)"))
    return value


def _strip(value: Any) -> Any:
    return value.strip() if isinstance(value, str) else value


Name = Annotated[str, BeforeValidator(_strip), Field(min_length=1, max_length=NAME_MAX)]
TeamName = Annotated[str, Field(min_length=1, max_length=63, pattern=TEAM_PATTERN,
                                 examples=["vision"])]
OptionalText = Annotated[str, Field(max_length=NAME_MAX)]


def parse_duration(value: Any) -> float:
    """Seconds of ``3600``, ``"90m"``, ``"2h"``, ``"1h30m"``, ``"1.5h"``, ``"30s"``, ``"1d"``."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; {DURATION_HINT}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text, seconds, end = value.strip().lower(), 0.0, 0
        for match in _DURATION.finditer(text):
            if match.start() != end or match.end() == match.start():
                break
            number, unit = match.groups()
            if unit not in DURATION_UNITS:
                raise ValueError(f"{value!r} has unknown unit {unit!r}; {DURATION_HINT}")
            seconds += float(number) * DURATION_UNITS[unit]
            end = match.end()
        if end != len(text):
            raise ValueError(f"{value!r} is not a duration; {DURATION_HINT}")
    else:
        raise ValueError(f"{value!r} is not a duration; {DURATION_HINT}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{value!r} must be a positive, finite duration; {DURATION_HINT}")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"{value!r} is longer than a year")
    return seconds


def split_gpus(gpus: float) -> tuple[int, int]:
    """``(num_gpu, gpu_milli)`` of a GPU request: 0 → (0, 0); a share 0.5 → (1, 500); whole 2 → (2, 1000)."""
    if gpus == 0:
        return 0, 0
    if gpus < 1:
        return 1, round(gpus * 1000)
    return int(gpus), 1000


def gpus_of(num_gpu: int, gpu_milli: int) -> float:
    """The API's GPU number of a domain request (inverse of :func:`split_gpus`)."""
    if num_gpu == 0 or gpu_milli == 0:
        return 0.0
    return float(num_gpu) if gpu_milli >= 1000 else gpu_milli / 1000


# ---------------------------------------------------------------- requests
class JobSubmit(Strict):
    """A job: ``pods`` identical pods (a gang placed all-or-nothing), each asking for the resources below."""

    name: Name = Field(examples=["resnet-ft"])
    team: TeamName = Field(description="The team's queue (must exist: `PUT /queues/{name}`).")
    user: OptionalText = ""
    app: OptionalText = Field("", description="Application name (pods of one app may be limited per node).")
    cpu: float = Field(gt=0, le=MAX_CPU_CORES, description="CPU cores per pod (0.5 = half a core).",
                       examples=[4])
    memory: str | float = Field(
        description="Memory per pod: MiB as a number, or text with a binary unit (16GiB, 512MiB, 1.5Gi).",
        examples=["16GiB"])
    gpus: float = Field(0.0, ge=0, le=MAX_GPUS, description=(
        "GPUs per pod: 0 = CPU only; a share of one device 0 < gpus < 1 (rounded to 1/1000); "
        "or a whole number of GPUs."), examples=[0.5, 2])
    gpu_model: OptionalText = Field("", description="GPU model (e.g. A100, or 'V100M16|V100M32'); empty = any.")
    pods: int = Field(1, ge=1, le=MAX_GANG, description="Gang size.")
    priority_class: str = Field("normal", max_length=63, description="low, normal or high.")
    duration: str | float | None = Field(None, description=(
        "Run time after which the service finishes the job (simulated run): seconds or 30s, 90m, 2h; "
        "omit when the job's runtime reports completion."), examples=["2h"])
    client_token: str | None = Field(None, min_length=1, max_length=128, description=(
        "Idempotency key: resubmitting with the same key returns the first job."))
    command: list[Annotated[str, Field(max_length=MAX_ARG)]] = Field(
        default_factory=list, max_length=MAX_ARGS, examples=[["python", "train.py", "--lr", "3e-4"]], description=(
            "What runs when the job is placed on this machine's node: argv (no shell). Empty: no command; the "
            "job ends after `duration` or when its runtime calls complete."))
    env: dict[Annotated[str, Field(pattern=ENV_NAME, max_length=256)], Annotated[str, Field(max_length=MAX_ARG)]] = \
        Field(default_factory=dict, max_length=MAX_ARGS, description="Environment variables for the command.")
    workdir: str = Field("", max_length=4096, description=(
        "Absolute working directory of the command, which its team's user must be able to enter (default: the "
        "job's own directory, outside the service's state)."))
    time_limit: str | float | None = Field(None, description=(
        "Longest run: past it the job is stopped (SIGTERM, SIGKILL after the grace period) and fails."),
        examples=["12h"])

    @field_validator("name", "user", "app", "client_token")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return None if value is None else _printable(value)

    @field_validator("gpu_model")
    @classmethod
    def _model(cls, value: str) -> str:
        return _models(value, single=False)

    @field_validator("command")
    @classmethod
    def _argv(cls, value: list[str]) -> list[str]:
        if not value:  # given as [] (an omitted command is not validated)
            raise ValueError("give the program and its arguments, or leave command out")
        if not value[0]:
            raise ValueError("the program (first word) is empty")
        if any("\x00" in arg for arg in value):
            raise ValueError("arguments must not contain NUL characters")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        taken = sorted(k for k in value if k in RESERVED_ENV or k.startswith("QUASCHED_"))
        if taken:
            raise ValueError(f"{taken[0]} is set by the service (the devices it chose)")
        if any("\x00" in v for v in value.values()):
            raise ValueError("values must not contain NUL characters")
        return value

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, value: str) -> str:
        if value and not value.startswith("/"):
            raise ValueError("give an absolute path")
        return _printable(value)

    @model_validator(mode="after")
    def _command_fits(self) -> JobSubmit:
        if self.command and self.duration is not None:
            raise ValueError("command: a job with a command ends when it exits; give time_limit, not duration")
        if self.command and self.pods > 1:
            raise ValueError("command: a command runs as one process; a gang of pods runs in Kubernetes mode")
        if (self.env or self.workdir) and not self.command:
            raise ValueError("command: env and workdir need a command")
        return self

    @field_validator("cpu", "memory", "gpus", "pods", "duration", "time_limit", mode="before")
    @classmethod
    def _no_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"{value} is not a number")
        return value

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str | float) -> str | float:
        mib = parse_memory(value)
        if mib > MAX_MEMORY_MIB:
            raise ValueError(f"{value!r} is more than 64Ti")
        return value

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: float) -> float:
        parse_gpu(value)  # a share of one device or whole GPUs, not 1.5
        return value

    @field_validator("duration", "time_limit")
    @classmethod
    def _duration(cls, value: str | float | None) -> str | float | None:
        if value is not None:
            parse_duration(value)
        return value

    def to_spec(self) -> JobSpec:
        num_gpu, gpu_milli = split_gpus(self.gpus)
        return JobSpec(
            name=self.name, team=self.team, cpu_milli=max(1, round(self.cpu * 1000)),
            memory_mib=parse_memory(self.memory), num_gpu=num_gpu, gpu_milli=gpu_milli,
            gpu_model=self.gpu_model, pods=self.pods, user=self.user, app=self.app,
            priority_class=self.priority_class,
            duration_s=None if self.duration is None else parse_duration(self.duration),
            client_token=self.client_token, command=tuple(self.command), env=tuple(sorted(self.env.items())),
            workdir=self.workdir, time_limit_s=None if self.time_limit is None else parse_duration(self.time_limit))


class JobComplete(Strict):
    """The job's runtime reports that it ended: succeeded, or failed."""
    failed: bool = Field(False, description="The job's runtime failed (else it succeeded).")


class QueuePut(Strict):
    """A team's queue: nominal GPUs per GPU model ('*' = every model not named), cohort, borrowing, weight."""

    quota: dict[Annotated[str, Field(min_length=1, max_length=63)],
                Annotated[float, Field(ge=0, le=1_000_000)]] = Field(
        default_factory=dict, examples=[{"A100": 8, ANY_MODEL: 2}])
    cohort: Annotated[str, Field(max_length=63)] = ""
    borrowing_limit: float | None = Field(None, ge=0, le=1_000_000)
    weight: float = Field(1.0, gt=0, le=1000)

    @field_validator("cohort")
    @classmethod
    def _cohort(cls, value: str) -> str:
        return _printable(value)

    def to_spec(self, name: str) -> QueueSpec:
        return QueueSpec(name, dict(self.quota), self.cohort, self.borrowing_limit, self.weight)


class NodeIn(Strict):
    """A node to register."""

    name: Annotated[str, Field(min_length=1, max_length=253, pattern=TEAM_PATTERN)]
    cpu: float = Field(gt=0, le=100_000, description="CPU cores.")
    memory: str | float = Field(description="MiB, or text with a binary unit (768Gi).")
    gpus: int = Field(0, ge=0, le=MAX_NODE_GPUS)
    gpu_model: Annotated[str, Field(max_length=63)] = ""
    labels: dict[Annotated[str, Field(max_length=253)], Annotated[str, Field(max_length=253)]] = Field(
        default_factory=dict)

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str | float) -> str | float:
        if parse_memory(value) > 1024 * MAX_MEMORY_MIB:
            raise ValueError(f"{value!r} is too large")
        return value

    @field_validator("gpu_model")
    @classmethod
    def _model(cls, value: str) -> str:
        return _models(value, single=True)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        return _printable_map(value)

    def to_record(self) -> NodeRecord:
        if self.gpus and not self.gpu_model:
            raise ValueError("gpu_model: a node with GPUs names their model")
        return NodeRecord(self.name, round(self.cpu * 1000), parse_memory(self.memory), self.gpus,
                          self.gpu_model if self.gpus else "", dict(self.labels))


class ClusterYaml(Strict):
    """Nodes to add, as a cluster file."""
    cluster_yaml: str = Field(min_length=1, max_length=1_000_000,
                              description="A cluster file (docs/file-formats.md) whose nodes are added.")


class NodePatch(Strict):
    """Cordon or uncordon a node, optionally draining it."""
    cordoned: bool | None = Field(None, description="Cordon (true) or uncordon (false).")
    drain: bool = Field(False, description="With cordoned=true: requeue the jobs running on the node.")


class DeviceHealth(Strict):
    """Mark one GPU of a node healthy or failed."""
    healthy: bool


class TokenCreate(Strict):
    """A new API token: a team token, or an admin token."""
    name: Annotated[str, Field(min_length=1, max_length=63, pattern=TEAM_PATTERN)]
    team: TeamName | None = Field(None, description="The team this token acts for (none: an admin token).")
    admin: bool = False
    expires_in: str | float | None = Field(None, description=(
        "The token stops working after this long: seconds or 30s, 90m, 2h, 30d (omitted: it does not expire)."),
        examples=["30d"])

    @field_validator("expires_in")
    @classmethod
    def _expires(cls, value: str | float | None) -> str | float | None:
        if value is not None:
            parse_duration(value)
        return value


# ---------------------------------------------------------------- responses
class PlacementOut(BaseModel):
    """One pod's node and GPU devices."""
    node: str
    devices: list[int]


class ReasonOut(BaseModel):
    """Why a job is pending: a code, a sentence and the figures behind it."""
    code: Reason
    message: str
    evidence: dict[str, Any] = {}

    @classmethod
    def of(cls, reason: PendingReason, *, private: bool) -> ReasonOut:
        """The view of ``reason``; without what the run left (exit, output) unless ``private``."""
        shown = reason if private else public_reason(reason)
        return cls(code=shown.code, message=shown.message, evidence=_jsonable(shown.evidence))


#: what a job's :class:`JobOut` says of it only to its readers (its team's tokens, admins)
PRIVATE = "Shown to the job's team and admins; null for other tokens."


class JobOut(BaseModel):
    """A job: its request, state, placement, queue position and pending reason. Its command, env, workdir,
    client_token and exit are shown to its team and admins only (null for other tokens), the evidence taken from
    its run too; env values of secret-looking names (``*TOKEN*``, ``*KEY*``, ``*SECRET*``, ``*PASSWORD*``,
    ``*PASSWD*``, ``*CREDENTIAL*``) read ``***``."""
    id: int
    name: str
    team: str
    user: str
    app: str
    state: JobState
    priority_class: str
    priority: int
    cpu: float = Field(description="CPU cores per pod.")
    memory_mib: int
    gpus: float = Field(description="GPUs per pod: a share of one device (< 1) or whole GPUs.")
    gpu_model: str
    pods: int
    duration_s: float | None
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    placement: list[PlacementOut]
    reason: ReasonOut | None
    position: int | None = Field(None, description="Place in the queue order of the last cycle, 1 first, no gaps (pending jobs).")
    solver: str
    gap: float | None
    restarts: int = 0
    client_token: str | None = Field(None, description=PRIVATE)
    command: list[str] | None = Field(None, description="The argv ([]: no command). " + PRIVATE)
    env: dict[str, str] | None = Field(None, description=(
        f"The command's environment, secret-looking values as {MASK!r}. " + PRIVATE))
    workdir: str | None = Field(None, description=PRIVATE)
    time_limit_s: float | None = None
    exit_code: int | None = Field(None, description="The command's exit status (-N: killed by signal N). " + PRIVATE)
    wall_s: float = Field(0.0, description="Seconds run, over all its runs until now.")
    gpu_hours: float = Field(0.0, description="GPU-hours booked (GPUs held x hours), over all its runs until now.")

    @classmethod
    def of(cls, job: Job, position: int | None = None, now: float | None = None, *, private: bool) -> JobOut:
        """The view of ``job``; its private fields (command, env, workdir, client_token, exit) only if
        ``private`` (the caller may read them: :meth:`~quasched.service.runtime.auth.Principal.may_read`)."""
        s = job.spec
        wall_s, gpu_hours = job.usage(now) if now is not None else (job.wall_s, job.gpu_hours)
        mine: dict[str, Any] = {}  # the private fields: null unless ``private``
        if private:
            mine = dict(client_token=s.client_token, command=list(s.command), env=masked_env(dict(s.env)),
                        workdir=s.workdir, exit_code=job.exit_code)
        return cls(
            id=job.id, name=s.name, team=s.team, user=s.user, app=s.app, state=job.state,
            priority_class=s.priority_class, priority=job.priority, cpu=s.cpu_milli / 1000, memory_mib=s.memory_mib,
            gpus=gpus_of(s.num_gpu, s.gpu_milli), gpu_model=s.gpu_model, pods=s.pods, duration_s=s.duration_s,
            submitted_at=job.submitted_at, started_at=job.started_at, finished_at=job.finished_at,
            placement=[PlacementOut(node=n, devices=list(d)) for n, d in job.placement],
            reason=None if job.reason is None else ReasonOut.of(job.reason, private=private),
            position=position if job.state == JobState.PENDING else None, solver=job.solver,
            gap=job.gap, restarts=job.restarts, time_limit_s=s.time_limit_s, wall_s=wall_s, gpu_hours=gpu_hours,
            **mine)


class EventOut(BaseModel):
    """One event of the log and the live stream (submitted, started, preempted, ...)."""
    id: int | None
    time: float
    kind: str
    job_id: int | None
    node: str
    data: dict[str, Any]

    @classmethod
    def of(cls, event: Event, *, private: bool) -> EventOut:
        """The view of ``event``; without what its job's run left (exit, output) unless ``private``."""
        return cls(id=event.id, time=event.time, kind=event.kind, job_id=event.job_id, node=event.node,
                   data=_jsonable(event.data if private else without_run_details(event.data)))


class JobDetail(JobOut):
    """A job with its events."""
    events: list[EventOut] = []


class QueueOut(BaseModel):
    """A team's queue: quota, cohort, usage, borrowing, fair share and job counts."""
    name: str
    cohort: str
    weight: float
    quota: dict[str, float]
    borrowing_limit: float | None
    used_gpus: float
    used_gpus_by_model: dict[str, float] = Field(default_factory=dict, description=(
        "GPUs used per quota key: a GPU model, or '*' for the models the quota does not name."))
    borrowed_gpus: float
    fair_share_gpus: float
    share: float
    pending: int
    running: int


class UsageOut(BaseModel):
    """A team's use: jobs submitted, running now, wall seconds run and GPU-hours booked (runs so far)."""
    team: str
    jobs: int
    running: int
    wall_s: float
    gpu_hours: float


class GpuLiveOut(BaseModel):
    """A GPU's last reading (NVML, on its node): heat, power, use, throttling; whether new pods avoid it, and why."""
    device: int
    at: float = Field(description="wall time of the reading (s since the epoch)")
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    utilization_pct: float | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    throttle: list[str] = []
    ecc_uncorrected: int | None = None
    lost: bool = False
    avoided: str | None = Field(None, description="why new pods avoid the device now (None: they may use it)")
    stale: bool = Field(False, description="older than the staleness limit: not trusted, changes nothing")

    @classmethod
    def of(cls, reading: Any, avoided: str | None, stale: bool) -> GpuLiveOut:
        return cls(**{**reading.to_json(), "avoided": avoided, "stale": stale})


class NodeOut(BaseModel):
    """A node: GPU model, per-device use and health, CPU and memory in use, cordon, jobs."""
    name: str
    gpu_model: str
    num_gpus: int
    cordoned: bool
    gpu_used_milli: list[int]
    gpu_healthy: list[bool]
    cpu_milli: int
    cpu_used_milli: int
    memory_mib: int
    memory_used_mib: int
    jobs: list[int]
    frag_milli: float = Field(0.0, description="Fragmented milli-GPU of the node (FGD's measure, current typical pods)")
    labels: dict[str, str] = {}
    gpus_live: list[GpuLiveOut] = Field([], description="each GPU's last reading, when its node reports them")


class SnapshotOut(BaseModel):
    """The cluster at one moment: nodes, GPU allocation, fragmentation and job counts."""
    nodes: list[NodeOut]
    gpus: int
    gpu_allocation_pct: float
    free_gpus: float = Field(description="Free GPU capacity in GPUs (shares of partly used GPUs included; "
                             "unhealthy GPUs count as not free)")
    free_whole_gpus: int = Field(description="GPUs with nothing allocated (healthy)")
    fragmentation_pct: float = Field(description="Share of the free GPU capacity the typical jobs could not use, "
                                     "% (FGD's fragmentation measure; 0 before any job is known)")
    fragmented_gpus: float | None = Field(description="That capacity in GPUs (null before any job is known)")
    pending: int
    running: int


class SampleOut(BaseModel):
    """One point of the allocation, fragmentation and queue time series."""
    time: float
    gpu_allocation_pct: float
    fragmentation_pct: float
    pending: int


class TokenInfoOut(BaseModel):
    """A token as admins list it (never its secret)."""
    name: str
    team: str | None
    admin: bool
    expires_at: float | None = Field(None, description="When it stops working (epoch seconds; null: never).")
    revoked_at: float | None = Field(None, description="When it was revoked (null: it was not).")


class TokenOut(TokenInfoOut):
    """A created token; ``token`` is the secret, shown only here."""
    token: str


class WhoAmI(BaseModel):
    """The principal of the calling token."""
    name: str
    team: str | None
    admin: bool


def _jsonable(value: Any) -> Any:
    """Evidence and event data with NumPy scalars, tuples and non-finite floats made JSON-safe."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # NumPy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
