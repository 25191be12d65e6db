"""The placement-policy interface, in the spirit of kube-scheduler's framework.

A scheduling cycle (see :mod:`quasched.policies.framework`) runs the generic
*Filter* (:func:`quasched.policies.filter.feasible_nodes`), then the policy's
extension points:

- :meth:`Policy.score`: one score per feasible node, computed for all of them
  at once (vectorised);
- :meth:`Policy.normalize`: optional NormalizeScore over the cycle's scores;
- host selection by the framework (highest score, ties to the lowest rank);
- :meth:`Policy.select_devices`: the Reserve step, which GPU device(s) of the
  chosen node the pod gets.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.workload import Pod
from quasched.policies import devices
from quasched.sim.random import RandomStream

#: Constants of the reference scorers (128 cores, 8 GPUs) used as fixed normalisers.
MAX_SPEC_CPU = 128_000
MAX_SPEC_GPU = 8_000


class Policy(ABC):
    """A node-scoring placement policy.

    Subclasses set :attr:`name` and implement :meth:`score`. Scores are
    numbers where higher is better; the reference policies return integers
    in ``[0, 100]``.
    """

    name: ClassVar[str]

    def attach(self, cluster: Cluster, rng: RandomStream) -> None:
        """Bind per-run state (caches, random stream) before the first cycle."""
        self.rng = rng

    @abstractmethod
    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray) -> np.ndarray:
        """Scores of the feasible ``nodes`` (indices) for ``pod``."""

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """NormalizeScore extension point; identity by default."""
        return scores

    def select_devices(self, cluster: Cluster, pod: Pod, node: int) -> tuple[int, ...]:
        """GPU devices for ``pod`` on ``node``: tightest device for sharing pods, else exclusive."""
        return devices.best_fit(cluster.gpu_free[node], pod)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
