"""The one rule for "can this pod run on this node now".

Every consumer goes through :func:`fit_checks`: the Filter step
(:func:`fit_mask`), the pending queue's fit classes (:class:`Demand` rows ×
nodes), :meth:`Cluster.place <quasched.model.cluster.Cluster.place>`
(:func:`placement_problem`) and the reasons a pod is pending
(:func:`fit_reasons`). The checks, in order:

1. the node is present and not cordoned (and, for a pod bound to one node, is that node);
2. every scalar resource of the registry: ``free >= request``;
3. app density: fewer than ``max_per_node`` instances of the pod's app;
4. GPU model: the node has GPUs of a model the pod accepts;
5. GPU devices: ``k`` distinct healthy devices with ``m`` free milli each.
"""

from __future__ import annotations

from typing import Iterator, Protocol, Sequence

import numpy as np

from quasched.model.resources import ResourceRegistry
from quasched.model.workload import NO_LIMIT, Pod


class ClusterView(Protocol):
    """What the fit rule reads of a cluster: :class:`quasched.model.cluster.Cluster` provides it."""

    n_nodes: int
    names: np.ndarray
    resources: ResourceRegistry
    resource_names: tuple[str, ...]
    free: np.ndarray
    gpu_free: np.ndarray
    gpu_free_max: np.ndarray
    num_gpus: np.ndarray
    present: np.ndarray
    schedulable: np.ndarray
    app_count: np.ndarray

    def spec_mask(self, spec: str) -> np.ndarray: ...

    def app_column(self, app: str) -> int: ...

UNSCHEDULABLE = "node unschedulable"
NODE_NAME = "node name"
RESOURCES_CHECK = "resources"
APP_DENSITY = "app density limit"
GPU_MODEL = "GPU model"
GPU_DEVICES = "GPU devices"


class Demand:
    """What ``C`` pods (or pod classes) ask for, as arrays with one row each.

    ``columns``: the resource columns some row requests (a zero request always fits); ``node``: the only node
    each row may run on ("" = any).
    """

    __slots__ = ("request", "num_gpu", "milli", "spec", "app", "limit", "node", "columns", "needs", "limited",
                 "is_gpu", "any_gpu")

    def __init__(self, request: np.ndarray, num_gpu: np.ndarray, milli: np.ndarray, spec: tuple[str, ...],
                 app: tuple[str, ...], limit: np.ndarray, node: tuple[str, ...] = ()) -> None:
        self.request = request  # (C, R)
        self.num_gpu = num_gpu  # (C,)
        self.milli = milli  # (C,) per device
        self.spec = spec
        self.app = app  # "" = no density limit applies
        self.limit = limit  # (C,)
        self.node = node if any(node) else ()  # () = no row is bound to a node
        if len(num_gpu) == 1:  # one pod: plain Python, this runs once per arriving pod
            self.needs = [(c, v) for c, v in enumerate(request[0].tolist()) if v]
            self.columns: list[int] = [c for c, _ in self.needs]
            self.any_gpu = int(milli[0]) > 0
        else:
            self.needs = []
            self.columns = np.flatnonzero(request.any(axis=0)).tolist()
            self.any_gpu = bool((milli > 0).any())
        self.limited = [i for i, a in enumerate(app) if a]
        self.is_gpu = milli > 0

    @classmethod
    def of(cls, pods: Sequence[Pod]) -> Demand:
        """The demand of ``pods``; a single pod's is built once and kept on the pod."""
        if len(pods) == 1:
            pod = pods[0]
            demand = pod.demand_cache
            if not isinstance(demand, Demand):
                limited = pod.limited
                demand = cls(pod.request.reshape(1, -1), np.array([pod.num_gpu]), np.array([pod.gpu_milli]),
                             (pod.gpu_model,), (pod.app if limited else "",),
                             np.array([pod.max_per_node if limited else NO_LIMIT]), (pod.node,))
                object.__setattr__(pod, "demand_cache", demand)
            return demand
        return cls(
            request=np.array([p.request for p in pods], dtype=np.int64).reshape(len(pods), -1),
            num_gpu=np.array([p.num_gpu for p in pods], dtype=np.int64),
            milli=np.array([p.gpu_milli for p in pods], dtype=np.int64),
            spec=tuple(p.gpu_model for p in pods),
            app=tuple(p.app if p.limited else "" for p in pods),
            limit=np.array([p.max_per_node if p.limited else NO_LIMIT for p in pods], dtype=np.int64),
            node=tuple(p.node for p in pods),
        )

    def __len__(self) -> int:
        return len(self.num_gpu)

    def rows(self, rows: np.ndarray) -> Demand:
        picked = rows.tolist()
        spec, app, node = self.spec, self.app, self.node
        return Demand(self.request[rows], self.num_gpu[rows], self.milli[rows],
                      tuple([spec[i] for i in picked]), tuple([app[i] for i in picked]), self.limit[rows],
                      tuple([node[i] for i in picked]) if node else ())


