"""Headroom: FGD plus the typical-pod *capacity* a placement destroys (our own policy, experimental).

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
milli each (so 530 m free holds one 470 m pod, not "530 m usable"). A
placement scores

    score = round(100 · (ΔF + β · ΔH / N))

with ``ΔF = F(before) − F(after)`` FGD's un-truncated fragmentation decrease
(milli-GPU), ``ΔH = H(after) − H(before) ≤ 0`` the headroom it destroys and
``N`` the number of pods the counts come from, so ``ΔH / N`` is, like ``ΔF``,
an expectation over the next pod in milli-GPU. ``β = 2`` was chosen on seeds
42–45 (``β`` in 0.5…4 all beat FGD on openb-default; ``β = 0``, i.e. FGD
without truncation, loses 1 point). Sharing pods try every distinct fitting
device; the best is both the node's score and the Reserve choice (tightest
device on ties).

Shapes ``t``: FGD's typical pods to begin with (memory unknown, so 0). The
policy then learns the mix from the pods it scores — shape *with memory* — and
rebuilds ``t`` after 64, 128, 256, … pods from the shapes covering 95 % of
the pods plus those covering 95 % of the GPU demand (rare multi-GPU shapes).
It uses no knowledge of the future beyond what FGD's typical pods give.

Measured (BENCHMARKS.md, "Our policy", seeds 42–51): above FGD on 13 of the
paper's 17 openb traces (+0.2 to +1.3 points of allocation at column 130),
fewer failed pods on 16; it is 0.05–0.22 points below FGD on multigpu30/40/50,
where it gives the only nodes able to take 120-core 8-GPU pods (G3) to
CPU-heavy 1-GPU pods.

Everything depends only on the node state (GPU model, free CPU, free memory,
sorted free GPU milli), so scores are memoised per (pod shape, node state),
as in FGD; memos are dropped when the shapes are rebuilt.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from quasched.metrics.fragmentation import FragmentationModel, TypicalPods, state_table
from quasched.model.cluster import Cluster, accessible
from quasched.model.workload import Pod
from quasched.policies import devices
from quasched.policies.base import Policy
from quasched.policies.state_memo import StateScoreMemo
from quasched.sim.random import RandomStream

_UNKNOWN = np.iinfo(np.int64).min
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


class _States:
    """Interns node states (GPU model, free CPU, free memory, sorted free GPU milli) of one cluster."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._index: dict[tuple[int, ...], int] = {}
        self._pending: list[tuple[int, ...]] = []
        self.model_id = np.zeros(0, dtype=np.int64)
        self.cpu = np.zeros(0, dtype=np.int64)
        self.mem = np.zeros(0, dtype=np.int64)
        self.gpu = np.zeros((0, cluster.max_devices), dtype=np.int64)
        self._node_ids = np.full(cluster.n_nodes, -1, dtype=np.int64)
        self._seen = np.full(cluster.n_nodes, -1, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.cpu)

    def ids(self) -> np.ndarray:
        """State id of every node (refreshing only nodes whose version changed)."""
        c = self.cluster
        stale = np.flatnonzero(self._seen != c.version)
        for node in stale.tolist():
            key = (int(c.model_id[node]), int(c.cpu_free[node]), int(c.mem_free[node]),
                   *sorted(c.gpu_free[node].tolist()))
            state = self._index.get(key)
            if state is None:
                state = self._index[key] = len(self._index)
                self._pending.append(key)
            self._node_ids[node] = state
        self._seen[stale] = c.version[stale]
        if self._pending:
            keys = np.array(self._pending, dtype=np.int64)
            self._pending.clear()
            self.model_id = np.concatenate([self.model_id, keys[:, 0]])
            self.cpu = np.concatenate([self.cpu, keys[:, 1]])
            self.mem = np.concatenate([self.mem, keys[:, 2]])
            self.gpu = np.concatenate([self.gpu, keys[:, 3:]])
        return self._node_ids


