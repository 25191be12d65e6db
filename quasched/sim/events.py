"""Building blocks of the time-based replay (:mod:`quasched.sim.replay`).

- :func:`build_timeline` turns a workload's creation/deletion columns into
  arrival and departure times (skipping rows without a creation time, giving
  rows without a deletion time the end of the trace).
- :class:`FitClasses` groups pods whose *feasibility* is identical (every
  field the Filter step reads) and tests whole classes against a few nodes at
  once, vectorised. It mirrors :func:`quasched.policies.filter.feasible_mask`
  exactly; the replay uses it only as a guard that decides which queued pods
  are worth a full scheduling cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from quasched.model.cluster import MAX_PODS_PER_NODE, Cluster
from quasched.model.workload import NO_LIMIT, Workload

MissingCreation = Literal["skip", "start"]


@dataclass(frozen=True)
class Timeline:
    """When each workload row arrives and when its trace says it leaves.

    ``arrival``/``deletion`` are per row (NaN for skipped rows); ``order``
    lists the replayed rows by arrival time, ties in file order.
    """

    arrival: np.ndarray
    deletion: np.ndarray
    order: np.ndarray
    skipped: np.ndarray
    start: float
    end: float

    @property
    def n_skipped(self) -> int:
        return int(self.skipped.sum())


def build_timeline(workload: Workload, missing_creation: MissingCreation = "skip") -> Timeline:
    """Arrival and departure times of every row of ``workload``.

    - The trace ends at ``end``, the latest finite creation or deletion time
      of any row (skipped rows included), and starts at
      ``start = min(0, earliest finite time)``.
    - A row without a creation time is skipped (``missing_creation="skip"``,
      the default) or arrives at ``start`` (``"start"``: it was already running
      when the trace began).
    - A row without a deletion time leaves at ``end``; a deletion time before
      the creation time is raised to the creation time (zero lifetime).
    """
    creation = np.asarray(workload.creation_time, dtype=float)
    deletion = np.asarray(workload.deletion_time, dtype=float)
    finite = np.concatenate([creation[np.isfinite(creation)], deletion[np.isfinite(deletion)]])
    end = float(finite.max()) if len(finite) else 0.0
    start = min(0.0, float(finite.min())) if len(finite) else 0.0
    missing = ~np.isfinite(creation)
    if missing_creation == "skip":
        skipped = missing
        arrival = np.where(missing, np.nan, creation)
    elif missing_creation == "start":
        skipped = np.zeros(len(creation), dtype=bool)
        arrival = np.where(missing, start, creation)
    else:
        raise ValueError(f"unknown missing_creation {missing_creation!r}; use 'skip' or 'start'")
    leave = np.where(np.isfinite(deletion), deletion, end)
    leave = np.where(skipped, np.nan, np.maximum(leave, arrival))
    rows = np.flatnonzero(~skipped)
    order = rows[np.argsort(arrival[rows], kind="stable")]
    return Timeline(arrival, leave, order, skipped, start, end)


class FitClasses:
    """Pods grouped by everything the Filter step looks at.

    Two pods of one class are feasible on exactly the same nodes in any
    cluster state: same CPU, memory, RDMA, disk, GPU count, milli and model
    constraint, and (for apps with a per-node limit) the same app and limit.
    """

    def __init__(self, workload: Workload, cluster: Cluster) -> None:
        specs, spec_id = np.unique(workload.gpu_spec.astype(str), return_inverse=True)
        limited = (workload.app >= 0) & (workload.max_per_node != NO_LIMIT)
        key = np.stack([
            workload.cpu_milli, workload.memory_mib, workload.rdma, workload.disk_mib,
            workload.num_gpu, workload.gpu_milli, spec_id.astype(np.int64),
            np.where(limited, workload.app, -1), np.where(limited, workload.max_per_node, NO_LIMIT),
        ], axis=1).astype(np.int64)
        if len(key):
            uniq, inverse = np.unique(key, axis=0, return_inverse=True)
        else:
            uniq, inverse = np.zeros((0, key.shape[1]), dtype=np.int64), np.zeros(0, dtype=np.int64)
        #: class of each workload row
        self.of_pod = inverse.reshape(-1).astype(np.int64)
        (self.cpu, self.mem, self.rdma, self.disk, self.num_gpu, self.milli, spec,
         self.app, self.max_per_node) = uniq.T
        self.limited = self.app >= 0
        self.is_gpu = self.milli > 0
        spec_masks = np.array([cluster.spec_mask(str(s)) for s in specs]).reshape(len(specs), -1)
        self.spec_ok = spec_masks[spec] if len(uniq) else np.zeros((0, cluster.n_nodes), dtype=bool)

    def __len__(self) -> int:
        return len(self.cpu)

    def fits(self, cluster: Cluster, classes: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """``(len(classes), len(nodes))``: can a pod of each class go on each node now."""
        c = classes[:, None]
        ok = self.cpu[c] <= cluster.cpu_free[nodes]
        ok &= self.mem[c] <= cluster.mem_free[nodes]
        ok &= self.rdma[c] <= cluster.rdma_free[nodes]
        ok &= self.disk[c] <= cluster.disk_free[nodes]
        ok &= cluster.pod_count[nodes] < MAX_PODS_PER_NODE
        limited = self.limited[classes]
        if limited.any():
            apps = np.maximum(self.app[classes], 0)
            count = cluster.app_count[np.ix_(nodes, apps)].T
            ok &= ~limited[:, None] | (count < self.max_per_node[c])
        is_gpu = self.is_gpu[classes]
        if is_gpu.any():
            free = cluster.gpu_free[nodes]
            n_fit = (free[None, :, :] >= self.milli[c][:, :, None]).sum(axis=2)
            gpu_ok = self.spec_ok[np.ix_(classes, nodes)] & (n_fit >= self.num_gpu[c])
            ok &= ~is_gpu[:, None] | gpu_ok
        return ok
