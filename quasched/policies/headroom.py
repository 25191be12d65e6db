"""Headroom: keep the most future pods placeable (experimental, our own policy).

FGD counts a node's idle GPU milli as "usable" for a typical pod ``t`` when
*one* copy of ``t`` fits (GPU and CPU), and as fragment otherwise. Headroom
asks instead how many copies of ``t`` the node can still take, limited by
GPU slots, free CPU *and* free memory::

    n_t(node)  = min(slots_t(free GPU devices), ⌊free CPU / cpu_t⌋, ⌊free mem / mem_t⌋)
    H(node)    = Σ_t count_t · n_t · m_t · k_t        (integer)

where ``slots_t`` is the number of disjoint groups of ``k_t`` distinct
devices with at least ``m_t`` free milli each. A placement scores the change
of headroom, ``H(after) − H(before)`` (≤ 0, larger is better): the placement
that destroys the least future capacity wins. Unlike FGD this

- sees CPU and memory stranding: a CPU-only pod eating the CPU or memory of
  a GPU-dense node loses whole GPUs of headroom, on a CPU-rich node nothing,
  even when no typical pod changes FGD category;
- sees quantisation: a device with 530 m free holds one 470 m pod;
- is integer, so ties are exact and go to a secondary key (FGD's
  un-truncated fragmentation decrease), then to rank as usual.

Shapes ``t`` and counts: FGD's typical pods to start with (memory unknown);
the policy then learns the shape mix, memory included, from the pods it
schedules, and rebuilds ``t`` after 64, 128, 256, … pods from the shapes
covering ``cover`` % of pods plus those covering ``cover`` % of GPU demand
(so rare but large multi-GPU shapes protect whole nodes).

Scores depend only on the node state (GPU model, free CPU, free memory,
sorted free GPU milli), so they are memoised per (pod shape, node state).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from quasched.metrics.fragmentation import FragmentationModel, TypicalPods, state_table
from quasched.model.cluster import Cluster, accessible
from quasched.model.workload import Pod
from quasched.policies import devices
from quasched.policies.base import Policy
from quasched.sim.random import RandomStream

_UNKNOWN = np.iinfo(np.int64).min
_SHIFT = 1 << 22  # secondary key range
_NO_LIMIT = np.iinfo(np.int32).max

#: (cpu milli, memory MiB, gpu milli, num gpu, gpu spec)
Shape = tuple[int, int, int, int, str]


class HeadroomModel:
    """Vectorised headroom ``H`` of node states for a weighted set of GPU shapes."""

    def __init__(self, shapes: list[Shape], counts: list[int], models: tuple[str, ...],
                 weight: str = "count") -> None:
        keep = [i for i, s in enumerate(shapes) if s[2] > 0]
        self.cpu = np.array([shapes[i][0] for i in keep], dtype=np.int64)
        self.mem = np.array([shapes[i][1] for i in keep], dtype=np.int64)
        self.milli = np.array([shapes[i][2] for i in keep], dtype=np.int64)
        self.k = np.array([shapes[i][3] for i in keep], dtype=np.int64)
        counts_ = np.array([counts[i] for i in keep], dtype=np.int64)
        if weight == "count":
            self.w = counts_ * self.milli * self.k
        elif weight == "sqrt":
            self.w = np.rint(np.sqrt(counts_) * 100).astype(np.int64) * self.milli * self.k
        else:
            raise ValueError(weight)
        self.access = np.array([[accessible(m, shapes[i][4]) for i in keep] for m in models], dtype=bool)
        self.multi = np.flatnonzero(self.k > 1)
        self.cpu_div = np.maximum(self.cpu, 1)
        self.mem_div = np.maximum(self.mem, 1)

    def copies(self, cpu: np.ndarray, mem: np.ndarray, gpu: np.ndarray, model: np.ndarray) -> np.ndarray:
        """``n_t`` per state and shape, ``(S, T)``."""
        per_device = gpu[:, None, :] // self.milli[None, :, None]  # (S, T, D)
        slots = per_device.sum(axis=2)
        if len(self.multi):
            sub = per_device[:, self.multi, :]
            k = self.k[self.multi][None, :]
            best = np.zeros(sub.shape[:2], dtype=np.int64)
            top = int((sub.sum(axis=2) // k).max(initial=0))
            for p in range(1, top + 1):
                best = np.where(np.minimum(sub, p).sum(axis=2) >= k * p, p, best)
            slots[:, self.multi] = best
        by_cpu = np.where(self.cpu > 0, cpu[:, None] // self.cpu_div, _NO_LIMIT)
        by_mem = np.where(self.mem > 0, mem[:, None] // self.mem_div, _NO_LIMIT)
        n = np.minimum(np.minimum(slots, by_cpu), by_mem)
        return np.maximum(n, 0) * self.access[model]

    def value(self, cpu: np.ndarray, mem: np.ndarray, gpu: np.ndarray, model: np.ndarray) -> np.ndarray:
        """``H`` per state (int64)."""
        return self.copies(cpu, mem, gpu, model) @ self.w


class _States:
    """Interns node states (model, free CPU, free memory, sorted free GPU milli)."""

    def __init__(self, cluster: Cluster, use_mem: bool) -> None:
        self.cluster = cluster
        self.use_mem = use_mem
        self._index: dict[tuple[int, ...], int] = {}
        self._pending: list[tuple[int, ...]] = []
        self.cpu = np.zeros(0, dtype=np.int64)
        self.mem = np.zeros(0, dtype=np.int64)
        self.gpu = np.zeros((0, cluster.max_devices), dtype=np.int64)
        self.model_id = np.zeros(0, dtype=np.int64)
        self._node_ids = np.full(cluster.n_nodes, -1, dtype=np.int64)
        self._seen = np.full(cluster.n_nodes, -1, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.cpu)

    def ids(self) -> np.ndarray:
        c = self.cluster
        stale = np.flatnonzero(self._seen != c.version)
        for node in stale.tolist():
            mem = int(c.mem_free[node]) if self.use_mem else 0
            key = (int(c.model_id[node]), int(c.cpu_free[node]), mem, *sorted(c.gpu_free[node].tolist()))
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
    """Headroom-descent scorer and device selector (see the module docstring)."""

    name = "Headroom"

    def __init__(self, typical: TypicalPods, weight: str = "count", secondary: str = "fgd",
                 use_mem: bool = True, learn: bool = True, cover: float = 95.0,
                 first_refresh: int = 64) -> None:
        self.typical = typical
        self.weight = weight
        self.secondary = secondary
        self.use_mem = use_mem
        self.learn = learn
        self.cover = cover
        self.first_refresh = first_refresh

    def attach(self, cluster: Cluster, rng: RandomStream) -> None:
        super().attach(cluster, rng)
        self.frag: FragmentationModel = state_table(cluster, typical=self.typical).model
        self.states = _States(cluster, self.use_mem)
        self.models = cluster.models
        self.seen: Counter = Counter()
        self.n_seen = 0
        self.next_refresh = self.first_refresh
        shapes = [(c, 0, m, k, s) for c, m, k, s in self.typical.shapes]
        self._set_model(HeadroomModel(shapes, list(self.typical.counts), self.models, self.weight))
        self._frag = np.zeros(0)

    def _set_model(self, model: HeadroomModel) -> None:
        self.model = model
        self._h = np.zeros(0, dtype=np.int64)
        self._memo: dict[tuple, np.ndarray] = {}

    def _observe(self, pod: Pod) -> None:
        if not self.learn:
            return
        mem = pod.memory_mib if self.use_mem else 0
        self.seen[(pod.cpu_milli, mem, pod.gpu_milli, pod.num_gpu, pod.gpu_spec)] += 1
        self.n_seen += 1
        if self.n_seen >= self.next_refresh:
            self.next_refresh *= 2
            self._set_model(HeadroomModel(*self._learned_shapes(), self.models, self.weight))

    def _learned_shapes(self) -> tuple[list[Shape], list[int]]:
        """Shapes covering ``cover`` % of the pods seen, plus those covering ``cover`` % of GPU demand."""
        items = sorted(self.seen.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        keep: set[Shape] = set()
        for key_of in (lambda kv: kv[1], lambda kv: kv[1] * kv[0][2] * kv[0][3]):
            ranked = sorted(items, key=key_of, reverse=True)
            total = sum(key_of(kv) for kv in ranked)
            cum = 0
            for kv in ranked:
                if cum >= self.cover / 100 * total:
                    break
                keep.add(kv[0])
                cum += key_of(kv)
        chosen = [kv for kv in items if kv[0] in keep]
        return [s for s, _ in chosen], [c for _, c in chosen]

    # ------------------------------------------------------------- helpers
    def _headroom_and_frag(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        st = self.states
        if len(self._h) < len(st):
            new = np.arange(len(self._h), len(st))
            self._h = np.concatenate(
                [self._h, self.model.value(st.cpu[new], st.mem[new], st.gpu[new], st.model_id[new])])
        if self.secondary == "fgd" and len(self._frag) < len(st):
            new = np.arange(len(self._frag), len(st))
            self._frag = np.concatenate([self._frag, self.frag.amount(st.cpu[new], st.gpu[new], st.model_id[new])])
        frag = self._frag[states] if self.secondary == "fgd" else np.zeros(len(states))
        return self._h[states], frag

    def _memo_for(self, pod: Pod) -> np.ndarray:
        key = (pod.cpu_milli, pod.memory_mib, pod.gpu_milli, pod.num_gpu, pod.gpu_spec)
        memo = self._memo.get(key)
        if memo is None or len(memo) < len(self.states):
            grown = np.full(max(2 * len(self.states), 64), _UNKNOWN, dtype=np.int64)
            if memo is not None:
                grown[: len(memo)] = memo
            memo = self._memo[key] = grown
        return memo

    def _combine(self, primary: np.ndarray, fgd_delta: np.ndarray) -> np.ndarray:
        if self.secondary == "fgd":
            sec = np.clip(np.rint(fgd_delta * 100), -(_SHIFT // 2) + 1, _SHIFT // 2 - 1).astype(np.int64)
        elif self.secondary == "none":
            sec = np.zeros_like(primary)
        else:
            raise ValueError(self.secondary)
        return primary * _SHIFT + sec

    def _after(self, cpu, mem, gpu, model):
        h = self.model.value(cpu, mem, gpu, model)
        f = self.frag.amount(cpu, gpu, model) if self.secondary == "fgd" else 0.0
        return h, f

    def _state_scores(self, pod: Pod, states: np.ndarray) -> np.ndarray:
        """Combined score per state, per device column for sharing pods (like FGD's)."""
        st = self.states
        cpu = st.cpu[states] - pod.cpu_milli
        mem = st.mem[states] - (pod.memory_mib if self.use_mem else 0)
        gpu = st.gpu[states]
        model = st.model_id[states]
        h_before, f_before = self._headroom_and_frag(states)
        if pod.is_sharing:
            distinct = np.ones_like(gpu, dtype=bool)
            distinct[:, 1:] = gpu[:, 1:] != gpu[:, :-1]
            rows, cols = np.nonzero(distinct & (gpu >= pod.gpu_milli))
            hyp = gpu[rows].copy()
            hyp[np.arange(len(rows)), cols] -= pod.gpu_milli
            scores = np.full(gpu.shape, _UNKNOWN, dtype=np.int64)
            h_after, f_after = self._after(cpu[rows], mem[rows], hyp, model[rows])
            scores[rows, cols] = self._combine(h_after - h_before[rows], f_before[rows] - f_after)
            return scores
        hyp = gpu.copy()
        if pod.is_gpu:
            fits = hyp >= pod.gpu_milli
            take = fits & (np.cumsum(fits, axis=1) <= pod.num_gpu)
            hyp -= np.where(take, pod.gpu_milli, 0)
        h_after, f_after = self._after(cpu, mem, hyp, model)
        return self._combine(h_after - h_before, f_before - f_after)[:, None]

    # ------------------------------------------------------------- scoring
    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray) -> np.ndarray:
        self._observe(pod)
        states = self.states.ids()[nodes]
        memo = self._memo_for(pod)
        scores = memo[states]
        missing = np.unique(states[scores == _UNKNOWN])
        if len(missing):
            memo[missing] = self._state_scores(pod, missing).max(axis=1)
            scores = memo[states]
        return scores

    # ------------------------------------------------------------- reserve
    def select_devices(self, cluster: Cluster, pod: Pod, node: int) -> tuple[int, ...]:
        """Sharing pods: the device keeping the most headroom (tightest device on ties)."""
        if not pod.is_sharing:
            return devices.best_fit(cluster.gpu_free[node], pod)
        free = cluster.gpu_free[node]
        state = self.states.ids()[node : node + 1]
        per_value = self._state_scores(pod, state)[0]
        sorted_free = self.states.gpu[state[0]]
        score_of = {int(v): int(s) for v, s in zip(sorted_free, per_value) if s != _UNKNOWN}
        device_scores = np.array([score_of.get(int(v), _UNKNOWN) for v in free])
        best = device_scores == device_scores.max()
        return (int(np.flatnonzero(best)[np.argmin(free[best])]),)
