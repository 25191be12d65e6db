"""Scarce headroom: Headroom's copies valued by how likely they are to be used (our policy ``ours``).

Headroom (:mod:`quasched.policies.headroom`) values each copy of shape ``t`` a
node can still take at ``count_t / N · m_t k_t``, its share of the next pod.
That undervalues shapes only a few nodes can take (an 8-GPU pod with 120 cores
fits only the 39 G3 nodes) and overvalues ones every node can take. Here a copy
is worth its GPU milli times the chance it is ever used: the expected remaining
demand ``D_t`` over the cluster's copies ``S_t = Σ_nodes n_t``::

    R   = free GPU milli of the cluster / mean GPU milli per pod seen   (pods still to fit)
    D_t = count_t / N · R
    w_t = m_t k_t · min(1, D_t / S_t)
    H   = Σ_t w_t · n_t(node)

so the term is unchanged where supply matches the next pods (``R ≈ S_t``) and a
shape whose demand exceeds its supply is protected at its full size. ``w`` is
recomputed every ``every`` scored pods (and when the shapes are re-learned).
"""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.workload import Pod
from quasched.policies.base import CycleState
from quasched.policies.headroom import HeadroomScore, Shape
from quasched.policies.state_memo import StateScoreMemo


class ScarceHeadroom(HeadroomScore):
    """Headroom with scarcity weights ``w_t`` (module docstring)."""

    name = "scarce_headroom"

    def __init__(self, *args, every: int = 128, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.every = every

    def _set_model(self, shapes: list[Shape], counts: list[int], total: int) -> None:
        super()._set_model(shapes, counts, total)
        self.n_pods = self.total  # N: the pods the counts come from
        self.base_w = self.model.w.astype(float)
        self._reweigh()

    def _reweigh(self) -> None:
        """``w_t`` from the cluster's current copies and free GPU milli; drops the cached scores."""
        st, model = self.states, self.model
        ids = st.ids()
        supply = model.copies(st.cpu[ids], st.mem[ids], st.gpu[ids], st.model_id[ids]).sum(axis=0)
        mean = (self._gpu_seen / self._pods_seen) if self._pods_seen else self.base_w.sum() / self.n_pods
        free = 1000 * self.cluster.total_gpus - self.cluster.used_gpu_milli
        demand = model.counts / self.n_pods * free / max(mean, 1.0)
        size = model.milli * model.k
        model.w = size * np.minimum(1.0, demand / np.maximum(supply, 1))
        self.total = 1
        self._h = np.zeros(0, dtype=np.int64)
        self._memo = StateScoreMemo(self.states)
        self._next_reweigh = self._pods_seen + self.every

    def attach(self, cluster: Cluster, rng) -> None:
        self._gpu_seen, self._pods_seen = 0, 0
        super().attach(cluster, rng)

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        self._gpu_seen += pod.gpu_request
        self._pods_seen += 1
        if self._pods_seen >= self._next_reweigh:
            self._reweigh()
        return super().score(cluster, pod, nodes, state)
