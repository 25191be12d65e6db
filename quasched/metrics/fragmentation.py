"""GPU fragmentation relative to a workload's typical pods (Weng et al., ATC'23).

A node's idle GPU milli is split into seven categories by asking, for each
typical pod shape, whether the node could host it. Everything except
``q3_satisfied`` counts as fragment. The float operation order follows the
reference simulator exactly (per-category sums in typical-pod order, then the
categories in index order), so results match it bit for bit.

Node fragmentation is a pure function of ``(GPU model, free CPU, multiset of
free GPU milli)``; :class:`StateTable` interns those node states so each is
evaluated once per run. The typical pods themselves are in :mod:`.typical` (:class:`TypicalPods`,
also importable from here).
"""

from __future__ import annotations

import importlib
import os
import warnings
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Iterable

import numpy as np

from quasched.metrics import frag_aot
from quasched.metrics.frag_categories import NA, Q1, Q2, Q4, XL, XR
from quasched.metrics.typical import TypicalPods
from quasched.model.cluster import Cluster
from quasched.model.nodes import accessible
from quasched.model.resources import CPU, MEMORY
from quasched.model.workload import Pod

_FRAG_ORDER = (Q1, Q2, Q4, XL, XR, NA)


class FragmentationModel:
    """Vectorised node fragmentation for one set of typical pods and GPU models."""

    def __init__(self, typical: TypicalPods, models: tuple[str, ...]) -> None:
        self.typical = typical
        shapes = typical.shapes
        self.t_cpu = np.array([s[0] for s in shapes], dtype=np.int64)
        self.t_milli = np.array([s[1] for s in shapes], dtype=np.int64)
        self.t_count = np.array([s[2] for s in shapes], dtype=np.int64)
        self.freq = np.ascontiguousarray(typical.freq, dtype=np.float64)
        self.access = np.array([[accessible(m, s[3]) for s in shapes] for m in models], dtype=bool)
        self._tables = (self.t_cpu, self.t_milli, self.t_count, self.freq, self.access)

    def vectors(self, cpu: np.ndarray, gpu: np.ndarray, model: np.ndarray) -> np.ndarray:
        """Category vectors ``(S, 7)`` in milli-GPU for node states ``(cpu, gpu[S, D], model)``.

        A GPU shape that fits counts the idle milli of the devices it fits in as satisfied
        and the rest as ``q2_lack_gpu``; every other shape counts all idle milli in its
        category; CPU-only shapes count it as ``xl``/``xr``. Each category sums the
        frequency-weighted amounts in typical-pod order (the reference's order;
        compiled: :func:`kernels`).
        """
        return kernels().vectors(_ints(cpu), _ints(gpu), _ints(model), *self._tables)

    def deltas(self, cpu: np.ndarray, gpu: np.ndarray, model: np.ndarray, before: np.ndarray,
               pod: Pod) -> np.ndarray:
        """Fragmentation decrease ``before - amount(after)`` of placing ``pod`` on states
        ``(cpu, gpu[S, D] ascending, model)`` whose amounts are ``before``: ``(S, D)`` per distinct
        fitting device column for a sharing pod (NaN elsewhere), else ``(S, 1)``."""
        return kernels().deltas(_ints(cpu - pod.cpu_milli), _ints(gpu), _ints(model),
                                  np.asarray(before, dtype=np.float64), pod.gpu_milli, pod.num_gpu, pod.is_sharing,
                                  *self._tables)


@cache
def kernels() -> ModuleType:
    """The compiled kernels: the ahead-of-time module built for this source when there is one
    (:mod:`quasched.metrics.frag_aot`: no numba at run time) unless :func:`jit_forced`, else
    :mod:`quasched.metrics.frag_kernel`, imported on first use so numba loads only when a run
    needs it (and compiles the kernels once per installation, cached in ``__pycache__``)."""
    if not jit_forced():
        try:
            return importlib.import_module(f"quasched.metrics.{frag_aot.module_name()}")
        except ImportError:
            pass
    from quasched.metrics import frag_kernel

    return frag_kernel


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def jit_forced() -> bool:
    """Whether ``QUASCHED_JIT`` asks for the JIT kernels (1/true/yes/on, any case). Any other value
    than those or 0/false/no/off/empty is ignored with a warning naming it, not read as true."""
    value = os.environ.get("QUASCHED_JIT", "")
    word = value.strip().lower()
    if word in _TRUE:
        return True
    if word not in _FALSE:
        warnings.warn(f"QUASCHED_JIT={value!r} is ignored: write 1 (force the JIT) or 0 (the default)",
                      stacklevel=2)
    return False


