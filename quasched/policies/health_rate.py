"""Rate health: avoid nodes in proportion to their estimated failure rate (ours, issue 11).

:mod:`quasched.policies.health` forgets errors (half-life) and scores against the worst node,
so one lemon makes every other node's errors look small, and a node that erred three weeks
ago looks clean again. Flaky ("lemon") nodes stay flaky until repaired; this plugin keeps
every error (failures and warnings, :class:`quasched.model.health.ErrorLog`) and estimates
each node's rate per GPU-hour by shrinking its count towards the cluster's mean (Gamma–Poisson,
``prior`` pseudo-errors at the mean rate ``r̄``), then scores relative to the cleanest
feasible node::

    r̄       = (errors so far + prior) / (GPUs · T + prior / r₀)      T: hours since the first score
    r(node) = (prior + n(node)) / (prior / r̄ + G(node) · T)
    score   = 100 · min_feasible r / r(node)

``r₀`` only seeds ``r̄`` before the first error. Nodes of equal size score
``100 · (prior + n_min) / (prior + n)``: one error more than the cleanest node halves the score
(``prior = 1``). Like every health score it only helps when errors recur where they happened.
"""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.random import RandomStream
from quasched.model.workload import Pod
from quasched.policies.base import CycleState, ScorePlugin

#: the rate ``r̄`` assumes before any error (per GPU-hour; Llama 3's interruptions, see :mod:`quasched.sim.failures`)
SEED_RATE = 2e-5


class RateHealthScore(ScorePlugin):
    """``100 · min r / r(node)`` per node (module docstring)."""

    name = "health-rate"

    def __init__(self, prior: float = 1.0) -> None:
        self.prior = prior

    def attach(self, cluster: Cluster, rng: RandomStream) -> None:
        super().attach(cluster, rng)
        self.errors, self.seen, self.start = np.zeros(0), 0, float("nan")

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        log = cluster.errors
        if len(self.errors) < cluster.n_nodes:
            self.errors = np.pad(self.errors, (0, cluster.n_nodes - len(self.errors)))
        np.add.at(self.errors, np.asarray(log.node[self.seen:], dtype=np.int64), 1.0)
        self.seen = len(log)
        if np.isnan(self.start):
            self.start = log.now
        hours = (log.now - self.start) / 3600.0
        gpus = cluster.num_gpus[: cluster.n_nodes]
        mean = (self.seen + self.prior) / (gpus.sum() * hours + self.prior / SEED_RATE)
        rate = (self.prior + self.errors[nodes]) / (self.prior / mean + gpus[nodes] * hours)
        return 100.0 * rate.min(initial=np.inf) / rate if len(nodes) else np.zeros(0)
