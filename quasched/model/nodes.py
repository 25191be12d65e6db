"""What a cluster is made of before anything runs: :class:`NodeSpec`, the static capacities of its
nodes (CPU, memory, GPUs and their model, RDMA, disk, labels, registered extra resources), and the
GPU-model constraint of a pod (``"A100|H100"``, empty = any) that decides which nodes' models it
accepts (:func:`accessible`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np

#: most GPUs one node may have (the cluster keeps a nodes × GPUs matrix: a typo such as 1e9 would exhaust memory)
MAX_NODE_GPUS = 64
#: what a GPU model name looks like wherever one is read (trace and cluster files, the API)
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
MODEL_NAME_HINT = "use letters, digits, '_', '.' and '-', starting with a letter or digit"


@lru_cache(maxsize=4096)
def spec_models(spec: str) -> tuple[str, ...]:
    """Allowed GPU models of a ``|``-separated constraint (empty tuple = any)."""
    return tuple(token for token in spec.split("|") if token)


def accessible(node_model: str, spec: str) -> bool:
    """Whether a node of GPU model ``node_model`` satisfies constraint ``spec``."""
    allowed = spec_models(spec)
    if not allowed:
        return True
    return node_model != "" and node_model in allowed


@dataclass(frozen=True)
class NodeSpec:
    """Static node capacities, one array entry per node.

    ``labels`` holds one ``dict[str, str]`` per node (None = no labels);
    ``extra`` the capacities of resources registered beyond the built-in ones,
    keyed by resource name.
    """

    name: np.ndarray
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    num_gpus: np.ndarray
    gpu_model: np.ndarray
    rdma: np.ndarray | None = None
    disk_mib: np.ndarray | None = None
    labels: np.ndarray | None = None
    extra: Mapping[str, np.ndarray] = field(default_factory=dict)
    source: str = ""

    def __len__(self) -> int:
        return len(self.name)

    @property
    def total_gpus(self) -> int:
        return int(self.num_gpus.sum())

    def take(self, rows: Sequence[int] | np.ndarray) -> NodeSpec:
        """The nodes at ``rows``, in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        pick = lambda a: None if a is None else np.asarray(a)[rows]  # noqa: E731
        return NodeSpec(
            name=self.name[rows], cpu_milli=self.cpu_milli[rows], memory_mib=self.memory_mib[rows],
            num_gpus=self.num_gpus[rows], gpu_model=self.gpu_model[rows], rdma=pick(self.rdma),
            disk_mib=pick(self.disk_mib), labels=pick(self.labels),
            extra={k: v[rows] for k, v in self.extra.items()}, source=self.source,
        )