class Headroom(Policy):
    """FGD's fragmentation decrease plus ``β`` × the normalised headroom change (module docstring).

    ``learn=False`` keeps FGD's typical pods (without memory) for the whole run.
    """

    name = "Headroom"

    def __init__(self, typical: TypicalPods, beta: float = 2.0, learn: bool = True,
                 cover: float = 95.0, first_refresh: int = 64) -> None:
        self.typical = typical
        self.beta = beta
        self.learn = learn
        self.cover = cover
        self.first_refresh = first_refresh

    def attach(self, cluster: Cluster, rng: RandomStream) -> None:
        super().attach(cluster, rng)
        self.frag: FragmentationModel = state_table(cluster, typical=self.typical).model
        self.states = _States(cluster)
        self.seen: Counter = Counter()
        self.n_seen = 0
        self.next_refresh = self.first_refresh
        self._frag = np.zeros(0)
        shapes = [(c, 0, m, k, s) for c, m, k, s in self.typical.shapes]
        self._set_model(HeadroomModel(shapes, list(self.typical.counts), cluster.models),
                         int(sum(self.typical.counts)))

    # ------------------------------------------------------------ shapes
    def _set_model(self, model: HeadroomModel, total: int) -> None:
        self.model = model
        self.total = max(total, 1)
        self._h = np.zeros(0, dtype=np.int64)
        self._memo = StateScoreMemo(_UNKNOWN)

    def _observe(self, pod: Pod) -> None:
        if not self.learn:
            return
        self.seen[(pod.cpu_milli, pod.memory_mib, pod.gpu_milli, pod.num_gpu, pod.gpu_spec)] += 1
        self.n_seen += 1
        if self.n_seen >= self.next_refresh:
            self.next_refresh *= 2
            self._set_model(HeadroomModel(*self.learned_shapes(), self.cluster_models), self.n_seen)

    @property
    def cluster_models(self) -> tuple[str, ...]:
        return self.states.cluster.models

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

    # ----------------------------------------------------------- scoring
    def _before(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Memoised ``H`` and FGD fragmentation of interned states."""
        st = self.states
        if len(self._h) < len(st):
            new = np.arange(len(self._h), len(st))
            self._h = np.concatenate([self._h, self.model.value(st.cpu[new], st.mem[new], st.gpu[new], st.model_id[new])])
        if len(self._frag) < len(st):
            new = np.arange(len(self._frag), len(st))
            self._frag = np.concatenate([self._frag, self.frag.amount(st.cpu[new], st.gpu[new], st.model_id[new])])
        return self._h[states], self._frag[states]

    def _combine(self, h_before, f_before, cpu, mem, gpu, model) -> np.ndarray:
        h_after = self.model.value(cpu, mem, gpu, model)
        f_after = self.frag.amount(cpu, gpu, model)
        mixed = (f_before - f_after) + self.beta * (h_after - h_before) / self.total
        return np.rint(mixed * 100).astype(np.int64)

    def _state_scores(self, pod: Pod, states: np.ndarray) -> np.ndarray:
        """Score per state; ``(S, D)`` per device column of the sorted state for sharing pods
        (``_UNKNOWN`` where the device does not fit or repeats the previous free value), else ``(S, 1)``."""
        st = self.states
        cpu = st.cpu[states] - pod.cpu_milli
        mem = st.mem[states] - pod.memory_mib
        gpu = st.gpu[states]
        model = st.model_id[states]
        h_before, f_before = self._before(states)
        if pod.is_sharing:
            distinct = np.ones_like(gpu, dtype=bool)
            distinct[:, 1:] = gpu[:, 1:] != gpu[:, :-1]
            rows, cols = np.nonzero(distinct & (gpu >= pod.gpu_milli))
            hyp = gpu[rows].copy()
            hyp[np.arange(len(rows)), cols] -= pod.gpu_milli
            scores = np.full(gpu.shape, _UNKNOWN, dtype=np.int64)
            scores[rows, cols] = self._combine(h_before[rows], f_before[rows], cpu[rows], mem[rows], hyp, model[rows])
            return scores
        hyp = gpu.copy()  # sorted ascending: fitting devices form a suffix
        if pod.is_gpu:
            fits = hyp >= pod.gpu_milli
            take = fits & (np.cumsum(fits, axis=1) <= pod.num_gpu)
            hyp -= np.where(take, pod.gpu_milli, 0)
        return self._combine(h_before, f_before, cpu, mem, hyp, model)[:, None]

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray) -> np.ndarray:
        self._observe(pod)
        states = self.states.ids()[nodes]
        key = (pod.cpu_milli, pod.memory_mib, pod.gpu_milli, pod.num_gpu, pod.gpu_spec)
        return self._memo.lookup(key, states, len(self.states),
                                 lambda missing: self._state_scores(pod, missing).max(axis=1))

    # ----------------------------------------------------------- reserve
    def select_devices(self, cluster: Cluster, pod: Pod, node: int) -> tuple[int, ...]:
        """Sharing pods: the best-scoring device, the tightest (then lowest index) on ties."""
        if not pod.is_sharing:
            return devices.best_fit(cluster.gpu_free[node], pod)
        free = cluster.gpu_free[node]
        state = self.states.ids()[node : node + 1]
        per_value = self._state_scores(pod, state)[0]
        score_of = {int(v): int(s) for v, s in zip(self.states.gpu[state[0]], per_value) if s != _UNKNOWN}
        device_scores = np.array([score_of.get(int(v), _UNKNOWN) for v in free])
        best = np.flatnonzero(device_scores == device_scores.max())
        return (int(best[np.argmin(free[best])]),)
