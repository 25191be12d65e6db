"""Last homes: Littlewood's protection rule for shapes that few nodes can hold.

A placement that breaks the ``R``-th copy the cluster can still hold of a shape
``t`` costs a ``t`` pod exactly when at least ``R`` more ``t`` pods arrive before
the cluster is full. With those arrivals Poisson, ``λ_t = F · count_t / Σ_s count_s g_s k_s``
(``F`` the free GPU milli on healthy devices of schedulable nodes: the pods that fill it, in the typical mix), the
expected GPU milli a placement on ``node`` turns away is::

    E(node) = Σ_t g_t k_t Σ_{j < L_t} P(Poisson(λ_t) ≥ R_t − j),   L_t = n_t(before) − n_t(after)
    score   = linear(−E) = 50 − E / 160

(``n_t`` the copies of :class:`~quasched.policies.headroom.HeadroomModel`, ``R_t = Σ_nodes n_t``),
the revenue-management rule of protecting the last seats for the class whose
demand will still come. While ``R_t`` is far above ``λ_t`` the term is 50 on every
node; it wakes up only for a shape whose homes run short of its expected demand,
so it guards the 128-core nodes that alone hold a 120-core 8-GPU pod without
weighing on the rest. A sharing pod is scored on its tightest fitting device.
Typical pods only, never the trace; ``n_t`` is memoised per node state.
"""

from __future__ import annotations

import numpy as np

from quasched.metrics.fragmentation import TypicalPods, node_states
from quasched.model.cluster import Cluster
from quasched.model.odds import at_least
from quasched.model.random import RandomStream
from quasched.model.resources import CPU
from quasched.model.workload import FULL_GPU_MILLI, Pod
from quasched.policies.base import CycleState, ScorePlugin
from quasched.policies.fgd import linear_score
from quasched.policies.headroom import HeadroomModel
from quasched.policies.state_memo import StateScoreMemo

#: shapes whose last-copy odds stay below this are skipped (the term is 50 for them)
AWAKE = 1e-6


class LastHomesScore(ScorePlugin):
    """``linear(−E)``: the GPU milli of future pods a placement is expected to turn away (module docstring)."""

    name = "last-homes"
    _mark: int
    _shape: np.ndarray  # per node slot: the CPU, GPUs and model ``_most`` was computed from

    def __init__(self, typical: TypicalPods) -> None:
        self.typical = typical

    def attach(self, cluster: Cluster, rng: RandomStream) -> None:
        super().attach(cluster, rng)
        self.states = node_states(cluster)
        self._layout = -1  # no cluster layout seen yet

    def _refresh(self, cluster: Cluster) -> None:
        """``n_t`` of every node slot and their sum ``R_t``, brought up to date for the nodes changed since."""
        if cluster.layout != self._layout:  # new node slots or GPU models: start over
            self._start(cluster)
        ids = self.states.ids()
        stale = cluster.changes_since(self._mark)
        self._mark = cluster.change_mark
        rows = np.arange(cluster.n_nodes) if stale is None else np.asarray(stale, dtype=np.int64)
        if len(rows):
            copies = self._memo.lookup("copies", ids[rows], len(self.model.k),
                                       lambda s: self._state_copies(s, None)).reshape(len(rows), -1)
            copies = copies.astype(np.int64) * cluster.schedulable[rows, None]  # a cordoned node is no home
            self.held += copies.sum(axis=0) - self._copies[rows].sum(axis=0)
            self._copies[rows] = copies
            free = cluster.gpu_free[rows].sum(axis=1) * cluster.schedulable[rows]  # 0 on failed devices, cordoned nodes
            self.free += int(free.sum() - self._free[rows].sum())
            self._free[rows] = free
            shape = np.column_stack([cluster.capacity[rows, CPU], cluster.num_gpus[rows], cluster.model_id[rows]])
            if not np.array_equal(shape, self._shape[rows]):  # a node came, left or lost a device
                self._shape[rows] = shape
                full = np.where(cluster.device_exists, FULL_GPU_MILLI, 0)
                self._most = self.model.copies(cluster.capacity[:, CPU], np.zeros(cluster.n_nodes, np.int64), full,
                                               cluster.model_id).max(axis=0, initial=0)  # most copies one node holds

    def _start(self, cluster: Cluster) -> None:
        shapes = [(c, 0, m, k, s) for c, m, k, s in self.typical.shapes]
        self._layout = cluster.layout
        self.model = HeadroomModel(shapes, list(self.typical.counts), tuple(cluster.models))
        self.demand = self.model.counts / max(int(self.model.w.sum()), 1)  # λ_t per free GPU milli
        self._memo = StateScoreMemo(self.states)
        self._copies = np.zeros((cluster.n_nodes, len(self.model.k)), dtype=np.int64)
        self.held = np.zeros(len(self.model.k), dtype=np.int64)  # R_t = Σ_nodes n_t, kept as nodes change
        self._free = np.zeros(cluster.n_nodes, dtype=np.int64)  # GPU milli a pod could still take, per node
        self.free = 0  # F = Σ_nodes _free, kept alike
        self._mark = -1
        self._shape = np.full((cluster.n_nodes, 3), -1, dtype=np.int64)

    def _state_copies(self, ids: np.ndarray, pod: Pod | None) -> np.ndarray:
        """``n_t`` of states ``ids``, after ``pod`` took its tightest devices there when given."""
        s = self.states
        cpu, gpu = s.cpu[ids].copy(), s.gpu[ids].copy()
        if pod is not None:
            cpu -= pod.cpu_milli
            fits = gpu >= pod.gpu_milli  # ascending rows: the first fitting columns are the tightest
            gpu -= np.where(fits & (np.cumsum(fits, axis=1) <= pod.num_gpu), pod.gpu_milli, 0)
        return self.model.copies(cpu, np.zeros(len(ids), np.int64), gpu, s.model_id[ids])

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        self._refresh(cluster)
        held = self.held
        lam = self.free * self.demand
        awake = np.flatnonzero((self._most > 0) & (at_least(held - self._most + 1, lam) > AWAKE))
        if not len(awake):
            return np.full(len(nodes), 50.0)
        holders = np.flatnonzero(self._copies[nodes][:, awake].any(axis=1))  # the others lose no copy
        expected = np.zeros(len(nodes))
        if len(holders):
            ids, at = np.unique(self.states.ids()[nodes[holders]], return_inverse=True)
            after = self._state_copies(ids, pod)[at][:, awake]
            lost = np.maximum(self._copies[nodes[holders]][:, awake] - after, 0)  # L_t
            steps = np.arange(max(int(lost.max(initial=0)), 1))
            odds = at_least(held[awake, None] - steps, lam[awake, None])  # P(D ≥ R − j), j = 0 ..
            cumulative = np.hstack([np.zeros((len(awake), 1)), np.cumsum(odds, axis=1)])
            weights = (self.model.milli * self.model.k)[awake]
            for column in np.flatnonzero(lost.any(axis=0)):  # in a fixed order: the same bits for any node subset
                expected[holders] += cumulative[column, lost[:, column]] * weights[column]
        return linear_score(-expected)
