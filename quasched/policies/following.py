"""A plugin built on fixed typical pods, followed online: where the typical pods are learned from the arrivals
(:class:`~quasched.metrics.typical.TypicalWindow`, e.g. a service that knows no workload up front), the plugin is
rebuilt whenever the window's pods change, and scores every node alike (50) until the first pod arrives."""

from __future__ import annotations

from typing import Callable

import numpy as np

from quasched.metrics.typical import TypicalPods, TypicalWindow
from quasched.model.cluster import Cluster
from quasched.model.random import RandomStream
from quasched.model.workload import Pod
from quasched.policies.base import CycleState, ScorePlugin


class FollowWindow(ScorePlugin):
    """``build(window.current)``, rebuilt and re-attached when ``window.current`` changes (compared by identity)."""

    name = "follow-window"
    device_aware = True  # a per-node inner score is added to every device column alike

    def __init__(self, build: Callable[[TypicalPods], ScorePlugin], window: TypicalWindow) -> None:
        self.build = build
        self.window = window
        self.inner: ScorePlugin | None = None
        self._known: TypicalPods | None = None

    def attach(self, cluster: Cluster, rng: RandomStream) -> None:
        super().attach(cluster, rng)
        self.cluster = cluster
        self.inner, self._known = None, None

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        current = self.window.current
        if current is not None and current is not self._known:
            self.inner, self._known = self.build(current), current
            self.inner.attach(self.cluster, self.rng)
        if self.inner is None:
            return np.full(len(nodes), 50.0)
        return self.inner.score(cluster, pod, nodes, state)

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        return scores if self.inner is None else self.inner.normalize(scores)
