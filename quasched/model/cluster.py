"""Cluster state held in NumPy arrays.

A :class:`Cluster` is a fixed list of nodes (capacities, GPU model, device
count) plus the mutable allocation state: free CPU, memory, RDMA and disk per
node, free milli-GPU per device, instances per app and node, and which pods
run where. :meth:`Cluster.place` and :meth:`Cluster.remove` are the only
mutators; ``remove`` restores the exact state before the matching ``place``.

Devices beyond a node's GPU count are padding with 0 free milli, so they never
fit a GPU request and never count as idle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np

from quasched.model.workload import FULL_GPU_MILLI, NO_LIMIT, Pod

MAX_PODS_PER_NODE = 1001
RDMA_CAPACITY = 100
#: disk of a node that sets none: more than any request, with room to add requests without overflow
UNLIMITED_DISK_MIB = np.iinfo(np.int64).max // 4

#: GPU-affinity classes of bound GPU pods (``share-gpu``, ``1-gpu`` .. ``8-gpu``).
N_GPU_CLASSES = 9


class PlacementError(ValueError):
    """A placement that violates capacity or bookkeeping rules."""


def gpu_class(pod: Pod) -> int:
    """Affinity class of a GPU pod: 0 = sharing, k = k whole GPUs; -1 = CPU-only."""
    if pod.gpu_milli <= 0:
        return -1
    return 0 if pod.gpu_milli < FULL_GPU_MILLI else min(pod.num_gpu, N_GPU_CLASSES - 1)


@lru_cache(maxsize=4096)
def spec_models(spec: str) -> tuple[str, ...]:
    """Allowed GPU models of a ``|``-separated constraint (empty tuple = any)."""
    return tuple(token for token in spec.split("|") if token)


def accessible(node_model: str, spec: str) -> bool:
    """Whether a node of GPU model ``node_model`` satisfies constraint ``spec``."""
    allowed = spec_models(spec)
    if not allowed:
        return True
    return node_model != "" and node_model in allowed


@dataclass(frozen=True)
class NodeSpec:
    """Static node capacities, one array entry per node.

    ``labels`` holds one ``dict[str, str]`` per node (None = no labels);
    ``extra`` the capacities of resources registered beyond the built-in ones,
    keyed by resource name.
    """

    name: np.ndarray
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    num_gpus: np.ndarray
    gpu_model: np.ndarray
    rdma: np.ndarray | None = None
    disk_mib: np.ndarray | None = None
    labels: np.ndarray | None = None
    extra: Mapping[str, np.ndarray] = field(default_factory=dict)
    source: str = ""

    def __len__(self) -> int:
        return len(self.name)

    @property
    def total_gpus(self) -> int:
        return int(self.num_gpus.sum())


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod runs and what it took."""

    pod: Pod
    node: int
    devices: tuple[int, ...]


