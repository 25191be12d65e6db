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


def feasible_nodes(cluster: Cluster, pod: Pod) -> np.ndarray:
    """Indices of the nodes that can host ``pod``, ascending."""
    return np.flatnonzero(fit_mask(cluster, pod))


def demand_key(pod: Pod) -> tuple:
    """What the fit rule reads of ``pod``: pods with equal keys fit the same nodes and have the same shape."""
    return (pod.request.tobytes(), pod.num_gpu, pod.gpu_milli, pod.gpu_spec,
            pod.app if pod.limited else "", pod.max_per_node if pod.limited else 0)


class Feasibility:
    """:func:`feasible_nodes` with a fit mask per pod demand, refreshed incrementally.

    A demand whose mask is more than ``max(64, n_nodes / 8)`` node changes old is filtered from
    scratch; past ``max_keys`` demands (or when the cluster's layout changes) all masks go.
    """

    def __init__(self, cluster: Cluster, max_keys: int = 1024) -> None:
        self.cluster = cluster
        self.max_keys = max_keys
        self._layout = cluster.layout
        self._masks: dict[tuple, tuple[Demand, np.ndarray, int]] = {}

    def nodes(self, pod: Pod) -> np.ndarray:
        """Indices of the nodes that can host ``pod``, ascending."""
        return np.flatnonzero(self.mask(pod, demand_key(pod)))

    def mask(self, pod: Pod, key: tuple) -> np.ndarray:
        """Fit mask ``(N,)`` of ``pod`` (whose :func:`demand_key` is ``key``); read-only, valid until the cluster changes."""
        c = self.cluster
        if c.layout != self._layout or len(self._masks) > self.max_keys:
            self._masks.clear()
            self._layout = c.layout
        entry = self._masks.get(key)
        changed = None if entry is None else c.changes_since(entry[2], limit=max(64, c.n_nodes // 8))
        if entry is None or changed is None:
            demand = entry[0] if entry else Demand.of([pod])
            mask = fit_matrix(c, demand)[0].copy()  # may be a view of a cluster array
        else:
            demand, mask, _ = entry
            if changed:
                rows = np.array(changed)
                mask[rows] = fit_matrix(c, demand, rows)[0]
        self._masks[key] = (demand, mask, c.change_mark)
        return mask
