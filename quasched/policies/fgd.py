"""FGD: Fragmentation Gradient Descent (Weng et al., USENIX ATC'23).

A placement is scored by ``ΔF = F_before − F_after``, the decrease of the
node's GPU fragmentation relative to the typical pods
(:mod:`quasched.metrics.fragmentation`), in milli-GPU, normalised to 0..100:

- ``scale="sigmoid"`` (the artifact's): ``trunc(100·σ(ΔF/1000))``, 50 = no change;
- ``scale="linear"``: ``clip(50 + ΔF/160, 0, 100)``, proportional to ``ΔF``
  (one node's fragmentation moves by at most 8000 milli), for composing
  with other terms.

``typical`` is fixed (:class:`TypicalPods`, e.g. from the whole workload) or
learned online (:class:`TypicalWindow`): the plugin rebuilds its state table
when the window's typical pods change.

Device-aware: a sharing pod is tried on every distinct fitting device. Scores
depend only on the node state (GPU model, free CPU, multiset of free GPU
milli), so they are memoised per (pod shape, node state) and only states never
seen are evaluated, in one compiled batch per cycle
(:meth:`FragmentationModel.deltas <quasched.metrics.fragmentation.FragmentationModel.deltas>`).
"""

from __future__ import annotations

from typing import Callable, Literal

import numpy as np

from quasched.metrics.fragmentation import StateTable, state_table
from quasched.metrics.typical import TypicalPods, TypicalWindow
from quasched.model.cluster import Cluster
from quasched.model.random import RandomStream
from quasched.model.workload import Pod
from quasched.policies.base import CycleState, ScorePlugin, hypothetical_scores
from quasched.policies.state_memo import StateScoreMemo

Scale = Literal["sigmoid", "linear"]


def sigmoid_score(delta: np.ndarray) -> np.ndarray:
    """``trunc(100·σ(delta/1000))`` for a fragmentation decrease ``delta`` in milli-GPU."""
    return np.trunc(100 * (1 / (1 + np.exp(-(delta / 1000)))))


def linear_score(delta: np.ndarray) -> np.ndarray:
    """``clip(50 + delta/160, 0, 100)`` for a change ``delta`` in milli-GPU on one node."""
    return np.clip(50 + delta / 160, 0, 100)


class FGD(ScorePlugin):
    """Fragmentation decrease of a placement (module docstring)."""

    name = "fgd"
    device_aware = True

    def __init__(self, typical: TypicalPods | TypicalWindow, scale: Scale = "sigmoid") -> None:
        self.typical = typical
        self.scale = sigmoid_score if scale == "sigmoid" else linear_score
        self._known: TypicalPods | None = None

    def attach(self, cluster: Cluster, rng: RandomStream) -> None:
        super().attach(cluster, rng)
        self.cluster = cluster
        self._known = None
        self._sync()

    def _sync(self) -> bool:
        """Follow the current typical pods; False while there are none yet."""
        typical = self.typical.current if isinstance(self.typical, TypicalWindow) else self.typical
        if typical is not None and typical is not self._known:
            self.table: StateTable = state_table(self.cluster, typical)
            self._memo = StateScoreMemo(self.table)
            self._known = typical
        return typical is not None

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        if not self._sync():  # no typical pods yet: every usable device scores 50 (no change)
            scores = hypothetical_scores(np.sort(cluster.gpu_free[nodes], axis=1), pod,
                                         lambda rows, after: np.full(len(after), 50.0))
            return scores if pod.is_sharing else scores[:, 0]
        return self._memoised(self._memo.lookup, pod, nodes)

    def best(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        if not self._sync():
            return super().best(cluster, pod, nodes, state)
        return self._memoised(self._memo.lookup_best, pod, nodes)

    def epoch(self) -> object | None:
        """The typical pods the scores follow (None while there are none)."""
        return self._known if self._sync() else None

    def _memoised(self, lookup: Callable[..., np.ndarray], pod: Pod, nodes: np.ndarray) -> np.ndarray:
        """``lookup`` (a :class:`StateScoreMemo` method) of the nodes' states for ``pod``'s shape."""
        ids = self.table.ids()[nodes]  # may start a new table (wider devices), so before reading its width
        width = self.table.gpu.shape[1] if pod.is_sharing else 1
        return lookup(pod.shape, ids, width, lambda missing: self._state_scores(pod, missing))

    def _state_scores(self, pod: Pod, states: np.ndarray) -> np.ndarray:
        """Scores of node ``states`` per sorted device column (-inf where the pod cannot go)."""
        table = self.table
        delta = table.model.deltas(table.cpu[states], table.gpu[states], table.model_id[states],
                                   table.amount[states], pod)
        return np.where(np.isnan(delta), -np.inf, self.scale(delta))
