"""Cluster state held in NumPy arrays.

A :class:`Cluster` holds node slots (static capacities: :class:`~quasched.model.nodes.NodeSpec`,
also importable from here, its documented path) and their allocation state:

- ``free`` / ``capacity``: ``(N, R)`` scalar resources in registry order
  (:mod:`quasched.model.resources`: CPU, memory, pod slots, RDMA, disk, ...);
- ``gpu_alloc``: ``(N, D)`` milli-GPU allocated per device, ``gpu_healthy``
  per device, and the derived ``gpu_free``: milli a new pod may use (0 on
  unhealthy devices and on padding beyond a node's GPU count) with its
  per-node maximum ``gpu_free_max``;
- ``measured_swing_w``: ``(N, D)`` idle→full power swing per device, W, as the service measures it from
  the GPUs' live state (:meth:`measure_swing`; NaN: unknown, its GPU model's counts), with
  ``measured_devices`` the number known; only PWR's power terms read it (:mod:`quasched.policies.pwr`),
  and in the simulators it stays all NaN;
- ``schedulable``: present and not cordoned; ``gpu_class_count`` and
  ``app_count`` for affinity and density rules; ``in_use``: the node holds
  GPU or CPU allocation;
- running totals ``allocated`` / ``capacity_total`` (``(R,)``),
  ``gpu_allocated`` (milli), ``devices_in_use``, ``nodes_in_use`` and
  ``gpus_on_used_nodes`` and ``total_gpus``, kept by every change;
- ``errors``: the GPU errors so far (:class:`~quasched.model.health.ErrorLog`);
- ``version``: bumped on every change of a node, so caches keyed by node
  state know what to refresh; :meth:`changes_since` lists the nodes changed
  since a mark without scanning all of them; ``layout`` bumped when ``N``, ``D``
  or the GPU model list change, so caches know when to resize; ``inventory``
  bumped when what the nodes could ever host changes (a node added or removed, a
  device's health), not by pods or cordons.

:meth:`place` and :meth:`remove` bind and unbind pods (``remove`` restores the
exact state before the matching ``place``); :meth:`add_node`,
:meth:`remove_node`, :meth:`cordon`, :meth:`uncordon` and
:meth:`set_device_health` change the cluster itself. Nodes keep their slot
index for life; a removed node's slot is reused by the next node added, so
arrays and caches stay as large as the most nodes present at once. Every
change that can let a waiting pod fit (a removal, a node added or uncordoned,
a device recovered) is remembered in :meth:`take_grown`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from quasched.model.fit import placement_problem
from quasched.model.health import ErrorLog
from quasched.model.nodes import NodeSpec, accessible
from quasched.model.resources import CPU, RESOURCES, ResourceRegistry
from quasched.model.workload import FULL_GPU_MILLI, Pod

#: GPU-affinity classes of bound GPU pods (``share-gpu``, ``1-gpu`` .. ``8-gpu``).
N_GPU_CLASSES = 9


class PlacementError(ValueError):
    """A placement or cluster change that violates capacity or bookkeeping rules."""


def gpu_class(pod: Pod) -> int:
    """Affinity class of a GPU pod: 0 = sharing, k = k whole GPUs; -1 = CPU-only."""
    if pod.gpu_milli <= 0:
        return -1
    return 0 if pod.gpu_milli < FULL_GPU_MILLI else min(pod.num_gpu, N_GPU_CLASSES - 1)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod runs and what it took."""

    pod: Pod
    node: int
    devices: tuple[int, ...]