def fit_checks(cluster: ClusterView, demand: Demand, nodes: np.ndarray | slice | None = None,
               detail: bool = False) -> Iterator[tuple[str, np.ndarray]]:
    """``(name, ok)`` per check, ``ok`` of shape ``(C, M)`` (or ``(1, M)``) over ``nodes`` (all slots if None).

    The scalar resources are one check (``"resources"``) unless ``detail``: then one per resource.
    """
    pick = (lambda a: a) if nodes is None else (lambda a: a[nodes])  # noqa: E731
    yield UNSCHEDULABLE, pick(cluster.schedulable)[None, :]
    if demand.node:
        wanted = np.array(demand.node, dtype=object)[:, None]
        yield NODE_NAME, (pick(cluster.names)[None, :] == wanted) | (wanted == "")
    free = pick(cluster.free)
    cols = demand.columns
    if detail:
        for col in cols:
            yield cluster.resource_names[col], free[None, :, col] >= demand.request[:, col, None]
    elif demand.needs:  # one pod: columns of the (F-ordered) free matrix are contiguous
        (col, need), *rest = demand.needs
        ok = free[:, col] >= need
        for col, need in rest:
            np.logical_and(ok, free[:, col] >= need, out=ok)
        yield RESOURCES_CHECK, ok[None, :]
    elif cols:
        yield RESOURCES_CHECK, (free[None, :, cols] >= demand.request[:, None, cols]).all(axis=2)
    limited = demand.limited
    if len(demand) == 1 and limited:
        col = cluster.app_column(demand.app[0])  # may grow app_count
        yield APP_DENSITY, (pick(cluster.app_count[:, col]) < demand.limit[0])[None, :]
    elif limited:
        app_cols = [cluster.app_column(demand.app[i]) for i in limited]  # may grow app_count
        ok = np.ones((len(demand), len(free)), dtype=bool)
        ok[limited] = pick(cluster.app_count)[:, app_cols].T < demand.limit[limited][:, None]
        yield APP_DENSITY, ok
    is_gpu = demand.is_gpu
    if demand.any_gpu:
        if len(demand) == 1:
            yield GPU_MODEL, pick(cluster.spec_mask(demand.spec[0]))[None, :]
            if demand.num_gpu[0] == 1:  # one device: the node's largest free milli decides
                yield GPU_DEVICES, pick(cluster.gpu_free_max)[None, :] >= demand.milli[0]
                return
        else:
            masks = {s: pick(cluster.spec_mask(s)) for s in set(demand.spec)}
            model_ok = np.array([masks[s] for s in demand.spec]).reshape(len(demand), len(free))
            yield GPU_MODEL, model_ok | ~is_gpu[:, None]
        n_fit = (pick(cluster.gpu_free)[None, :, :] >= demand.milli[:, None, None]).sum(axis=2)
        yield GPU_DEVICES, (n_fit >= demand.num_gpu[:, None]) | ~is_gpu[:, None]


def fit_matrix(cluster: ClusterView, demand: Demand, nodes: np.ndarray | slice | None = None) -> np.ndarray:
    """``(C, M)``: can each demand row run on each node now."""
    checks = fit_checks(cluster, demand, nodes)
    ok = next(checks)[1]
    owned = False
    for _, check in checks:
        if owned and check.shape == ok.shape:
            np.logical_and(ok, check, out=ok)
        else:
            ok, owned = ok & check, True
    return ok if len(ok) == len(demand) else np.repeat(ok, len(demand), axis=0)


def fit_mask(cluster: ClusterView, pod: Pod) -> np.ndarray:
    """Mask over all node slots that can host ``pod`` now (the Filter step)."""
    return fit_matrix(cluster, Demand.of([pod]))[0]


def fit_reasons(cluster: ClusterView, pod: Pod, nodes: np.ndarray | None = None) -> dict[str, int]:
    """How many of ``nodes`` (present nodes if None) fail each check first; ``{}`` if one fits."""
    nodes = np.flatnonzero(cluster.present) if nodes is None else nodes
    pending = np.ones(len(nodes), dtype=bool)
    counts: dict[str, int] = {}
    for name, check in fit_checks(cluster, Demand.of([pod]), nodes, detail=True):
        failing = pending & ~check[0]
        if failing.any():
            counts[name] = int(failing.sum())
            pending &= ~failing
    return counts if not pending.any() else {}


def placement_problem(cluster: ClusterView, pod: Pod, node: int, devices: tuple[int, ...],
                      node_checked: bool = False) -> str | None:
    """Why ``pod`` cannot be bound to ``node`` with GPU ``devices`` now (None = it can).

    ``node_checked``: the fit rule already passed this pod on this node state; check the devices only.
    """
    if not 0 <= node < cluster.n_nodes:
        return "no such node"
    if len(pod.request) != len(cluster.resources):
        return f"request has {len(pod.request)} resources, the cluster registers {len(cluster.resources)}"
    if not node_checked:
        demand = Demand.of([pod])
        for name, check in fit_checks(cluster, demand, slice(node, node + 1)):
            if not check[0, 0]:
                if name == RESOURCES_CHECK:  # which resource: the first short column
                    short = [c for c in demand.columns if cluster.free[node, c] < demand.request[0, c]]
                    return cluster.resource_names[short[0]]
                return name
    if not pod.is_gpu:
        return "CPU-only pod given GPU devices" if devices else None
    if len(devices) != pod.num_gpu or len(set(devices)) != len(devices):
        return f"needs {pod.num_gpu} distinct devices, got {devices}"
    for d in devices:
        if not 0 <= d < cluster.num_gpus[node] or cluster.gpu_free[node, d] < pod.gpu_milli:
            return f"device {d} lacks {pod.gpu_milli} healthy free milli"
    return None
