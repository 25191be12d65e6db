"""Headroom: the typical-pod *capacity* a placement destroys, a term added to FGD.

FGD (:mod:`quasched.policies.fgd`) calls a node's idle GPU milli "usable" for
a typical pod ``t`` as soon as *one* copy of ``t`` fits, GPU and CPU, and
scores a placement by the change of the remaining fragment. It is blind to
what happens between those thresholds: a CPU-only pod that eats a third of a
GPU-dense node's CPU, or a pod whose memory leaves the node unable to feed
its last GPUs, changes no category and scores like a harmless placement, and
ties among the many equal (truncated) scores go to the node rank.

Headroom adds how many copies of each shape the node can still take, limited
by GPU devices, free CPU *and* free memory::

    n_t(node) = min(slots_t(free GPU milli per device), ⌊free CPU / cpu_t⌋, ⌊free mem / mem_t⌋)
    H(node)   = Σ_t count_t · n_t · m_t · k_t        (integer, GPU shapes only)

``slots_t`` = disjoint groups of ``k_t`` distinct devices with ``m_t`` free
milli each (so 530 m free holds one 470 m pod, not "530 m usable").

Added to the FGD plugin on its linear scale with weight ``β`` (``learned``'s starting weights;
``guard`` and ``power`` add the home-weighted form, :mod:`quasched.policies.home_headroom`, to FGD's
sigmoid scale)::

    score = linear(ΔF) + β · linear(ΔH / N) = 50 (1 + β) + (ΔF + β · ΔH / N) / 160

with ``ΔF = F(before) − F(after)`` FGD's un-truncated fragmentation decrease
(milli-GPU), ``ΔH = H(after) − H(before) ≤ 0`` the headroom it destroys and
``N`` the number of pods the counts come from, so ``ΔH / N`` is, like ``ΔF``,
an expectation over the next pod in milli-GPU. Sharing pods try every distinct fitting device; the best combined
device is both the node's score and the Reserve choice (tightest device on
ties).

Shapes ``t``: FGD's typical pods to begin with (memory unknown, so 0). The
policy then learns the mix from the pods it scores — shape *with memory* — and
rebuilds ``t`` after 64, 128, 256, … pods from the shapes covering 95 % of
the pods plus those covering 95 % of the GPU demand (rare multi-GPU shapes).
It uses no knowledge of the future beyond what FGD's typical pods give.

With ``β = 2`` alone it beat FGD on 13 of the paper's 17 openb traces but fell
0.05–0.22 points below it on multigpu30/40/50, where it gives the only nodes able
to take 120-core 8-GPU pods to CPU-heavy 1-GPU pods;
:mod:`quasched.policies.home_headroom` re-weighs the shapes
(:meth:`HeadroomScore.weigh`) so that those nodes are kept.

Everything depends only on the node state (GPU model, free CPU, free memory,
sorted free GPU milli), so scores are memoised per (pod shape, node state),
as in FGD; memos are dropped when the shapes are rebuilt.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from quasched.metrics.fragmentation import node_states
from quasched.metrics.typical import TypicalPods
from quasched.model.cluster import Cluster
from quasched.model.nodes import accessible
from quasched.model.random import RandomStream
from quasched.model.workload import Pod
from quasched.policies.base import CycleState, ScorePlugin, hypothetical_scores
from quasched.policies.fgd import linear_score
from quasched.policies.state_memo import StateScoreMemo

_NO_LIMIT = np.iinfo(np.int32).max

#: (cpu milli, memory MiB, gpu milli per device, num gpu, gpu spec)
Shape = tuple[int, int, int, int, str]


class HeadroomModel:
    """Vectorised headroom ``H`` of node states for weighted shapes (CPU-only shapes are dropped)."""

    def __init__(self, shapes: list[Shape], counts: list[int], models: tuple[str, ...]) -> None:
        keep = [i for i, s in enumerate(shapes) if s[2] > 0]
        self.cpu = np.array([shapes[i][0] for i in keep], dtype=np.int64)
        self.mem = np.array([shapes[i][1] for i in keep], dtype=np.int64)
        self.milli = np.array([shapes[i][2] for i in keep], dtype=np.int64)
        self.k = np.array([shapes[i][3] for i in keep], dtype=np.int64)
        self.counts = np.array([counts[i] for i in keep], dtype=np.int64)
        self.w = self.counts * self.milli * self.k
        self.access = np.array([[accessible(m, shapes[i][4]) for i in keep] for m in models], dtype=bool)
        self.access = self.access.reshape(len(models), len(keep))
        self.multi = np.flatnonzero(self.k > 1)

    def copies(self, cpu: np.ndarray, mem: np.ndarray, gpu: np.ndarray, model: np.ndarray) -> np.ndarray:
        """``n_t`` per state and shape, ``(S, T)``; states are ``cpu[S], mem[S], gpu[S, D], model[S]``."""
        per_device = gpu[:, None, :] // self.milli[None, :, None]  # (S, T, D) copies per device
        slots = per_device.sum(axis=2)
        if len(self.multi):
            # largest p with Σ_d min(c_d, p) ≥ k·p: p pods, each on k distinct devices
            sub = per_device[:, self.multi, :]
            k = self.k[self.multi][None, :]
            best = np.zeros(sub.shape[:2], dtype=np.int64)
            for p in range(1, int((sub.sum(axis=2) // k).max(initial=0)) + 1):
                best = np.where(np.minimum(sub, p).sum(axis=2) >= k * p, p, best)
            slots[:, self.multi] = best
        by_cpu = np.where(self.cpu > 0, cpu[:, None] // np.maximum(self.cpu, 1), _NO_LIMIT)
        by_mem = np.where(self.mem > 0, mem[:, None] // np.maximum(self.mem, 1), _NO_LIMIT)
        n = np.minimum(np.minimum(slots, by_cpu), by_mem)
        return np.maximum(n, 0) * self.access[model]

    def value(self, cpu: np.ndarray, mem: np.ndarray, gpu: np.ndarray, model: np.ndarray) -> np.ndarray:
        """``H`` per state (int64)."""
        return self.copies(cpu, mem, gpu, model) @ self.w


class HeadroomScore(ScorePlugin):
    """The headroom term ``linear_score(ΔH / N)`` (module docstring); add it to FGD with weight β.

    ``learn=False`` keeps FGD's typical pods (without memory) for the whole run.
    """

    name = "headroom"
    device_aware = True

    def __init__(self, typical: TypicalPods, learn: bool = True, cover: float = 95.0,
                 first_refresh: int = 64) -> None:
        self.typical = typical
        self.learn = learn
        self.cover = cover
        self.first_refresh = first_refresh

    def attach(self, cluster: Cluster, rng: RandomStream) -> None:
        super().attach(cluster, rng)
        self.cluster = cluster
        self.states = node_states(cluster, with_memory=True)
        self.seen: Counter = Counter()
        self.n_seen = 0
        self.next_refresh = self.first_refresh
        shapes = [(c, 0, m, k, s) for c, m, k, s in self.typical.shapes]
        self._set_model(shapes, list(self.typical.counts), int(sum(self.typical.counts)))

    def weigh(self, shapes: list[Shape], counts: list[int], total: int) -> tuple[list[int], int]:
        """The weight ``count_t`` of every shape and the pod total ``N`` that scales ``ΔH``."""
        return counts, total

    def _set_model(self, shapes: list[Shape], counts: list[int], total: int) -> None:
        self._shapes = (shapes, counts, total)
        self._layout = self.cluster.layout  # the model knows the cluster's GPU models of now
        weights, total = self.weigh(shapes, counts, total)
        self.model = HeadroomModel(shapes, weights, tuple(self.cluster.models))
        self.total = max(total, 1)
        self._h = np.zeros(0, dtype=np.int64)
        self._h_generation = self.states.generation
        self._memo = StateScoreMemo(self.states)

    def _observe(self, pod: Pod) -> None:
        if not self.learn:
            return
        self.seen[(pod.cpu_milli, pod.memory_mib, pod.gpu_milli, pod.num_gpu, pod.gpu_model)] += 1
        self.n_seen += 1
        if self.n_seen >= self.next_refresh:
            self.next_refresh *= 2
            self._set_model(*self.learned_shapes(), self.n_seen)

    def learned_shapes(self) -> tuple[list[Shape], list[int]]:
        """Seen shapes covering ``cover`` % of the pods, plus those covering ``cover`` % of GPU demand."""
        items = sorted(self.seen.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        keep: set[Shape] = set()
        for size in (lambda kv: kv[1], lambda kv: kv[1] * kv[0][2] * kv[0][3]):
            total = sum(size(kv) for kv in items)
            cum = 0
            for kv in sorted(items, key=size, reverse=True):
                if cum >= self.cover / 100 * total:
                    break
                keep.add(kv[0])
                cum += size(kv)
        chosen = [kv for kv in items if kv[0] in keep]
        return [s for s, _ in chosen], [c for _, c in chosen]

    def _before(self, ids: np.ndarray) -> np.ndarray:
        """Memoised ``H`` of interned states."""
        st = self.states
        if self._h_generation != st.generation:
            self._h, self._h_generation = np.zeros(0, dtype=np.int64), st.generation
        if len(self._h) < len(st):
            new = np.arange(len(self._h), len(st))
            self._h = np.concatenate([self._h, self.model.value(st.cpu[new], st.mem[new], st.gpu[new],
                                                                 st.model_id[new])])
        return self._h[ids]

    def _state_scores(self, pod: Pod, ids: np.ndarray) -> np.ndarray:
        """``linear(ΔH / N)`` of node states ``ids`` per sorted device column (:func:`hypothetical_scores`)."""
        st = self.states
        cpu, mem = st.cpu[ids] - pod.cpu_milli, st.mem[ids] - pod.memory_mib
        model, before = st.model_id[ids], self._before(ids)
        return hypothetical_scores(st.gpu[ids], pod, lambda rows, after: linear_score(
            (self.model.value(cpu[rows], mem[rows], after, model[rows]) - before[rows]) / self.total))

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        if cluster.layout != self._layout:
            self._set_model(*self._shapes)
        self._observe(pod)
        ids = self.states.ids()[nodes]
        key = (pod.cpu_milli, pod.memory_mib, pod.gpu_milli, pod.num_gpu, pod.gpu_model)
        width = self.states.gpu.shape[1] if pod.is_sharing else 1
        return self._memo.lookup(key, ids, width, lambda missing: self._state_scores(pod, missing))
