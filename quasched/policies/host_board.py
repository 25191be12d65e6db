"""Host selection without a pass over every feasible node: per pod demand, a score board kept up to date.

For a plugin whose node scores depend only on the node and the pod
(:meth:`ScorePlugin.epoch <quasched.policies.base.ScorePlugin.epoch>` not None),
the board of a pod demand holds every node's best score at the position of its
tie-break rank, ``-inf`` where the pod does not fit. Between two pods of that
demand only the nodes changed since
(:meth:`Cluster.changes_since <quasched.model.cluster.Cluster.changes_since>`) are
re-scored, and the host is the first maximum of the board: the highest score,
ties to the smallest rank, exactly :meth:`Scheduler.select
<quasched.policies.framework.Scheduler.select>`.
"""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.workload import Pod
from quasched.policies.base import CycleState, ScorePlugin
from quasched.policies.demand_cache import DemandCache


class HostBoard(DemandCache[tuple[np.ndarray, object]]):
    """Score boards per pod demand key (module docstring), kept as a
    :class:`~quasched.policies.demand_cache.DemandCache`; a board of another epoch is rebuilt."""

    def __init__(self, cluster: Cluster, max_keys: int = 256) -> None:
        super().__init__(cluster, max_keys)
        self._rank = self._order = np.zeros(0, dtype=np.int64)

    def pick(self, plugin: ScorePlugin, epoch: object, pod: Pod, key: tuple, mask: np.ndarray,
             rank: np.ndarray) -> int | None:
        """The host among the nodes of ``mask`` (``pod``'s fit mask, demand ``key``), None when every
        score is ``-inf`` (the board cannot tell a fitting node from the others then)."""
        c = self.cluster
        if rank is not self._rank:
            self._rank, self._order = rank, np.argsort(rank)
        entry, changed = self._lookup(key)
        if entry is None or changed is None or entry[1] is not epoch:
            board, rows = np.full(c.n_nodes, -np.inf), np.flatnonzero(mask)
        else:
            board, rows = entry[0], changed
            board[rank[rows]] = -np.inf
            rows = rows[mask[rows]]
        if len(rows):
            board[rank[rows]] = plugin.best(c, pod, rows, CycleState())
        self._store(key, (board, epoch))
        top = int(np.argmax(board))
        return int(self._order[top]) if board[top] > -np.inf else None
