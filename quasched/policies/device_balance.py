"""Device balance: the CPU balance term with each device's free milli priced by the pods that fit in it.

:mod:`quasched.policies.cpu_balance` feeds all free GPU milli at one ratio ρ. A
sliver is different: the 190 m an 810 m pod leaves holds only the small sharing
pods, which ask far more CPU per milli-GPU. Over the typical GPU shapes ``t``
that fit a device with free milli ``f`` (``g_t ≤ f``)::

    ρ(f)  = Σ_{g_t ≤ f} count_t · cpu_t / Σ_{g_t ≤ f} count_t · g_t · k_t     (0 when none fits)
    S(node) = max(0, Σ_d f_d · ρ(f_d) − c) / ρ(1000)
    score   = linear(S(before) − S(after)) = 50 − ΔS / 160

``S`` is the CPU the free devices' pods would need beyond the free CPU ``c``, in
GPU milli at the whole-device ratio; on whole free devices it is
:class:`~quasched.policies.cpu_balance.CpuBalanceScore`'s ``max(0, f − c / ρ)``.
A sharing pod is scored on each fitting device. Typical pods only, never the trace.
Scores depend only on the node's state (free CPU, sorted free milli) and the pod's
demand, so they are memoised per state like FGD's (:class:`StateScoreMemo`).
"""

from __future__ import annotations

import numpy as np

from quasched.metrics.fragmentation import node_states
from quasched.metrics.typical import TypicalPods
from quasched.model.cluster import Cluster
from quasched.model.random import RandomStream
from quasched.model.workload import FULL_GPU_MILLI, Pod
from quasched.policies.base import CycleState, ScorePlugin, hypothetical_scores
from quasched.policies.cpu_balance import cpu_per_gpu_milli
from quasched.policies.fgd import linear_score
from quasched.policies.state_memo import StateScoreMemo


class DeviceBalanceScore(ScorePlugin):
    """``linear(−ΔS)`` of the CPU shortfall ``S`` of the free devices' typical pods (module docstring)."""

    name = "device-balance"
    device_aware = True

    def __init__(self, typical: TypicalPods) -> None:
        self.rho = cpu_per_gpu_milli(typical) or 1.0  # ρ(1000); no GPU shape: ρ(f) = 0, S = 0, score 50
        gpu = [(n, *s[:3]) for s, n in zip(typical.shapes, typical.counts) if s[1] * s[2] > 0]
        n, cpu, g, k = np.array(gpu, dtype=np.int64).reshape(-1, 4).T
        fits = np.arange(FULL_GPU_MILLI + 1)[:, None] >= g
        self.ratio = fits @ (n * cpu) / np.maximum(fits @ (n * g * k), 1)  # ρ(f) for f = 0 .. 1000

    def attach(self, cluster: Cluster, rng: RandomStream) -> None:
        super().attach(cluster, rng)
        self.states = node_states(cluster)
        self._memo = StateScoreMemo(self.states)

    def _starved(self, cpu: np.ndarray, gpu: np.ndarray) -> np.ndarray:
        return np.maximum((gpu * self.ratio[gpu]).sum(axis=1) - cpu, 0) / self.rho

    def _state_scores(self, pod: Pod, ids: np.ndarray) -> np.ndarray:
        """Scores of node states ``ids`` per sorted device column (:func:`hypothetical_scores`)."""
        cpu, gpu = self.states.cpu[ids], self.states.gpu[ids]
        before = self._starved(cpu, gpu)
        return hypothetical_scores(gpu, pod, lambda rows, after: linear_score(
            before[rows] - self._starved(cpu[rows] - pod.cpu_milli, after)))

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        ids = self.states.ids()[nodes]  # may start a new table (wider devices), so before reading its width
        width = self.states.gpu.shape[1] if pod.is_sharing else 1
        return self._memo.lookup((pod.cpu_milli, pod.gpu_milli, pod.num_gpu), ids, width,
                                 lambda missing: self._state_scores(pod, missing))
