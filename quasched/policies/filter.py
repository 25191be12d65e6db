"""The Filter step: which nodes can host a pod right now.

kube's ``NodeResourcesFit`` and ``NodeUnschedulable``, the Open-GPU-Share
filter (GPU model and device fit) and the v2025 limits (RDMA, disk, instances
of one app per node), all from the one fit rule of :mod:`quasched.model.fit`.
:class:`Feasibility` remembers the answer per pod demand and re-checks only the
nodes changed since (:meth:`Cluster.changes_since <quasched.model.cluster.Cluster.changes_since>`).
"""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.fit import Demand, fit_mask, fit_matrix
from quasched.model.workload import Pod
from quasched.policies.demand_cache import DemandCache


def feasible_nodes(cluster: Cluster, pod: Pod) -> np.ndarray:
    """Indices of the nodes that can host ``pod``, ascending."""
    return np.flatnonzero(fit_mask(cluster, pod))


def demand_key(pod: Pod) -> tuple:
    """What the fit rule reads of ``pod``: pods with equal keys fit the same nodes and have the same shape."""
    return (pod.request.tobytes(), pod.num_gpu, pod.gpu_milli, pod.gpu_model,
            pod.app if pod.limited else "", pod.max_per_node if pod.limited else 0, pod.node)


class Feasibility(DemandCache[tuple[Demand, np.ndarray]]):
    """:func:`feasible_nodes` with a fit mask per pod demand, refreshed incrementally
    (:class:`~quasched.policies.demand_cache.DemandCache`)."""

    def __init__(self, cluster: Cluster, max_keys: int = 1024) -> None:
        super().__init__(cluster, max_keys)

    def nodes(self, pod: Pod) -> np.ndarray:
        """Indices of the nodes that can host ``pod``, ascending."""
        return np.flatnonzero(self.mask(pod, demand_key(pod)))

    def mask(self, pod: Pod, key: tuple) -> np.ndarray:
        """Fit mask ``(N,)`` of ``pod`` (whose :func:`demand_key` is ``key``); read-only, valid until the cluster changes."""
        entry, changed = self._lookup(key)
        demand = entry[0] if entry else Demand.of([pod])
        if entry is None or changed is None:
            mask = fit_matrix(self.cluster, demand)[0].copy()  # may be a view of a cluster array
        else:
            mask = entry[1]
            if len(changed):
                mask[changed] = fit_matrix(self.cluster, demand, changed)[0]
        self._store(key, (demand, mask))
        return mask
