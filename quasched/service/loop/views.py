"""What the service's loop shows of its state (:class:`Views`): time-series samples, GPU allocation and
fragmentation (cluster and per node, for the current typical pods)."""

from __future__ import annotations

from collections import deque

import numpy as np

from quasched.metrics.allocation import percent
from quasched.metrics.fragmentation import FragReport, StateTable, cluster_fragmentation, frag_amount, state_table
from quasched.metrics.typical import TypicalWindow
from quasched.model.workload import FULL_GPU_MILLI
from quasched.service.domain import JobState
from quasched.service.loop.state import LoopState


class Views:
    """The measures of ``state``'s cluster, and their samples (time, allocation %, fragmentation %, pending)."""

    def __init__(self, state: LoopState) -> None:
        self.state = state
        self.samples: deque[tuple[float, float, float, int]] = deque(maxlen=4096)

    def sample(self, now: float) -> None:
        """Take a sample if ``sample_s`` passed since the last one."""
        if self.samples and now - self.samples[-1][0] < self.state.options.sample_s:
            return
        frag = self.fragmentation()
        pending = sum(1 for j in self.state.jobs.values() if j.state == JobState.PENDING)
        self.samples.append((now, self.gpu_allocation(), frag, pending))

    def gpu_allocation(self) -> float:
        """Allocated GPU milli as % of the cluster's GPUs."""
        c = self.state.cluster
        return percent(c.gpu_allocated, FULL_GPU_MILLI * c.total_gpus)

    def _table(self) -> StateTable | None:
        """The fragmentation table of the current typical pods (None before any is known)."""
        typical = self.state.typical
        current = typical.current if isinstance(typical, TypicalWindow) else typical
        return None if current is None else state_table(self.state.cluster, current)

    def fragmentation_report(self) -> FragReport | None:
        """Fragmented and idle GPU milli for the current typical pods (None before any is known)."""
        table = self._table()
        return None if table is None else cluster_fragmentation(table)

    def fragmentation(self) -> float:
        """Fragmentation ratio (% of idle GPU milli) for the current typical pods (0 before any is known)."""
        report = self.fragmentation_report()
        return 0.0 if report is None else report.frag_ratio

    def node_fragmentation(self) -> np.ndarray:
        """Fragmented milli-GPU of every node slot (FGD's measure for the current typical pods)."""
        table = self._table()
        if table is None:
            return np.zeros(self.state.cluster.n_nodes)
        ids = table.ids()  # first: it may grow the table's vectors
        return frag_amount(table.vectors[ids])
