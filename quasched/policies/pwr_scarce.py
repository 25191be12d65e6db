"""Scarce-GPU power: the linear model's watts of a pod, with the cheap GPUs priced as the scarce resource they are.

Under the linear power model (:mod:`quasched.metrics.power`) a pod of ``g`` GPUs adds ``s_m · g`` W
on a GPU model of idle→full swing ``s_m``, and filling the cheapest models first draws the least
power (:mod:`quasched.policies.pwr_bound`). Once a cheap model is going to be full anyway, every
milli of it that a pod takes or strands is a milli another pod cannot use there: it has a shadow
price ``λ_m = κ · max(0, s_ref − s_m)``, ``s_ref`` = the swing of the model a cheapest-first fill
reaches after the GPU milli allocated now plus ``horizon`` % of the unallocated rest (``κ < 1``: a
pod that strands nothing still prefers the cheaper model). "Anyway" is checked: ``λ_m = 0`` unless
the whole-GPU pods alone, a share ``D`` of the typical pods' GPU demand, fill that far, i.e. unless
``D · reach ≥ E_m``, the milli a cheapest-first fill holds once model ``m`` is full (else, when most
pods share a GPU, the price would keep them all off the cheap GPUs). A sharing pod strands the free
milli of its device that the typical sharing pods ``t`` (weighted by count) no longer fit::

    waste(f) = f · P_t(g_t > f)   for 0 < f < 1000, else 0
    cost     = (s_m + λ_m) · g + λ_m · (waste(f − g) − waste(f)) / 1000 + c · ΔP_cpu     (W)
    score    = −cost, min-max normalised over the feasible nodes into 0..100 (as PWR)

``f``: the free milli of the node's device that strands least; ``ΔP_cpu``: the linear model's CPU
watts the pod adds (whole working cores: a pod of 1.5 cores adds 1 or 2), weighted ``c``. So while
the T4s (60 W swing) fill, a 810 m pod, which would strand 190 m of one, goes to an A10-class GPU
(120 W) and a whole-GPU pod, which strands nothing, takes the T4.
"""

from __future__ import annotations

import numpy as np

from quasched.metrics.typical import TypicalPods
from quasched.model.cluster import Cluster
from quasched.model.workload import FULL_GPU_MILLI, Pod
from quasched.policies.base import CycleState
from quasched.policies.pwr import PWR, added_power_w


def waste_table(typical: TypicalPods) -> np.ndarray:
    """``waste(f)`` of the module docstring for ``f = 0..1000`` milli."""
    shares = [(s[1], n) for s, n in zip(typical.shapes, typical.counts) if s[2] == 1 and 0 < s[1] < FULL_GPU_MILLI]
    milli = np.array([m for m, _ in shares], dtype=np.int64)
    counts = np.array([n for _, n in shares], dtype=float)
    f = np.arange(FULL_GPU_MILLI + 1)
    waste = f * (counts * (milli[None, :] > f[:, None])).sum(axis=1) / max(counts.sum(), 1.0)
    waste[FULL_GPU_MILLI] = 0.0  # an idle device strands nothing
    return waste


def whole_share(typical: TypicalPods) -> float:
    """``D``: the whole-GPU pods' share of the typical pods' GPU demand."""
    gpu = [(n * s[1] * s[2], s[1] >= FULL_GPU_MILLI) for s, n in zip(typical.shapes, typical.counts)]
    return sum(d for d, whole in gpu if whole) / max(sum(d for d, _ in gpu), 1)


class ScarcePower(PWR):
    """``−cost`` of the module docstring: ``horizon`` (%), ``kappa`` (κ), ``cpu`` (c); ``until`` as
    :class:`~quasched.policies.pwr.PWR` (the term scores every node alike from ``until`` % allocated)."""

    name = "pwr-scarce"

    def __init__(self, typical: TypicalPods, horizon: float = 20.0, kappa: float = 0.9, cpu: float = 0.5,
                 until: float = 100.0) -> None:
        super().__init__("linear", until=until)
        self.horizon, self.kappa, self.cpu = horizon, kappa, cpu
        self.waste = waste_table(typical)
        self.whole = whole_share(typical)

    def refresh(self, cluster: Cluster) -> None:
        super().refresh(cluster)
        self._swing = self._full - self._idle
        gpus = np.bincount(cluster.model_id, cluster.num_gpus * cluster.present, len(cluster.models))
        self._order = order = np.argsort(self._swing, kind="stable")
        self._ladder = self._swing[order], np.cumsum(gpus[order]) * FULL_GPU_MILLI
        self._edge = np.empty(len(order))
        self._edge[order] = self._ladder[1]  # milli a cheapest-first fill holds once each model is full

    def gate(self, cluster: Cluster, reach: float) -> np.ndarray:
        """Per GPU model, the share of ``λ_m`` charged: 1 if ``D · reach ≥ E_m``, else 0."""
        return (self._edge <= self.whole * reach).astype(float)

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        if not self.steering(cluster):
            return np.zeros(len(nodes))
        cost = self.cpu * added_power_w(cluster, pod, nodes, self._swing, self._swing, self.model, "linear", "cpu")
        if not pod.is_gpu:
            return -cost
        swing, edges = self._ladder
        allocated = cluster.gpu_allocated
        reach = allocated + self.horizon / 100 * (FULL_GPU_MILLI * cluster.total_gpus - allocated)
        s = self._swing[cluster.model_id[nodes]]
        lam = self.kappa * np.maximum(swing[min(int(np.searchsorted(edges, reach)), len(swing) - 1)] - s, 0.0)
        lam *= self.gate(cluster, reach)[cluster.model_id[nodes]]
        stranded = np.zeros(len(nodes))
        if pod.is_sharing:
            free = cluster.gpu_free[nodes]
            delta = self.waste[np.clip(free - pod.gpu_milli, 0, None)] - self.waste[free]
            stranded = np.where(free >= pod.gpu_milli, delta, np.inf).min(axis=1)
        return -cost - ((s + lam) * pod.gpu_request + lam * stranded) / FULL_GPU_MILLI

    def __repr__(self) -> str:
        return f"ScarcePower(horizon={self.horizon:g}, kappa={self.kappa:g}, cpu={self.cpu:g}, until={self.until:g})"