class Cluster:
    """Mutable allocation state of a set of nodes.

    Arrays (``N`` nodes, ``D`` = most GPUs on any node):

    - ``cpu_free``, ``mem_free``, ``rdma_free``, ``disk_free``, ``pod_count``: ``(N,)``
    - ``gpu_free``: ``(N, D)`` free milli per device (padding devices hold 0)
    - ``gpu_class_count``: ``(N, 9)`` bound GPU pods per affinity class
    - ``version``: ``(N,)`` bumped on every change of a node, so caches keyed
      by node state know what to refresh.
    """

    def __init__(self, nodes: NodeSpec, n_apps: int = 0) -> None:
        self.nodes = nodes
        n = len(nodes)
        self.n_nodes = n
        self.max_devices = max(1, int(nodes.num_gpus.max(initial=0)))
        self.models: tuple[str, ...] = tuple(sorted(set(nodes.gpu_model.tolist())))
        self.model_id = np.array([self.models.index(m) for m in nodes.gpu_model], dtype=np.int64)
        self.device_exists = np.arange(self.max_devices)[None, :] < nodes.num_gpus[:, None]
        self.n_apps = n_apps
        self._spec_masks: dict[str, np.ndarray] = {}
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """Empty every node."""
        nodes, n = self.nodes, self.n_nodes
        self.cpu_free = nodes.cpu_milli.astype(np.int64).copy()
        self.mem_free = nodes.memory_mib.astype(np.int64).copy()
        self.rdma_free = (
            nodes.rdma.astype(np.int64).copy()
            if nodes.rdma is not None
            else np.full(n, RDMA_CAPACITY, dtype=np.int64)
        )
        self.disk_free = (
            nodes.disk_mib.astype(np.int64).copy()
            if nodes.disk_mib is not None
            else np.full(n, UNLIMITED_DISK_MIB, dtype=np.int64)
        )
        self.gpu_free = np.where(self.device_exists, FULL_GPU_MILLI, 0).astype(np.int64)
        self.pod_count = np.zeros(n, dtype=np.int64)
        self.gpu_class_count = np.zeros((n, N_GPU_CLASSES), dtype=np.int64)
        self.app_count = np.zeros((n, max(self.n_apps, 1)), dtype=np.int64)
        self.version = np.zeros(n, dtype=np.int64)
        self.placements: dict[int, Placement] = {}

    def snapshot(self) -> tuple[np.ndarray, ...]:
        """Copies of every state array (for tests and rollbacks)."""
        return tuple(
            a.copy()
            for a in (
                self.cpu_free, self.mem_free, self.rdma_free, self.disk_free, self.gpu_free,
                self.pod_count, self.gpu_class_count, self.app_count,
            )
        )

    # -------------------------------------------------------------- queries
    def spec_mask(self, spec: str) -> np.ndarray:
        """Boolean mask of nodes whose GPU model satisfies ``spec`` (cached)."""
        mask = self._spec_masks.get(spec)
        if mask is None:
            allowed = [accessible(m, spec) for m in self.models]
            mask = np.asarray(allowed, dtype=bool)[self.model_id] & (self.nodes.num_gpus > 0)
            self._spec_masks[spec] = mask
        return mask

    @property
    def used_gpu_milli(self) -> int:
        return int(FULL_GPU_MILLI * self.nodes.total_gpus - self.gpu_free.sum())

    # ------------------------------------------------------------ mutators
    def place(self, pod: Pod, node: int, devices: Sequence[int] = ()) -> Placement:
        """Bind ``pod`` to ``node`` using GPU ``devices``; raise on any violation."""
        if pod.uid in self.placements:
            raise PlacementError(f"pod {pod.name} (uid {pod.uid}) is already placed")
        devices = tuple(int(d) for d in devices)
        self._check_fits(pod, node, devices)
        self._apply(pod, node, devices, sign=-1)
        placement = Placement(pod, node, devices)
        self.placements[pod.uid] = placement
        return placement

    def remove(self, pod: Pod | int) -> Placement:
        """Unbind a pod (by :class:`Pod` or uid) and free what it held."""
        uid = pod if isinstance(pod, int) else pod.uid
        placement = self.placements.pop(uid, None)
        if placement is None:
            raise PlacementError(f"pod uid {uid} is not placed")
        self._apply(placement.pod, placement.node, placement.devices, sign=+1)
        return placement

    def _check_fits(self, pod: Pod, node: int, devices: tuple[int, ...]) -> None:
        def fail(why: str) -> None:
            raise PlacementError(f"pod {pod.name} does not fit node {self.nodes.name[node]}: {why}")

        if not 0 <= node < self.n_nodes:
            fail("no such node")
        if pod.cpu_milli > self.cpu_free[node]:
            fail("cpu")
        if pod.memory_mib > self.mem_free[node]:
            fail("memory")
        if pod.rdma > self.rdma_free[node]:
            fail("rdma")
        if pod.disk_mib > self.disk_free[node]:
            fail("disk")
        if self.pod_count[node] + 1 > MAX_PODS_PER_NODE:
            fail("pod count")
        if pod.app >= 0 and pod.max_per_node != NO_LIMIT:
            if self.app_count[node, pod.app] + 1 > pod.max_per_node:
                fail("max instances of the app per node")
        if pod.is_gpu:
            if len(devices) != pod.num_gpu or len(set(devices)) != len(devices):
                fail(f"needs {pod.num_gpu} distinct devices, got {devices}")
            if not self.spec_mask(pod.gpu_spec)[node]:
                fail(f"GPU model {self.nodes.gpu_model[node]!r} not in {pod.gpu_spec!r}")
            for d in devices:
                if not (0 <= d < self.nodes.num_gpus[node]) or self.gpu_free[node, d] < pod.gpu_milli:
                    fail(f"device {d} lacks {pod.gpu_milli} milli")
        elif devices:
            fail("CPU-only pod given GPU devices")

    def _apply(self, pod: Pod, node: int, devices: tuple[int, ...], sign: int) -> None:
        self.cpu_free[node] += sign * pod.cpu_milli
        self.mem_free[node] += sign * pod.memory_mib
        self.rdma_free[node] += sign * pod.rdma
        self.disk_free[node] += sign * pod.disk_mib
        self.pod_count[node] -= sign
        for d in devices:
            self.gpu_free[node, d] += sign * pod.gpu_milli
        cls = gpu_class(pod)
        if cls >= 0:
            self.gpu_class_count[node, cls] -= sign
        if pod.app >= 0:
            self.app_count[node, pod.app] -= sign
        self.version[node] += 1
