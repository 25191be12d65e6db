"""FGD: Fragmentation Gradient Descent (Weng et al., USENIX ATC'23).

A node scores ``trunc(100·σ((F_before − F_after)/1000))`` where ``F`` is the
node's GPU fragmentation relative to the workload's typical pods
(:mod:`quasched.metrics.fragmentation`): 50 = no change, higher = the
placement reduces fragmentation. Sharing pods are tried on every fitting
device and the best device is both the node's score and the Reserve choice.

Scores depend only on the node state (GPU model, free CPU, multiset of free
GPU milli), so they are memoised per (pod shape, node state) and only states
never seen before are evaluated, in one vectorised batch per cycle.
"""

from __future__ import annotations

import numpy as np

from quasched.metrics.fragmentation import StateTable, TypicalPods, state_table
from quasched.model.cluster import Cluster
from quasched.model.workload import Pod
from quasched.policies import devices
from quasched.policies.base import Policy
from quasched.policies.state_memo import StateScoreMemo
from quasched.sim.random import RandomStream

_UNKNOWN = -1


def sigmoid_score(delta: np.ndarray) -> np.ndarray:
    """``trunc(100·σ(delta/1000))`` for a fragmentation decrease ``delta`` in milli-GPU."""
    return np.trunc(100 * (1 / (1 + np.exp(-(delta / 1000))))).astype(np.int64)


class FGD(Policy):
    """Fragmentation Gradient Descent scorer and device selector."""

    name = "FGD"

    def __init__(self, typical: TypicalPods) -> None:
        self.typical = typical

    def attach(self, cluster: Cluster, rng: RandomStream) -> None:
        super().attach(cluster, rng)
        self.table: StateTable = state_table(cluster, typical=self.typical)
        self._memo = StateScoreMemo(_UNKNOWN)

    # ------------------------------------------------------------- scoring
    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray) -> np.ndarray:
        states = self.table.ids()[nodes]
        return self._memo.lookup(pod.shape, states, len(self.table),
                                 lambda missing: self._state_scores(pod, missing).max(axis=1))

    def _state_scores(self, pod: Pod, states: np.ndarray) -> np.ndarray:
        """Score of placing ``pod`` on each node state, per device column for sharing pods.

        Returns ``(S, D)`` for sharing pods, a column per device of the sorted
        state (``-1`` where the device does not fit or repeats the free value of
        the column before it, which would give the same score), and ``(S, 1)``
        otherwise.
        """
        table = self.table
        cpu = table.cpu[states] - pod.cpu_milli
        gpu = table.gpu[states]
        model = table.model_id[states]
        before = table.amount[states]
        if pod.is_sharing:
            # one hypothetical per distinct fitting free value (states are sorted ascending)
            distinct = np.ones_like(gpu, dtype=bool)
            distinct[:, 1:] = gpu[:, 1:] != gpu[:, :-1]
            rows, cols = np.nonzero(distinct & (gpu >= pod.gpu_milli))
            hyp = gpu[rows].copy()
            hyp[np.arange(len(rows)), cols] -= pod.gpu_milli
            scores = np.full(gpu.shape, _UNKNOWN, dtype=np.int64)
            after = table.model.amount(cpu[rows], hyp, model[rows])
            scores[rows, cols] = sigmoid_score(before[rows] - after)
            return scores
        hyp = gpu.copy()  # sorted ascending: fitting devices form a suffix
        if pod.is_gpu:
            fits = hyp >= pod.gpu_milli
            take = fits & (np.cumsum(fits, axis=1) <= pod.num_gpu)
            hyp -= np.where(take, pod.gpu_milli, 0)
        after = table.model.amount(cpu, hyp, model)
        return sigmoid_score(before - after)[:, None]

    # ------------------------------------------------------------- reserve
    def select_devices(self, cluster: Cluster, pod: Pod, node: int) -> tuple[int, ...]:
        """Sharing pods: the device whose use lowers fragmentation most (lowest index on ties)."""
        if not pod.is_sharing:
            return devices.best_fit(cluster.gpu_free[node], pod)
        free = cluster.gpu_free[node]
        state = self.table.ids()[node : node + 1]
        per_value = self._state_scores(pod, state)[0]  # columns follow the sorted state
        sorted_free = self.table.gpu[state[0]]
        score_of = {int(v): int(s) for v, s in zip(sorted_free, per_value) if s != _UNKNOWN}
        device_scores = np.array([score_of.get(int(v), _UNKNOWN) for v in free])
        return (int(np.argmax(device_scores)),)
