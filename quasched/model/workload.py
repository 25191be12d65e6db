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

FULL_GPU_MILLI = 1000
NO_LIMIT = -1

QOS_CLASSES = ("LS", "Burstable", "BE", "Guaranteed", "")


@dataclass(frozen=True, slots=True)
class Pod:
    """One pod (job, instance): a row of a :class:`Workload`.

    ``uid`` is the row index in the workload it came from and is the key the
    cluster uses to remember where the pod runs.
    """

    uid: int
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_spec: str = ""
    app: int = NO_LIMIT
    max_per_node: int = NO_LIMIT
    rdma: int = 0
    disk_mib: int = 0

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
    def shape(self) -> tuple[int, int, int, str]:
        """The scheduling shape ``(cpu, gpu_milli, num_gpu, gpu_spec)``; memory excluded."""
        return (self.cpu_milli, self.gpu_milli, self.num_gpu, self.gpu_spec)


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
    gpu_spec: np.ndarray
    qos: np.ndarray = field(default=None)  # type: ignore[assignment]
    role: np.ndarray = field(default=None)  # type: ignore[assignment]
    app: np.ndarray = field(default=None)  # type: ignore[assignment]
    max_per_node: np.ndarray = field(default=None)  # type: ignore[assignment]
    rdma: np.ndarray = field(default=None)  # type: ignore[assignment]
    disk_mib: np.ndarray = field(default=None)  # type: ignore[assignment]
    creation_time: np.ndarray = field(default=None)  # type: ignore[assignment]
    deletion_time: np.ndarray = field(default=None)  # type: ignore[assignment]
    team: np.ndarray = field(default=None)  # type: ignore[assignment]
    user: np.ndarray = field(default=None)  # type: ignore[assignment]
    priority: np.ndarray = field(default=None)  # type: ignore[assignment]
    app_names: tuple[str, ...] = ()
    extra: Mapping[str, np.ndarray] = field(default_factory=dict)
    source: str = ""

    def __post_init__(self) -> None:
        n = len(self.name)
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

    def pod(self, i: int) -> Pod:
        """Row ``i`` as a :class:`Pod` (``uid = i``)."""
        return Pod(
            uid=i,
            name=str(self.name[i]),
            cpu_milli=int(self.cpu_milli[i]),
            memory_mib=int(self.memory_mib[i]),
            num_gpu=int(self.num_gpu[i]),
            gpu_milli=int(self.gpu_milli[i]),
            gpu_spec=str(self.gpu_spec[i]),
            app=int(self.app[i]),
            max_per_node=int(self.max_per_node[i]),
            rdma=int(self.rdma[i]),
            disk_mib=int(self.disk_mib[i]),
        )

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
    """Per-pod scheduling shape ``(cpu, gpu_milli, num_gpu, gpu_spec)``."""
    return list(
        zip(
            workload.cpu_milli.tolist(),
            workload.gpu_milli.tolist(),
            workload.num_gpu.tolist(),
            workload.gpu_spec.tolist(),
        )
    )
