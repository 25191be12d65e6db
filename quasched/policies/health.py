"""Health: avoid nodes with recent GPU errors.

Each GPU error on a node (a failure or a warning, :class:`quasched.model.health.ErrorLog`)
adds 1 to the node's level, which halves every ``half_life_h`` hours; the level estimates how often the node fails
(errors per ``half_life_h / ln 2`` hours). A node scores in proportion to how far its level is
below the worst feasible node's, but never loses more than ``100 · level`` (so errors long
past cost little even when no node has more)::

    level(node) = Σ_errors 2^(−(now − t_error) / half_life)
    score(node) = 100 · (1 − level(node) / max(1, max_feasible level))

e.g. levels (0.5, 2, 0) score (75, 0, 100). It only helps when errors recur where they
happened before (flaky nodes, as in the Llama 3 and Alibaba reports); with independent,
identical failure rates it changes nothing but the placement.
"""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.random import RandomStream
from quasched.model.workload import Pod
from quasched.policies.base import CycleState, ScorePlugin


class HealthScore(ScorePlugin):
    """``100 · (1 − level / max(1, max level))`` per node (module docstring); level kept as (value, time)."""

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
        level = self.level[nodes] * np.exp2(-(log.now - self.at[nodes]) / self.half_life_s)
        return 100.0 * (1.0 - level / max(1.0, float(level.max(initial=0.0))))