def _ints(values: np.ndarray) -> np.ndarray:
    """``values`` as a C-contiguous int64 array (what the kernels are compiled for)."""
    return np.ascontiguousarray(values, dtype=np.int64)


def frag_amount(vectors: np.ndarray) -> np.ndarray:
    """Sum of the fragment categories, in the reference order."""
    total = np.zeros(vectors.shape[:-1])
    for category in _FRAG_ORDER:
        total = total + vectors[..., category]
    return total


class NodeStates:
    """Interns node states of one cluster: (GPU model, free CPU[, free memory], sorted free GPU milli).

    ``ids()`` returns the state id of every node slot, re-interning only nodes
    changed since the last call (:meth:`Cluster.changes_since`). Arrays ``model_id``, ``cpu``, ``mem``
    (0 unless ``with_memory``) and ``gpu`` (``(S, D)``, ascending) hold the
    states; they grow by doubling, so interning stays amortised O(1) per state.
    The table is bounded: past ``max_states`` states, or when the cluster's
    layout (node slots, devices, GPU models) changes, it starts over and
    ``generation`` increments, so caches keyed by state id must check it.
    """

    def __init__(self, cluster: Cluster, with_memory: bool = False, max_states: int = 1 << 18) -> None:
        self.cluster = cluster
        self.with_memory = with_memory
        self.max_states = max_states
        self.generation = 0
        self._reset()

    def _reset(self) -> None:
        c = self.cluster
        self.layout = c.layout
        self._index: dict[tuple[int, ...], int] = {}
        self._pending: list[tuple[int, ...]] = []
        self._keys = np.zeros((0, 3 + c.max_devices), dtype=np.int64)  # model, cpu, mem, gpu..., capacity rows
        self._node_ids = np.full(c.n_nodes, -1, dtype=np.int64)
        self._mark = -1  # the cluster's change mark when ids were last brought up to date
        self.generation += 1

    def __len__(self) -> int:
        return len(self._index)

    @property
    def model_id(self) -> np.ndarray:
        return self._keys[: len(self), 0]

    @property
    def cpu(self) -> np.ndarray:
        return self._keys[: len(self), 1]

    @property
    def mem(self) -> np.ndarray:
        return self._keys[: len(self), 2]

    @property
    def gpu(self) -> np.ndarray:
        return self._keys[: len(self), 3:]

    def _on_new(self, keys: np.ndarray) -> None:
        """Hook for subclasses: states ``keys`` rows were just appended."""

    def _flush(self) -> None:
        """Store the pending new states (doubling the capacity when full) and call :meth:`_on_new`."""
        if not self._pending:
            return
        keys = np.array(self._pending, dtype=np.int64)
        self._pending.clear()
        start = len(self) - len(keys)
        if len(self) > len(self._keys):
            self._keys = grow(self._keys, len(self))
        self._keys[start: len(self)] = keys
        self._on_new(keys)

    def _intern(self, keys: Iterable[tuple[int, ...]]) -> list[int]:
        """Ids of state ``keys``; new ones are appended."""
        index, pending, ids = self._index, self._pending, []
        for key in keys:
            state = index.get(key)
            if state is None:
                state = index[key] = len(index)
                pending.append(key)
            ids.append(state)
        self._flush()
        return ids

    def ids(self) -> np.ndarray:
        """State id of every node slot (read-only view)."""
        c = self.cluster
        if c.layout != self.layout or len(self._index) > self.max_states:
            self._reset()
        stale = c.changes_since(self._mark)
        self._mark = c.change_mark
        if stale is None:
            stale = list(range(c.n_nodes))
        if stale:
            model, gpu, cpu, mem = c.model_id, c.gpu_free, c.free[:, CPU], c.free[:, MEMORY]
            memory = self.with_memory
            self._node_ids[stale] = self._intern(
                (int(model[node]), int(cpu[node]), int(mem[node]) if memory else 0, *sorted(gpu[node].tolist()))
                for node in stale)
        return self._node_ids


def grow(values: np.ndarray, rows: int) -> np.ndarray:
    """``values`` copied into an array of at least ``rows`` rows (twice as many: amortised growth)."""
    grown = np.zeros((max(2 * rows, 64), *values.shape[1:]), dtype=values.dtype)
    grown[: len(values)] = values
    return grown


