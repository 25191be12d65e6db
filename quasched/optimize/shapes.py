"""Pod shapes and node groups: the aggregated view the offline bounds and packings work on.

A *shape* is one distinct (CPU, memory, GPU count, milli per GPU, GPU spec) among
a workload's GPU pods; a *group* is the set of nodes with equal (CPU, memory,
GPU count, GPU model). CPU-only pods are left out: they add no GPU allocation.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from quasched.model.nodes import NodeSpec, accessible
from quasched.model.workload import Workload


@dataclass(frozen=True)
class Shapes:
    """The GPU pods of a workload by shape, shapes sorted; ``rows[s]`` are shape ``s``'s pods in workload order."""

    cpu: np.ndarray
    mem: np.ndarray
    k: np.ndarray
    m: np.ndarray
    spec: tuple[str, ...]
    rows: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, workload: Workload) -> Shapes:
        rows: dict[tuple, list[int]] = defaultdict(list)
        for i in np.flatnonzero(workload.gpu_milli > 0).tolist():
            key = (int(workload.cpu_milli[i]), int(workload.memory_mib[i]), int(workload.num_gpu[i]),
                   int(workload.gpu_milli[i]), str(workload.gpu_model[i]))
            rows[key].append(i)
        keys = sorted(rows)
        cpu, mem, k, m = (np.array([key[j] for key in keys], dtype=np.int64) for j in range(4))
        return cls(cpu, mem, k, m, tuple(key[4] for key in keys), tuple(np.array(rows[key]) for key in keys))

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def count(self) -> np.ndarray:
        return np.array([len(r) for r in self.rows], dtype=np.int64)

    @property
    def value(self) -> np.ndarray:
        """GPU milli of one pod of each shape."""
        return self.k * self.m


@dataclass(frozen=True)
class NodeGroups:
    """Nodes with equal capacities: ``cap`` (G, 3) = CPU, memory, GPUs; ``members[g]`` node indices, ascending."""

    cap: np.ndarray
    models: tuple[str, ...]
    members: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, nodes: NodeSpec) -> NodeGroups:
        members: dict[tuple, list[int]] = defaultdict(list)
        for i, key in enumerate(zip(nodes.cpu_milli.tolist(), nodes.memory_mib.tolist(), nodes.num_gpus.tolist(),
                                    [str(m) for m in nodes.gpu_model])):
            members[key].append(i)
        keys = sorted(members)
        return cls(np.array([key[:3] for key in keys], dtype=np.int64).reshape(-1, 3), tuple(key[3] for key in keys),
                   tuple(np.array(members[key]) for key in keys))

    @property
    def size(self) -> np.ndarray:
        return np.array([len(m) for m in self.members], dtype=np.int64)

    def fits(self, shapes: Shapes) -> np.ndarray:
        """(S, G): whether one pod of shape ``s`` fits an empty node of group ``g`` (model included)."""
        cap = self.cap
        return ((shapes.cpu[:, None] <= cap[None, :, 0]) & (shapes.mem[:, None] <= cap[None, :, 1])
                & (shapes.k[:, None] <= cap[None, :, 2])
                & np.array([[accessible(model, spec) for model in self.models] for spec in shapes.spec], dtype=bool)
                .reshape(len(shapes), len(self.models)))