class Cluster:
    """Mutable allocation state of a changing set of nodes (see the module docstring)."""

    def __init__(self, nodes: NodeSpec, resources: ResourceRegistry = RESOURCES) -> None:
        self.resources = resources.copy()
        self.resource_names = self.resources.names
        self.models: list[str] = sorted(set(nodes.gpu_model.tolist()))
        self.layout = 0
        self.inventory = 0
        self._spec_masks: dict[str, np.ndarray] = {}
        self._apps: dict[str, int] = {}
        self._node_index: dict[str, int] = {}
        self.placements: dict[int, Placement] = {}
        self._grown: set[int] = set()
        #: per-cluster caches of other layers (e.g. fragmentation state tables), dropped with the cluster
        self.caches: dict[str, dict] = {}
        #: GPU errors so far (:mod:`quasched.model.health`), kept by engines that model failures
        self.errors = ErrorLog()
        self._log: list[int] = []  # nodes in the order they changed; entry i has mark _log_start + i
        self._log_start = 0
        self._allocate(len(nodes), max(1, int(nodes.num_gpus.max(initial=0))))
        self._fill(np.arange(len(nodes)), nodes)
        self._grown.clear()

    # ------------------------------------------------------------ storage
    def _allocate(self, n: int, d: int) -> None:
        """Empty arrays for ``n`` absent node slots of ``d`` devices."""
        r = len(self.resources)
        self.n_nodes = n
        self.max_devices = d
        self.names = np.full(n, "", dtype=object)
        self.model_id = np.zeros(n, dtype=np.int64)
        self.num_gpus = np.zeros(n, dtype=np.int64)
        self.capacity = np.zeros((n, r), dtype=np.int64, order="F")
        self.free = np.zeros((n, r), dtype=np.int64, order="F")  # contiguous columns for the fit rule
        self.gpu_alloc = np.zeros((n, d), dtype=np.int64)
        self.gpu_healthy = np.zeros((n, d), dtype=bool)
        self.gpu_cordoned = np.zeros((n, d), dtype=bool)
        self.gpu_free = np.zeros((n, d), dtype=np.int64)
        self.gpu_free_max = np.zeros(n, dtype=np.int64)
        self.measured_swing_w = np.full((n, d), np.nan)
        self.measured_devices = 0
        self.present = np.zeros(n, dtype=bool)
        self.cordoned = np.zeros(n, dtype=bool)
        self.schedulable = np.zeros(n, dtype=bool)
        self.gpu_class_count = np.zeros((n, N_GPU_CLASSES), dtype=np.int64)
        self.app_count = np.zeros((n, max(len(self._apps), 1)), dtype=np.int64)
        self.version = np.zeros(n, dtype=np.int64)
        self.labels = np.empty(n, dtype=object)
        self.in_use = np.zeros(n, dtype=bool)
        self.allocated = np.zeros(r, dtype=np.int64)
        self.capacity_total = np.zeros(r, dtype=np.int64)
        self.gpu_allocated = 0
        self.devices_in_use = 0
        self.nodes_in_use = 0
        self.gpus_on_used_nodes = 0
        self._total_gpus = 0

    _NODE_ARRAYS = ("names", "model_id", "num_gpus", "capacity", "free", "gpu_alloc", "gpu_healthy", "gpu_cordoned",
                    "gpu_free", "gpu_free_max", "measured_swing_w", "present", "cordoned", "schedulable",
                    "gpu_class_count", "app_count", "version", "labels", "in_use")
    _DEVICE_ARRAYS = ("gpu_alloc", "gpu_healthy", "gpu_cordoned", "gpu_free", "measured_swing_w")
    #: what new slots and devices of an array hold when it is not zero
    _PADDING = {"measured_swing_w": np.nan}

    def _grow(self, n: int, d: int) -> None:
        """Resize node and device axes to at least ``n`` slots and ``d`` devices (padding is absent)."""
        n, d = max(n, self.n_nodes), max(d, self.max_devices)
        if (n, d) == (self.n_nodes, self.max_devices):
            return
        for name in self._NODE_ARRAYS:
            old = getattr(self, name)
            shape = (n, d) if name in self._DEVICE_ARRAYS else (n, *old.shape[1:])
            new = np.full(shape, self._PADDING.get(name, 0), dtype=old.dtype,
                          order="F" if old.flags.f_contiguous and old.ndim == 2 else "C")
            new[tuple(slice(0, s) for s in old.shape)] = old
            setattr(self, name, new)
        self.max_devices = d
        self.n_nodes = n
        self.layout += 1

    # -------------------------------------------------------------- nodes
    def add_nodes(self, nodes: NodeSpec) -> np.ndarray:
        """Add every node of ``nodes`` (empty, schedulable); returns their slot indices."""
        clash = [str(n) for n in nodes.name if str(n) in self._node_index]
        if clash or len(set(nodes.name.tolist())) != len(nodes):
            raise PlacementError(f"node names must be unique; {clash[:3] or 'duplicates'} already exist")
        absent = np.flatnonzero(~self.present)[: len(nodes)]
        slots = np.concatenate([absent, self.n_nodes + np.arange(len(nodes) - len(absent))]).astype(np.int64)
        self._grow(int(slots.max(initial=-1)) + 1, int(nodes.num_gpus.max(initial=0)))
        self._fill(slots, nodes)
        return slots

    def add_node(self, name: str, capacity: Mapping[str, int], num_gpus: int = 0, gpu_model: str = "",
                 labels: Mapping[str, str] | None = None) -> int:
        """Add one empty node; ``capacity`` maps resource names to amounts (registry defaults otherwise)."""
        unknown = set(capacity) - set(self.resources.names)
        if unknown:
            raise PlacementError(f"node {name!r}: unknown resources {sorted(unknown)}")
        given = [r for r in self.resources if r.name in capacity]
        columns = {r.column: np.array([capacity[r.name]]) for r in given if r.column}
        spec = NodeSpec(
            name=np.array([name], dtype=object), cpu_milli=columns.pop("cpu_milli", np.array([0])),
            memory_mib=columns.pop("memory_mib", np.array([0])), num_gpus=np.array([num_gpus]),
            gpu_model=np.array([gpu_model], dtype=object), labels=np.array([labels], dtype=object),
            rdma=columns.get("rdma"), disk_mib=columns.get("disk_mib"),
            extra={r.name: np.array([capacity[r.name]]) for r in given if not r.column},
        )
        return int(self.add_nodes(spec)[0])

    def _fill(self, slots: np.ndarray, nodes: NodeSpec) -> None:
        """Write new empty nodes into ``slots``."""
        capacity = self.resources.capacity_matrix(nodes)
        if (capacity < 0).any() or (nodes.num_gpus < 0).any():
            raise PlacementError(f"{nodes.source or 'nodes'}: negative capacity")
        for model in nodes.gpu_model.tolist():
            if model not in self.models:
                self.models.append(model)
                self.layout += 1
        self._node_index.update(zip(nodes.name.tolist(), slots.tolist()))
        self.names[slots] = nodes.name
        self.model_id[slots] = [self.models.index(m) for m in nodes.gpu_model.tolist()]
        self.num_gpus[slots] = nodes.num_gpus
        self._total_gpus += int(nodes.num_gpus.sum())
        self.capacity[slots] = capacity
        self.free[slots] = capacity
        self.capacity_total += capacity.sum(axis=0)
        self.gpu_alloc[slots] = 0
        self.gpu_healthy[slots] = np.arange(self.max_devices)[None, :] < nodes.num_gpus[:, None]
        self.gpu_cordoned[slots] = False
        self.labels[slots] = [dict(x or {}) for x in (nodes.labels if nodes.labels is not None else [None] * len(nodes))]
        self.present[slots] = True
        self.cordoned[slots] = False
        self._spec_masks.clear()
        self.inventory += 1
        for slot in slots.tolist():
            self._refresh(slot)
        self._grown.update(slots.tolist())

    def remove_node(self, node: int | str) -> None:
        """Remove an empty node (evict its pods first); its slot becomes free."""
        node = self.node(node)
        running = [p for p in self.placements.values() if p.node == node]
        if running:
            raise PlacementError(f"node {self.names[node]!r} still runs {len(running)} pods, e.g. {running[0].pod.name}")
        del self._node_index[self.names[node]]
        self.present[node] = False
        self.capacity_total -= self.capacity[node]
        self.capacity[node] = 0
        self.free[node] = 0
        self._total_gpus -= int(self.num_gpus[node])
        self.num_gpus[node] = 0
        self.gpu_healthy[node] = self.gpu_cordoned[node] = False
        self.measured_devices -= int(np.count_nonzero(~np.isnan(self.measured_swing_w[node])))
        self.measured_swing_w[node] = np.nan
        self.names[node] = ""
        self._spec_masks.clear()
        self.inventory += 1
        self._refresh(node)

    def cordon(self, node: int | str) -> None:
        """Stop placing pods on ``node``; running pods stay."""
        node = self.node(node)
        self.cordoned[node] = True
        self._refresh(node)

    def uncordon(self, node: int | str) -> None:
        """Let ``node`` take pods again."""
        node = self.node(node)
        self.cordoned[node] = False
        self._refresh(node)
        self._grown.add(node)

    def set_device_health(self, node: int | str, device: int, healthy: bool) -> None:
        """Mark a GPU device (un)healthy; pods on it stay bound (the caller decides to evict)."""
        node = self.node(node)
        if not 0 <= device < self.num_gpus[node]:
            raise PlacementError(f"node {self.names[node]!r} has no GPU device {device}")
        self.gpu_healthy[node, device] = healthy
        self.inventory += 1
        self._refresh(node)
        if healthy:
            self._grown.add(node)

    def node(self, node: int | str) -> int:
        """Slot index of a present node given by index or name."""
        if isinstance(node, str):
            if node not in self._node_index:
                raise PlacementError(f"no node named {node!r}")
            return self._node_index[node]
        if not (0 <= node < self.n_nodes and self.present[node]):
            raise PlacementError(f"no node at index {node}")
        return int(node)

    def slots_of(self, names: Sequence[str]) -> list[int | None]:
        """The slot of each present node named in ``names`` (None for a name that is not one)."""
        index = self._node_index
        return [index.get(name) for name in names]

    def cordon_device(self, node: int | str, device: int, cordoned: bool = True) -> None:
        """Stop (or resume) placing pods on one GPU device, e.g. while it runs hot; pods on it stay, and it still
        counts for what the node could host when empty (a cordon is temporary, a failure is not)."""
        node = self.node(node)
        if not 0 <= device < self.num_gpus[node]:
            raise PlacementError(f"node {self.names[node]!r} has no GPU device {device}")
        self.gpu_cordoned[node, device] = cordoned
        self._refresh(node)
        if not cordoned:
            self._grown.add(node)

    def measure_swing(self, node: int | str, device: int, watts: float | None) -> None:
        """Set one GPU device's measured idle→full power swing, W (None: unknown again, its model's counts); what may
        be placed where is unchanged, so no node's version moves."""
        node = self.node(node)
        if not 0 <= device < self.num_gpus[node]:
            raise PlacementError(f"node {self.names[node]!r} has no GPU device {device}")
        if watts is not None and not 0 <= watts < np.inf:
            raise PlacementError(f"a power swing is a finite number of watts >= 0, not {watts}")
        known = not np.isnan(self.measured_swing_w[node, device])
        self.measured_swing_w[node, device] = np.nan if watts is None else watts
        self.measured_devices += (watts is not None) - known

    def _refresh(self, node: int) -> None:
        """Recompute the derived per-node arrays after any change of ``node``."""
        self.schedulable[node] = self.present[node] and not self.cordoned[node]
        self._refresh_devices(node)
        self._refresh_use(node)

    def _refresh_devices(self, node: int) -> None:
        usable = self.gpu_healthy[node] & ~self.gpu_cordoned[node]
        self.gpu_free[node] = free = np.where(usable, FULL_GPU_MILLI - self.gpu_alloc[node], 0)
        self.gpu_free_max[node] = free.max()

    def _refresh_use(self, node: int) -> None:
        used = bool(self.gpu_alloc[node].any() or self.free[node, CPU] < self.capacity[node, CPU])
        if used != self.in_use[node]:
            self.in_use[node] = used
            step = 1 if used else -1
            self.nodes_in_use += step
            self.gpus_on_used_nodes += step * int(self.num_gpus[node])
        self.version[node] += 1
        self._log.append(node)
        if len(self._log) > 4 * self.n_nodes + 1024:  # keep the log short: forget its older half
            drop = len(self._log) // 2
            del self._log[:drop]
            self._log_start += drop

    # -------------------------------------------------------------- queries
    @property
    def change_mark(self) -> int:
        """Mark of the next node change (see :meth:`changes_since`)."""
        return self._log_start + len(self._log)

    def changes_since(self, mark: int, limit: int | None = None) -> list[int] | None:
        """Nodes changed since ``mark`` (ascending, once each), or None when the log no longer
        reaches back that far (or ``mark`` is negative, or more than ``limit`` changes happened
        since): then assume every node changed."""
        if mark < self._log_start or (limit is not None and self.change_mark - mark > limit):
            return None
        return sorted(set(self._log[mark - self._log_start:]))

    def spec_mask(self, spec: str) -> np.ndarray:
        """Boolean mask of nodes with GPUs whose model satisfies ``spec`` (cached until nodes change)."""
        mask = self._spec_masks.get(spec)
        if mask is None:
            allowed = np.asarray([accessible(m, spec) for m in self.models], dtype=bool)
            mask = allowed[self.model_id] & (self.num_gpus > 0)
            self._spec_masks[spec] = mask
        return mask

    def app_column(self, app: str) -> int:
        """Column of ``app`` in :attr:`app_count`, added on first sight."""
        col = self._apps.get(app)
        if col is None:
            col = self._apps[app] = len(self._apps)
            if col >= self.app_count.shape[1]:
                grown = np.zeros((self.n_nodes, 2 * self.app_count.shape[1]), dtype=np.int64)
                grown[:, : self.app_count.shape[1]] = self.app_count
                self.app_count = grown
        return col

    def take_grown(self) -> np.ndarray:
        """Sorted nodes whose free capacity may have grown since the last call (then forgotten)."""
        grown = np.array(sorted(n for n in self._grown if self.present[n]), dtype=np.int64)
        self._grown.clear()
        return grown

    @property
    def device_exists(self) -> np.ndarray:
        return np.arange(self.max_devices)[None, :] < self.num_gpus[:, None]

    @property
    def total_gpus(self) -> int:
        """GPU devices of the present nodes (a running total)."""
        return self._total_gpus

    @property
    def used_gpu_milli(self) -> int:
        return int(self.gpu_allocated)

    def column(self, resource: str) -> np.ndarray:
        """Free capacity of one scalar resource, a view ``(N,)``."""
        return self.free[:, self.resources.index(resource)]

    @property
    def cpu_free(self) -> np.ndarray:
        return self.free[:, 0]

    @property
    def mem_free(self) -> np.ndarray:
        return self.free[:, 1]

    def snapshot(self) -> tuple[np.ndarray, ...]:
        """Copies of every state array but the cache versions and the measured swings, which pods never change (for
        tests and rollbacks)."""
        skip = ("labels", "version", "measured_swing_w")
        return tuple(getattr(self, name).copy() for name in self._NODE_ARRAYS if name not in skip)

    # ------------------------------------------------------------ mutators
    def place(self, pod: Pod, node: int, devices: Sequence[int] = (), filtered_at: int | None = None) -> Placement:
        """Bind ``pod`` to ``node`` using GPU ``devices``; raise :class:`PlacementError` on any violation.

        ``filtered_at``: the node's :attr:`version` when the fit rule last passed this pod on
        it; if the node has not changed since, only the devices are checked again.
        """
        if pod.uid in self.placements:
            raise PlacementError(f"pod {pod.name} (uid {pod.uid}) is already placed")
        devices = tuple(int(d) for d in devices)
        unchanged = filtered_at is not None and 0 <= node < self.n_nodes and self.version[node] == filtered_at
        why = placement_problem(self, pod, node, devices, node_checked=unchanged)
        if why:
            where = self.names[node] if 0 <= node < self.n_nodes else node
            raise PlacementError(f"pod {pod.name} does not fit node {where}: {why}")
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
        self._grown.add(placement.node)
        return placement

    def _apply(self, pod: Pod, node: int, devices: tuple[int, ...], sign: int) -> None:
        delta = pod.request if sign > 0 else -pod.request
        self.free[node] += delta
        self.allocated -= delta
        if devices:
            alloc = self.gpu_alloc
            for d in devices:
                before = int(alloc[node, d])
                alloc[node, d] = after = before - sign * pod.gpu_milli
                self.devices_in_use += (after > 0) - (before > 0)
            self.gpu_allocated -= sign * pod.gpu_milli * len(devices)
            self._refresh_devices(node)
        cls = gpu_class(pod)
        if cls >= 0:
            self.gpu_class_count[node, cls] -= sign
        if pod.app:
            col = self.app_column(pod.app)  # may grow app_count
            self.app_count[node, col] -= sign
        self._refresh_use(node)
