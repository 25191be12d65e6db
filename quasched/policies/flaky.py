"""Flaky posterior: keep pods off nodes that are probably flaky, the more the more they would lose
(``health:flaky=W``).

The error model's prior (:class:`quasched.model.health.ErrorPrior`, published by the engine: a share ``s`` of
flaky nodes whose GPUs err ``f`` times as often as an ordinary GPU's ``λ`` per second) and Poisson likelihoods
give the odds that a node with ``g`` GPUs and ``n`` logged errors in the ``T`` seconds observed is flaky::

    p(node) = o / (1 + o),   o = s / (1 − s) · f^n · e^(−(f − 1) λ g T)

A pod on ``d`` devices holding ``k`` GPUs' worth dies when any of them fails and loses ``k`` GPUs' work, so its
expected loss grows with ``d · k · (1 + p (f − 1))``: ``d · k · p`` of that is the flakiness. Against the largest
pod (``K`` = most GPUs of a node, ``d · k = K²``) on a surely flaky node::

    score(node) = 100 · (1 − d · k · p(node) / K²)

e.g. ``s = 0.05, f = 20, T = 0``: 0, 1 and 2 errors give p = 0.05, 0.51, 0.95; an 8-GPU pod scores 95, 49, 5
with ``K = 8``, a 1-GPU pod 99.9, 99.2, 98.5. No prior (no error model): every node scores 100.
"""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.workload import FULL_GPU_MILLI, Pod
from quasched.policies.base import CycleState, ScorePlugin


class FlakyPosterior(ScorePlugin):
    """``100 · (1 − d · k · p / K²)`` per node (module docstring); error counts from the log."""

    name = "flaky"

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        log, prior = cluster.errors, cluster.errors.prior
        if prior is None or not pod.is_gpu:
            return np.full(len(nodes), 100.0)
        errors = np.bincount(log.node, minlength=cluster.n_nodes)[nodes]
        with np.errstate(over="ignore"):  # share 0 or 1: p = 0 or 1
            p = 1 / (1 + np.exp(-prior.log_odds(errors, cluster.num_gpus[nodes], log.now)))
        exposure = pod.num_gpu * pod.gpu_request / FULL_GPU_MILLI / float(cluster.num_gpus.max()) ** 2
        return 100.0 * (1 - min(exposure, 1.0) * p)