class StateTable(NodeStates):
    """:class:`NodeStates` (without memory) plus each state's fragmentation vector and amount."""

    def __init__(self, cluster: Cluster, typical: TypicalPods, max_states: int = 1 << 18, fold_block: int = 64) -> None:
        self.typical = typical
        self.fold_block = fold_block
        super().__init__(cluster, with_memory=False, max_states=max_states)

    def _reset(self) -> None:
        super()._reset()
        self.model = FragmentationModel(self.typical, tuple(self.cluster.models))
        self._vectors = np.zeros((0, 7))
        self._amount = np.zeros(0)
        self._blocks_key: tuple[int, int] | None = None  # (generation, slots) the block folds belong to
        self._fold_mark = -1  # the cluster's change mark at the last fold
        self._slot_vectors = np.zeros((0, 7))

    @property
    def vectors(self) -> np.ndarray:
        return self._vectors[: len(self)]

    @property
    def amount(self) -> np.ndarray:
        return self._amount[: len(self)]

    def category_totals(self) -> np.ndarray:
        """Sum of every node slot's vector, folded node by node in slot order (the reference's
        float order). Keeps the running fold at every ``fold_block``-th slot and refolds only from
        the block of the first slot changed since the last call, so one placement costs half a
        fold of adds on average and a store per block, not per slot; the fold reads a copy of the
        slots' vectors in slot order, refreshed at the changed slots only."""
        ids = self.ids()  # may grow the table, so before reading its arrays
        if not len(ids):
            return np.zeros(7)
        changed = self.cluster.changes_since(self._fold_mark) if self._blocks_key == (self.generation, len(ids)) else None
        self._fold_mark = self.cluster.change_mark
        if changed is None:
            self._blocks_key = (self.generation, len(ids))
            self._blocks = np.zeros((-(-len(ids) // self.fold_block), 7))
            self._slot_vectors = self._vectors[ids]  # each slot's vector, in slot order: the fold reads it in a stream
        elif not changed:
            return self._blocks[-1]
        else:
            self._slot_vectors[changed] = self._vectors[ids[changed]]
        kernels().refold(self._blocks, self._slot_vectors, changed[0] if changed else 0, self.fold_block)
        return self._blocks[-1]

    def _on_new(self, keys: np.ndarray) -> None:
        if len(self) > len(self._vectors):
            self._vectors, self._amount = grow(self._vectors, len(self)), grow(self._amount, len(self))
        vectors = self.model.vectors(keys[:, 1], keys[:, 3:], keys[:, 0])
        self._vectors[len(self) - len(keys): len(self)] = vectors
        self._amount[len(self) - len(keys): len(self)] = kernels().amounts(vectors)


def node_states(cluster: Cluster, with_memory: bool = False) -> NodeStates:
    """The shared :class:`NodeStates` of ``cluster``, kept in ``cluster.caches``: the score plugins that
    memoise by node state intern each changed node once between them, not once each."""
    per_cluster = cluster.caches.setdefault("node_states", {})
    states = per_cluster.get(with_memory)
    if states is None:
        states = per_cluster[with_memory] = NodeStates(cluster, with_memory)
    return states


#: state tables kept per cluster, the most recently made (typical pods learned online are rebuilt as they drift)
MAX_TABLES = 4


def state_table(cluster: Cluster, typical: TypicalPods) -> StateTable:
    """The shared :class:`StateTable` of ``cluster`` for ``typical`` pods.

    Kept on the cluster itself (``cluster.caches``), so it lives and dies with it; the oldest of more than
    :data:`MAX_TABLES` is dropped.
    """
    per_cluster = cluster.caches.setdefault("state_tables", {})
    table = per_cluster.get(id(typical))
    if table is None or table.typical is not typical:
        per_cluster.pop(id(typical), None)
        table = per_cluster[id(typical)] = StateTable(cluster, typical)
        while len(per_cluster) > MAX_TABLES:
            del per_cluster[next(iter(per_cluster))]
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
    categories = table.category_totals().copy()
    values = categories.tolist()  # Python floats: the same IEEE sums as frag_amount, less overhead
    idle = frag = 0.0
    for value in values:
        idle += value
    for category in _FRAG_ORDER:
        frag += values[category]
    return FragReport(categories, idle, frag)
