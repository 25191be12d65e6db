"""Per-pod-demand entries kept up to date from the cluster's change log.

The skeleton shared by the Filter's fit masks (:class:`~quasched.policies.filter.Feasibility`)
and the score boards (:class:`~quasched.policies.host_board.HostBoard`): an entry per demand key,
stamped with :attr:`Cluster.change_mark <quasched.model.cluster.Cluster.change_mark>`; on the
next lookup only the nodes changed since (:meth:`Cluster.changes_since
<quasched.model.cluster.Cluster.changes_since>`) need refreshing.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import numpy as np

from quasched.model.cluster import Cluster

Entry = TypeVar("Entry")


class DemandCache(Generic[Entry]):
    """Entries per demand key, each with the change mark it was last refreshed at.

    An entry more than ``max(64, n_nodes / 8)`` node changes old is to be rebuilt from scratch;
    past ``max_keys`` demands (or when the cluster's layout changes) all entries go.
    """

    def __init__(self, cluster: Cluster, max_keys: int) -> None:
        self.cluster = cluster
        self.max_keys = max_keys
        self._layout = cluster.layout
        self._entries: dict[tuple, tuple[Entry, int]] = {}

    def _lookup(self, key: tuple) -> tuple[Entry | None, np.ndarray | None]:
        """``key``'s entry (None if absent) and the nodes changed since it was stored, ascending
        (None: rebuild it)."""
        c = self.cluster
        if c.layout != self._layout or len(self._entries) > self.max_keys:
            self._entries.clear()
            self._layout = c.layout
        stored = self._entries.get(key)
        if stored is None:
            return None, None
        changed = c.changes_since(stored[1], limit=max(64, c.n_nodes // 8))
        return stored[0], None if changed is None else np.array(changed, dtype=np.int64)

    def _store(self, key: tuple, entry: Entry) -> None:
        """Keep ``entry`` for ``key``, refreshed up to now."""
        self._entries[key] = (entry, self.cluster.change_mark)
