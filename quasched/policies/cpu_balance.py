"""CPU balance: the GPUs a placement leaves without the CPU the typical GPU pods need.

A typical GPU pod asks for ``ρ`` CPU milli per milli-GPU, demand-weighted over
the typical GPU shapes ``t`` (``count_t``, ``cpu_t``, ``g_t`` milli per device × ``k_t`` devices)::

    ρ = Σ_t count_t · cpu_t / Σ_t count_t · g_t · k_t

A node with free CPU ``c`` and free GPU milli ``f`` (all devices) can feed ``c / ρ``
of its free GPU milli at that ratio; the rest is *CPU-starved*::

    S(node) = max(0, f − c / ρ)
    score   = linear(S(before) − S(after)) = 50 − ΔS / 160

so a pod whose CPU per GPU exceeds ``ρ`` scores worse on a node already short of
CPU (16-core 2-GPU nodes: ρ ≈ 10 cores per GPU on openb), and a CPU-light pod
scores better there. It uses only the typical pods, never the trace.
"""

from __future__ import annotations

import numpy as np

from quasched.metrics.typical import TypicalPods
from quasched.model.cluster import Cluster
from quasched.model.workload import Pod
from quasched.policies.base import CycleState, ScorePlugin
from quasched.policies.fgd import linear_score


def cpu_per_gpu_milli(typical: TypicalPods) -> float | None:
    """ρ of the module docstring (None without a typical GPU pod)."""
    gpu = [(n, s) for s, n in zip(typical.shapes, typical.counts) if s[1] * s[2] > 0]
    milli = sum(n * s[1] * s[2] for n, s in gpu)
    return sum(n * s[0] for n, s in gpu) / milli if milli else None


class CpuBalanceScore(ScorePlugin):
    """``linear(−ΔS)`` of the CPU-starved GPU milli ``S`` (module docstring)."""

    name = "cpu-balance"

    def __init__(self, typical: TypicalPods) -> None:
        #: ρ; ``None`` without a typical GPU pod: no ratio to keep, the term is 50 everywhere
        self.rho = cpu_per_gpu_milli(typical)

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        if self.rho is None:
            return np.full(len(nodes), 50.0)
        cpu, gpu = cluster.cpu_free[nodes], cluster.gpu_free[nodes].sum(axis=1)
        before = np.maximum(gpu - cpu / self.rho, 0)
        after = np.maximum(gpu - pod.gpu_request - (cpu - pod.cpu_milli) / self.rho, 0)
        return linear_score(before - after)
