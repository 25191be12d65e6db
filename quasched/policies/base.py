"""Score plugins, in the spirit of kube-scheduler's framework.

A :class:`ScorePlugin` scores the feasible nodes of one scheduling cycle, all
at once (vectorised). Contract: :meth:`ScorePlugin.normalize` (NormalizeScore)
returns scores in ``[0, 100]``, higher = better; a
:class:`~quasched.policies.framework.Policy` adds them with weights.

*Device-aware* plugins (FGD, Headroom) score a GPU-sharing pod per device:
they return ``(n, D)``, one column per device of each node's free GPU milli
sorted ascending, -inf where the device does not fit the pod or repeats the
free milli of the column before it. The policy combines columns, takes each
node's best column as its score and keeps the combined matrix in the
:class:`CycleState`, so Reserve picks the device without scoring again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, ClassVar

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.random import RandomStream
from quasched.model.workload import Pod

#: Constants of the reference scorers (128 cores, 8 GPUs) used as fixed normalisers.
MAX_SPEC_CPU = 128_000
MAX_SPEC_GPU = 8_000


class CycleState(dict):
    """Scratch data of one scheduling cycle, shared by its extension points (kube's CycleState)."""


class ScorePlugin(ABC):
    """Scores feasible nodes for a pod; subclasses implement :meth:`score`."""

    name: ClassVar[str]
    #: whether :meth:`score` returns per-device columns for GPU-sharing pods
    device_aware: ClassVar[bool] = False

    def attach(self, cluster: Cluster, rng: RandomStream) -> None:
        """Bind per-run state (caches, random stream) before the first cycle."""
        self.rng = rng

    @abstractmethod
    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        """Raw scores of the feasible ``nodes`` (indices) for ``pod``: ``(n,)`` or ``(n, D)`` columns."""

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """NormalizeScore: map this cycle's raw scores into ``[0, 100]``; identity by default."""
        return scores

    def best(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        """Each node's best raw score ``(n,)``: its best device column for a sharing pod."""
        scores = self.score(cluster, pod, nodes, state)
        return scores.max(axis=1) if scores.ndim == 2 else scores

    def epoch(self) -> object | None:
        """None unless :meth:`best` of a node depends only on that node and the pod's demand; then a
        token that changes whenever those scores may change otherwise (e.g. new typical pods), so
        the scheduler may keep them between cycles (:mod:`quasched.policies.host_board`)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def hypothetical_scores(gpu: np.ndarray, pod: Pod,
                        evaluate: Callable[[np.ndarray | slice, np.ndarray], np.ndarray]) -> np.ndarray:
    """Score ``pod`` on node states with sorted free milli ``gpu`` (``(S, D)``, ascending).

    ``evaluate(rows, after)`` scores states ``rows`` whose free milli would become
    ``after``. A sharing pod is tried on each distinct fitting device column
    (``(S, D)``, -inf elsewhere); other pods take the devices they would get (``(S, 1)``).
    """
    if not pod.is_sharing:
        after = gpu.copy()
        if pod.is_gpu:  # fitting devices form a suffix of the sorted state
            fits = after >= pod.gpu_milli
            after -= np.where(fits & (np.cumsum(fits, axis=1) <= pod.num_gpu), pod.gpu_milli, 0)
        return evaluate(slice(None), after)[:, None]
    distinct = np.ones_like(gpu, dtype=bool)
    distinct[:, 1:] = gpu[:, 1:] != gpu[:, :-1]
    rows, cols = np.nonzero(distinct & (gpu >= pod.gpu_milli))
    after = gpu[rows].copy()
    after[np.arange(len(rows)), cols] -= pod.gpu_milli
    scores = np.full(gpu.shape, -np.inf)
    scores[rows, cols] = evaluate(rows, after)
    return scores
