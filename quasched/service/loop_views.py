"""What the service's loop hands out: the jobs changed and events since the last drain (to
persist), time-series samples, GPU allocation, fragmentation (cluster and per node, for the current
typical pods), the snapshot and the queue status the API and dashboard show."""

from __future__ import annotations

from typing import Any

import numpy as np

from quasched.metrics.allocation import percent
from quasched.metrics.fragmentation import FragReport, StateTable, cluster_fragmentation, frag_amount, state_table
from quasched.metrics.typical import TypicalWindow
from quasched.model.workload import FULL_GPU_MILLI
from quasched.service import status
from quasched.service.domain import Event, Job, JobState
from quasched.service.loop_state import LoopState


class LoopViews(LoopState):
    """Changes to persist and the views of the state (mixed into :class:`~.controller.Controller`)."""

    def drain_changes(self) -> tuple[list[Job], list[Event]]:
        """Jobs changed and events since the last drain (finished jobs leave memory here)."""
        jobs, events = list(self._changed.values()), self._events
        self._changed, self._events = {}, []
        for job in jobs:
            if job.state.finished:
                self.jobs.pop(job.id, None)
        return jobs, events

    def _sample(self, now: float) -> None:
        if self.samples and now - self.samples[-1][0] < self.options.sample_s:
            return
        frag = self.fragmentation()
        pending = sum(1 for j in self.jobs.values() if j.state == JobState.PENDING)
        self.samples.append((now, self.gpu_allocation(), frag, pending))

    def gpu_allocation(self) -> float:
        """Allocated GPU milli as % of the cluster's GPUs."""
        return percent(self.cluster.gpu_allocated, FULL_GPU_MILLI * self.cluster.total_gpus)

    def _table(self) -> StateTable | None:
        """The fragmentation table of the current typical pods (None before any is known)."""
        typical = self.typical.current if isinstance(self.typical, TypicalWindow) else self.typical
        return None if typical is None else state_table(self.cluster, typical)

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
            return np.zeros(self.cluster.n_nodes)
        ids = table.ids()
        return frag_amount(table.vectors[ids])

    def snapshot(self) -> dict[str, Any]:
        """Per node: GPU model, cordon, per-device used milli and health, CPU/memory use, jobs; and totals."""
        return status.snapshot(self)

    def queue_status(self) -> list[dict[str, Any]]:
        """Per queue: quota, cohort, GPUs used and borrowed, fair share, pending and running jobs."""
        return status.queue_status(self)
