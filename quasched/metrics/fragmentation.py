"""GPU fragmentation relative to a workload's typical pods (Weng et al., ATC'23).

A node's idle GPU milli is split into seven categories by asking, for each
typical pod shape, whether the node could host it. Everything except
``q3_satisfied`` counts as fragment. The float operation order follows the
reference simulator exactly (per-category sums in typical-pod order, then the
categories in index order), so results match it bit for bit.

Node fragmentation is a pure function of ``(GPU model, free CPU, multiset of
free GPU milli)``; :class:`StateTable` interns those node states so each is
evaluated once per run.
"""

from __future__ import annotations

import weakref
from collections import Counter
from dataclasses import dataclass

import numpy as np

from quasched.model.cluster import Cluster, accessible
from quasched.model.workload import Workload, shape_keys

CATEGORIES = (
    "q1_lack_both", "q2_lack_gpu", "q3_satisfied", "q4_lack_cpu",
    "xl_satisfied", "xr_lack_cpu", "no_access",
)
Q1, Q2, Q3, Q4, XL, XR, NA = range(7)
_FRAG_ORDER = (Q1, Q2, Q4, XL, XR, NA)
_CHUNK = 2048

Shape = tuple[int, int, int, str]


@dataclass(frozen=True)
class TypicalPods:
    """The most popular pod shapes covering ``threshold`` % of a workload."""

    shapes: tuple[Shape, ...]
    counts: tuple[int, ...]
    freq: np.ndarray

    @classmethod
    def from_workload(cls, workload: Workload, threshold: float = 95.0,
                      include_cpu_pods: bool = True) -> "TypicalPods":
        """Popularity ranking of shapes ``(cpu, gpu_milli, num_gpu, gpu_spec)``.

        Ties in count are broken by the shape itself, descending, which makes
        the order total and deterministic.
        """
        keys = [k for k in shape_keys(workload) if include_cpu_pods or k[1] > 0]
        if not keys:
            raise ValueError("cannot derive typical pods from an empty workload")
        ranked = sorted(Counter(keys).items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        total = len(keys)
        expected = (threshold * total) / 100.0
        cum, kept = 0, 0
        while cum < expected and kept < len(ranked):
            cum += ranked[kept][1]
            kept += 1
        counts = [c for _, c in ranked[:kept]]
        if kept == len(ranked):
            freq = [c / total for c in counts]
        else:
            freq = [(c / total) / (cum / total) for c in counts]
        return cls(tuple(s for s, _ in ranked[:kept]), tuple(counts), np.asarray(freq))


class FragmentationModel:
    """Vectorised node fragmentation for one set of typical pods and GPU models."""

    def __init__(self, typical: TypicalPods, models: tuple[str, ...]) -> None:
        self.typical = typical
        shapes = typical.shapes
        self.t_cpu = np.array([s[0] for s in shapes], dtype=np.int64)
        self.t_milli = np.array([s[1] for s in shapes], dtype=np.int64)
        self.t_count = np.array([s[2] for s in shapes], dtype=np.int64)
        self.freq = typical.freq
        self.access = np.array([[accessible(m, s[3]) for s in shapes] for m in models], dtype=bool)

    def vectors(self, cpu: np.ndarray, gpu: np.ndarray, model: np.ndarray) -> np.ndarray:
        """Category vectors ``(S, 7)`` in milli-GPU for node states ``(cpu, gpu[S, D], model)``."""
        if len(cpu) > _CHUNK:
            return np.concatenate([
                self.vectors(cpu[i:i + _CHUNK], gpu[i:i + _CHUNK], model[i:i + _CHUNK])
                for i in range(0, len(cpu), _CHUNK)
            ])
        n_states, n_shapes = len(cpu), len(self.freq)
        idle = gpu.sum(axis=1)
        fits = gpu[:, None, :] >= self.t_milli[None, :, None]
        gpu_ok = fits.sum(axis=2) >= self.t_count[None, :]
        too_small = np.where(fits, 0, gpu[:, None, :]).sum(axis=2)
        cpu_ok = cpu[:, None] >= self.t_cpu[None, :]
        category = np.where(
            gpu_ok,
            np.where(cpu_ok, Q3, Q4),
            np.where(cpu_ok, Q2, Q1),
        )
        category = np.where(self.access[model], category, NA)
        category = np.where(self.t_milli[None, :] == 0, np.where(cpu_ok, XL, XR), category)

        satisfied = category == Q3
        primary = self.freq[None, :] * np.where(satisfied, idle[:, None] - too_small, idle[:, None])
        contrib = np.zeros((n_states, n_shapes, 7))
        rows, cols = np.indices((n_states, n_shapes))
        contrib[rows, cols, category] = primary
        contrib[:, :, Q2] += np.where(satisfied, self.freq[None, :] * too_small, 0.0)
        return np.cumsum(contrib, axis=1)[:, -1, :]

    def amount(self, cpu: np.ndarray, gpu: np.ndarray, model: np.ndarray) -> np.ndarray:
        """Fragment milli-GPU (all categories but ``q3_satisfied``) per node state."""
        return frag_amount(self.vectors(cpu, gpu, model))


def frag_amount(vectors: np.ndarray) -> np.ndarray:
    """Sum of the fragment categories, in the reference order."""
    total = np.zeros(vectors.shape[:-1])
    for category in _FRAG_ORDER:
        total = total + vectors[..., category]
    return total


class StateTable:
    """Interns node states of one cluster and memoises their fragmentation.

    ``ids()`` returns the state id of every node, refreshing only nodes whose
    :attr:`Cluster.version` changed since the last call.
    """

    def __init__(self, cluster: Cluster, model: FragmentationModel) -> None:
        self.cluster = cluster
        self.model = model
        self._index: dict[tuple[int, ...], int] = {}
        self._pending: list[tuple[int, ...]] = []
        self.cpu = np.zeros(0, dtype=np.int64)
        self.gpu = np.zeros((0, cluster.max_devices), dtype=np.int64)
        self.model_id = np.zeros(0, dtype=np.int64)
        self.vectors = np.zeros((0, 7))
        self.amount = np.zeros(0)
        self._node_ids = np.full(cluster.n_nodes, -1, dtype=np.int64)
        self._seen = np.full(cluster.n_nodes, -1, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.cpu)

    def _intern(self, node: int) -> int:
        c = self.cluster
        key = (int(c.model_id[node]), int(c.cpu_free[node]), *sorted(c.gpu_free[node].tolist()))
        state = self._index.get(key)
        if state is None:
            state = len(self._index)
            self._index[key] = state
            self._pending.append(key)
        return state

    def _flush(self) -> None:
        if not self._pending:
            return
        keys = np.array(self._pending, dtype=np.int64)
        self._pending.clear()
        model, cpu, gpu = keys[:, 0], keys[:, 1], keys[:, 2:]
        vectors = self.model.vectors(cpu, gpu, model)
        self.cpu = np.concatenate([self.cpu, cpu])
        self.gpu = np.concatenate([self.gpu, gpu])
        self.model_id = np.concatenate([self.model_id, model])
        self.vectors = np.concatenate([self.vectors, vectors])
        self.amount = np.concatenate([self.amount, frag_amount(vectors)])

    def ids(self) -> np.ndarray:
        """State id of every node of the cluster (read-only view)."""
        stale = np.flatnonzero(self._seen != self.cluster.version)
        for node in stale.tolist():
            self._node_ids[node] = self._intern(node)
        self._seen[stale] = self.cluster.version[stale]
        self._flush()
        return self._node_ids


_TABLES: "weakref.WeakKeyDictionary[Cluster, dict[int, StateTable]]" = weakref.WeakKeyDictionary()


def state_table(cluster: Cluster, typical: TypicalPods) -> StateTable:
    """The shared :class:`StateTable` of ``cluster`` for ``typical`` pods."""
    per_cluster = _TABLES.setdefault(cluster, {})
    table = per_cluster.get(id(typical))
    if table is None or table.model.typical is not typical:
        table = StateTable(cluster, FragmentationModel(typical, cluster.models))
        per_cluster[id(typical)] = table
    return table


@dataclass(frozen=True)
class FragReport:
    """Cluster-wide fragmentation (milli-GPU) after some event."""

    categories: np.ndarray
    idle_milli: float
    frag_milli: float

    @property
    def frag_ratio(self) -> float:
        """Fragment share of idle GPU milli, in percent."""
        return 100.0 * self.frag_milli / self.idle_milli if self.idle_milli else 0.0

    @property
    def q124_ratio(self) -> float:
        c = self.categories
        return 100.0 * (c[Q1] + c[Q2] + c[Q4]) / self.idle_milli if self.idle_milli else 0.0


def cluster_fragmentation(table: StateTable) -> FragReport:
    """Fragmentation of the whole cluster, from the memoised node states."""
    ids = table.ids()  # may grow the table, so before reading its arrays
    categories = table.vectors[ids].sum(axis=0)
    idle = 0.0
    for value in categories:
        idle += value
    return FragReport(categories, idle, float(frag_amount(categories)))
