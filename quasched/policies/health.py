"""Health: avoid nodes with recent GPU errors (ours, issue 11).

Each GPU error on a node (:class:`quasched.model.health.ErrorLog`) adds 1 to the node's
level, which halves every ``half_life_h`` hours; a node's score halves with each unit::

    level(node) = Σ_errors 2^(−(now − t_error) / half_life)      score(node) = 100 · 2^(−level)

so a node without errors scores 100, one fresh error 50, two 25. The score is absolute (not
min-max normalised per cycle): a node whose errors are long past scores almost like a clean
one. It only helps when errors recur where they happened before (flaky nodes, as in the
Llama 3 and Alibaba reports); with independent, identical failure rates it changes nothing
but the placement.
"""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.random import RandomStream
from quasched.model.workload import Pod
from quasched.policies.base import CycleState, ScorePlugin


class HealthScore(ScorePlugin):
    """``100 · 2^(−level)`` per node (module docstring); ``level`` kept as (value, time) per node."""

    name = "health"

    def __init__(self, half_life_h: float = 168.0) -> None:
        self.half_life_s = half_life_h * 3600.0

    def attach(self, cluster: Cluster, rng: RandomStream) -> None:
        super().attach(cluster, rng)
        self.level, self.at, self.seen = np.zeros(0), np.zeros(0), 0

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        log = cluster.errors
        if len(self.level) < cluster.n_nodes:
            grow = cluster.n_nodes - len(self.level)
            self.level, self.at = np.pad(self.level, (0, grow)), np.pad(self.at, (0, grow))
        for t, node in zip(log.time[self.seen:], log.node[self.seen:]):
            self.level[node] = self.level[node] * np.exp2(-(t - self.at[node]) / self.half_life_s) + 1.0
            self.at[node] = t
        self.seen = len(log)
        return 100.0 * np.exp2(-self.level[nodes] * np.exp2(-(log.now - self.at[nodes]) / self.half_life_s))
