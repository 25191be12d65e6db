"""Workloads: pods/jobs as a columnar table of NumPy arrays.

Units are normalised at load time so every engine, policy and solver sees the
same numbers: CPU in milli-cores, memory and disk in MiB, GPUs as a device
count ``num_gpu`` plus the share of *each* device ``gpu_milli`` (1000 = a whole
GPU), RDMA as a percentage of one NIC. Times are seconds; ``nan`` = unknown.
``qos`` is the v2023 QoS class, ``role`` the v2025 instance role (CN/HN).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Mapping, Sequence

import numpy as np

from quasched.model.resources import RESOURCES, ResourceRegistry


FULL_GPU_MILLI = 1000
NO_LIMIT = -1

QOS_CLASSES = ("LS", "Burstable", "BE", "Guaranteed", "")


@dataclass(frozen=True, slots=True)
class Pod:
    """One pod (job, instance) as the scheduler sees it.

    ``uid`` is the key the cluster remembers the pod by; whoever creates pods
    chooses it (an engine's event index, a service's job id), independent of
    any trace row. ``app`` names the pod's app ("" = none); ``max_per_node``
    limits the app's instances on one node. ``node`` names the only node the pod
    may run on ("" = any). ``request`` is the scalar request
    vector in registry order (:mod:`quasched.model.resources`); by default it
    is built from the named fields with the default registry.
    """

    uid: int
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_model: str = ""
    app: str = ""
    max_per_node: int = NO_LIMIT
    rdma: int = 0
    disk_mib: int = 0
    team: str = ""
    user: str = ""
    priority: int = 0
    node: str = ""
    request: np.ndarray = field(default=None, compare=False, repr=False)  # type: ignore[arg-type]
    #: a slot the fit rule keeps the pod's :class:`~quasched.model.fit.Demand` in, built on first use (opaque here)
    demand_cache: object = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.request is None:
            request = [r.per_pod if r.per_pod is not None else getattr(self, r.column, 0) if r.column else 0
                       for r in RESOURCES]
            object.__setattr__(self, "request", np.asarray(request, dtype=np.int64))

    @property
    def gpu_request(self) -> int:
        """Total GPU request in milli-GPU (``num_gpu * gpu_milli``)."""
        return self.num_gpu * self.gpu_milli

    @property
    def is_gpu(self) -> bool:
        return self.gpu_milli > 0

    @property
    def is_sharing(self) -> bool:
        """A GPU-sharing pod: one device, part of it."""
        return self.num_gpu == 1 and 0 < self.gpu_milli < FULL_GPU_MILLI

    @property
    def limited(self) -> bool:
        """Whether an app density limit applies."""
        return self.app != "" and self.max_per_node != NO_LIMIT

    @property
    def shape(self) -> tuple[int, int, int, str]:
        """The scheduling shape ``(cpu, gpu_milli, num_gpu, gpu_model)``; memory excluded."""
        return (self.cpu_milli, self.gpu_milli, self.num_gpu, self.gpu_model)

    @property
    def fit_key(self) -> tuple:
        """Everything the fit test reads: pods with equal keys fit exactly the same nodes."""
        app = (self.app, self.max_per_node) if self.limited else ("", NO_LIMIT)
        return (*self.request.tolist(), self.num_gpu, self.gpu_milli, self.gpu_model, *app, self.node)


@dataclass(frozen=True)
class Workload:
    """A list of pods held column-wise.

    All arrays have the same length. ``app`` indexes ``app_names`` (``-1`` =
    the pod belongs to no app and has no density limit). ``team``/``user``
    are owner names ("" = none), ``priority`` an integer (higher = sooner).
    ``extra`` holds request columns of resources registered beyond the
    built-in ones (:mod:`quasched.model.resources`), keyed by resource name.
    """

    name: np.ndarray
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray
    gpu_model: np.ndarray
    # None (the default) is replaced by the default column in __post_init__: always an array after it
    qos: np.ndarray = field(default=None)  # type: ignore[arg-type]
    role: np.ndarray = field(default=None)  # type: ignore[arg-type]
    app: np.ndarray = field(default=None)  # type: ignore[arg-type]
    max_per_node: np.ndarray = field(default=None)  # type: ignore[arg-type]
    rdma: np.ndarray = field(default=None)  # type: ignore[arg-type]
    disk_mib: np.ndarray = field(default=None)  # type: ignore[arg-type]
    creation_time: np.ndarray = field(default=None)  # type: ignore[arg-type]
    deletion_time: np.ndarray = field(default=None)  # type: ignore[arg-type]
    team: np.ndarray = field(default=None)  # type: ignore[arg-type]
    user: np.ndarray = field(default=None)  # type: ignore[arg-type]
    priority: np.ndarray = field(default=None)  # type: ignore[arg-type]
    app_names: tuple[str, ...] = ()
    extra: Mapping[str, np.ndarray] = field(default_factory=dict)
    source: str = ""
    _requests: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.name)
        if self.app is not None and int(np.max(self.app, initial=-1)) >= len(self.app_names):
            raise ValueError(f"app ids go up to {int(np.max(self.app))} but there are {len(self.app_names)} app names")
        defaults = {
            "qos": lambda: np.full(n, "", dtype=object),
            "role": lambda: np.full(n, "", dtype=object),
            "app": lambda: np.full(n, NO_LIMIT, dtype=np.int64),
            "max_per_node": lambda: np.full(n, NO_LIMIT, dtype=np.int64),
            "rdma": lambda: np.zeros(n, dtype=np.int64),
            "disk_mib": lambda: np.zeros(n, dtype=np.int64),
            "creation_time": lambda: np.full(n, np.nan),
            "deletion_time": lambda: np.full(n, np.nan),
            "team": lambda: np.full(n, "", dtype=object),
            "user": lambda: np.full(n, "", dtype=object),
            "priority": lambda: np.zeros(n, dtype=np.int64),
        }
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in defaults and value is None:
                object.__setattr__(self, f.name, defaults[f.name]())
            elif isinstance(value, np.ndarray) and len(value) != n:
                raise ValueError(f"column {f.name!r} has {len(value)} rows, expected {n}")
        for name, column in self.extra.items():
            if len(column) != n:
                raise ValueError(f"extra column {name!r} has {len(column)} rows, expected {n}")

    def __len__(self) -> int:
        return len(self.name)

    def pod(self, i: int, uid: int | None = None, resources: ResourceRegistry | None = None) -> Pod:
        """Row ``i`` as a :class:`Pod` with key ``uid`` (default ``i``) and the request
        vector of ``resources`` (default registry)."""
        app = int(self.app[i])
        return Pod(
            uid=i if uid is None else uid,
            name=str(self.name[i]),
            cpu_milli=int(self.cpu_milli[i]),
            memory_mib=int(self.memory_mib[i]),
            num_gpu=int(self.num_gpu[i]),
            gpu_milli=int(self.gpu_milli[i]),
            gpu_model=str(self.gpu_model[i]),
            app=self.app_names[app] if app >= 0 else "",
            max_per_node=int(self.max_per_node[i]),
            rdma=int(self.rdma[i]),
            disk_mib=int(self.disk_mib[i]),
            team=str(self.team[i]),
            user=str(self.user[i]),
            priority=int(self.priority[i]),
            request=self.requests(resources)[i],
        )

    def requests(self, resources: ResourceRegistry | None = None) -> np.ndarray:
        """``(P, R)`` request matrix for ``resources`` (default registry), computed once per registry."""
        resources = resources or RESOURCES
        cache = self._requests
        key = (id(resources), resources.names)
        if key not in cache:
            cache[key] = resources.request_matrix(self)
        return cache[key]

    def pods(self) -> list[Pod]:
        return [self.pod(i) for i in range(len(self))]

    @property
    def gpu_request(self) -> np.ndarray:
        """Total GPU request per pod in milli-GPU."""
        return self.num_gpu * self.gpu_milli

    def take(self, rows: Sequence[int] | np.ndarray, names: Sequence[str] | None = None) -> "Workload":
        """A new workload made of ``rows`` (repeats allowed), optionally renamed."""
        rows = np.asarray(rows, dtype=np.int64)
        columns = {
            f.name: getattr(self, f.name)[rows]
            for f in fields(self)
            if isinstance(getattr(self, f.name), np.ndarray)
        }
        if names is not None:
            columns["name"] = np.asarray(names, dtype=object)
        extra = {name: column[rows] for name, column in self.extra.items()}
        return replace(self, extra=extra, **columns)


def shape_keys(workload: Workload) -> list[tuple[int, int, int, str]]:
    """Per-pod scheduling shape ``(cpu, gpu_milli, num_gpu, gpu_model)``."""
    return list(
        zip(
            workload.cpu_milli.tolist(),
            workload.gpu_milli.tolist(),
            workload.num_gpu.tolist(),
            workload.gpu_model.tolist(),
        )
    )
