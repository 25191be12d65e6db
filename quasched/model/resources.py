"""Scalar resources: the per-node quantities a pod requests, by registration.

A :class:`Resource` names a quantity (CPU, memory, pod slots, RDMA, disk, ...),
its unit, where node capacities and pod requests come from, and the capacity a
node has when its spec does not say. A :class:`ResourceRegistry` orders them:
the cluster holds free capacity as an ``(N, R)`` matrix in registry order and
every pod carries an ``(R,)`` request vector, so the one fit test
(:func:`quasched.model.fit.fit_matrix`) is ``free >= request`` over all columns.

GPUs are not scalar resources: they are devices with per-device milli and
health, held by :class:`~quasched.model.cluster.Cluster` beside the matrix.

Adding a resource needs no change outside the registry and the loaders::

    registry = RESOURCES.copy()
    registry.register(Resource("fpga", "devices", default_capacity=0))
    nodes = NodeSpec(..., extra={"fpga": capacities})
    workload = Workload(..., extra={"fpga": requests})
    cluster = Cluster(nodes, resources=registry)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, Protocol

import numpy as np


class Table(Protocol):
    """Rows with named columns: a :class:`~quasched.model.nodes.NodeSpec` (nodes) or a
    :class:`~quasched.model.workload.Workload` (pods); columns not known here live in ``extra``."""

    @property
    def extra(self) -> Mapping[str, np.ndarray]: ...

    def __len__(self) -> int: ...

#: Kubernetes' default pod limit per node, as in the FGD simulator.
MAX_PODS_PER_NODE = 1001
#: RDMA capacity of a node (percent of one NIC) when the node list does not say.
RDMA_CAPACITY = 100
#: "Unlimited" capacity that still leaves room for sums without overflow.
UNLIMITED = np.iinfo(np.int64).max // 4


@dataclass(frozen=True)
class Resource:
    """One scalar resource.

    ``column`` is the :class:`~quasched.model.nodes.NodeSpec` /
    :class:`~quasched.model.workload.Workload` attribute holding capacities and
    requests ("" = the entry ``name`` of their ``extra`` mapping).
    ``default_capacity`` is used for nodes whose spec lacks the column (``None``:
    the column is required). ``per_pod`` fixes every pod's request (the pod-slot
    resource requests 1); otherwise a missing request column means 0.
    """

    name: str
    unit: str
    column: str = ""
    default_capacity: int | None = None
    per_pod: int | None = None

    def capacity(self, nodes: Table) -> np.ndarray:
        """Capacity of every node of a ``NodeSpec`` (int64)."""
        values = self._values(nodes)
        if values is None:
            if self.default_capacity is None:
                raise ValueError(f"node spec {getattr(nodes, 'source', '')!r} lacks required resource {self.name!r}")
            return np.full(len(nodes), self.default_capacity, dtype=np.int64)
        return np.asarray(values, dtype=np.int64)

    def request(self, workload: Table) -> np.ndarray:
        """Request of every pod of a ``Workload`` (int64)."""
        if self.per_pod is not None:
            return np.full(len(workload), self.per_pod, dtype=np.int64)
        values = self._values(workload)
        return np.zeros(len(workload), dtype=np.int64) if values is None else np.asarray(values, dtype=np.int64)

    def _values(self, table: Table) -> np.ndarray | None:
        if self.column:
            return getattr(table, self.column, None)
        return table.extra.get(self.name)


class ResourceRegistry:
    """An ordered set of resources; the order is the column order of every matrix."""

    def __init__(self, resources: tuple[Resource, ...] = ()) -> None:
        self._resources: list[Resource] = []
        self.names: tuple[str, ...] = ()
        for resource in resources:
            self.register(resource)

    def register(self, resource: Resource) -> Resource:
        """Add ``resource`` as the last column; names are unique."""
        if resource.name in self.names:
            raise ValueError(f"resource {resource.name!r} is already registered")
        self._resources.append(resource)
        self.names = (*self.names, resource.name)
        return resource

    def copy(self) -> ResourceRegistry:
        return ResourceRegistry(tuple(self._resources))

    def index(self, name: str) -> int:
        """Column of resource ``name``."""
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"unknown resource {name!r}; registered: {', '.join(self.names)}") from None

    def __iter__(self) -> Iterator[Resource]:
        return iter(self._resources)

    def __len__(self) -> int:
        return len(self._resources)

    def capacity_matrix(self, nodes: Table) -> np.ndarray:
        """``(N, R)`` node capacities."""
        return np.stack([r.capacity(nodes) for r in self], axis=1).reshape(len(nodes), len(self))

    def request_matrix(self, workload: Table) -> np.ndarray:
        """``(P, R)`` pod requests."""
        return np.stack([r.request(workload) for r in self], axis=1).reshape(len(workload), len(self))


#: Built-in resources, in this column order.
CPU, MEMORY, PODS, RDMA, DISK = range(5)

#: The default registry every cluster and workload uses unless given another.
RESOURCES = ResourceRegistry((
    Resource("cpu", "milli-cores", "cpu_milli"),
    Resource("memory", "MiB", "memory_mib"),
    Resource("pods", "pods", "", default_capacity=MAX_PODS_PER_NODE, per_pod=1),
    Resource("rdma", "% of a NIC", "rdma", default_capacity=RDMA_CAPACITY),
    Resource("disk", "MiB", "disk_mib", default_capacity=UNLIMITED),
))
