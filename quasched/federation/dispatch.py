"""The dispatcher interface: which cluster runs a job, and from when it may start.

A :class:`Dispatcher` sees the federation through a :class:`View` (capacities, what runs and
waits where, the hourly intensity × PUE of every zone over the horizon and the week before it,
every job's request, duration, latest start and dynamic power per cluster) and answers each
arrival with a :class:`Decision`. The engine releases the job to that cluster's own scheduler at
``start``; if it does not fit then, it waits in that cluster's FIFO queue. Durations are known in
advance (as for the oracle); which hours of intensity a dispatcher reads is its own contract:
the online ones read the current hour and the past (:mod:`.forecast`), the offline oracle all of it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, ClassVar, NamedTuple, Sequence

import numpy as np

from quasched.metrics.power import SECONDS_PER_HOUR
from quasched.model.cluster import Cluster
from quasched.model.workload import Pod


#: granularity of deferred starts, of the carbon-aware ledger and of the oracle's capacity rows, s
SLOT_S = 900.0
SLOTS_PER_HOUR = int(SECONDS_PER_HOUR // SLOT_S)


def integral(hourly: np.ndarray, prefix: np.ndarray, clusters: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``hourly`` (``(clusters, hours)`` from ``t = 0``) integrated from 0 to ``t`` s on ``clusters`` (broadcast), ×
    hours; ``prefix``: its cumulative sums with a leading 0; past the last hour its value continues."""
    pos = np.asarray(t, dtype=float) / SECONDS_PER_HOUR
    hour = np.clip(np.floor(pos), 0, hourly.shape[1] - 1).astype(np.int64)
    return prefix[clusters, hour] + (pos - hour) * hourly[clusters, hour]


class Decision(NamedTuple):
    cluster: int
    start: float


@dataclass
class View:
    """What dispatchers may read. Resources are GPU and CPU milli, axis 0 of the ``(2, clusters)`` arrays;
    ``intensity``: ``(clusters, hours)`` from ``t = 0``, ``history``: the ``HISTORY_H`` hours before;
    ``placeable``: ``(jobs, clusters)``, can the job ever run there (some node fits it when empty); ``queued`` and
    ``waiting``: per cluster the jobs in its queue and their demand (the engine keeps them through :meth:`enqueue` and
    :meth:`dequeue`). Node level, set by the engine: ``nodes``, each cluster's live state (read only), and ``pod``, a
    job's pod."""

    capacity: np.ndarray
    demand: np.ndarray
    duration: np.ndarray
    latest_start: np.ndarray
    kw: np.ndarray
    intensity: np.ndarray
    history: np.ndarray
    placeable: np.ndarray
    used: np.ndarray = field(init=False)
    waiting: np.ndarray = field(init=False)
    queued: np.ndarray = field(init=False)
    prefix: np.ndarray = field(init=False)
    nodes: list[Cluster] = field(init=False, default_factory=list)
    pod: Callable[[int], Pod] = field(init=False)

    def __post_init__(self) -> None:
        clusters = self.capacity.shape[1]
        #: the week before and the horizon in one array: ``history`` and ``intensity`` are views of it, so a live front
        #: fills its hours in place as they are observed and every reader (the forecasts included) sees them
        self.series = np.hstack([self.history, self.intensity])
        self.history, self.intensity = self.series[:, :self.history.shape[1]], self.series[:, self.history.shape[1]:]
        self.used = np.zeros((2, clusters))
        self.waiting = np.zeros((2, clusters))
        self.queued = np.zeros(clusters, dtype=np.int64)
        self.prefix = np.hstack([np.zeros((clusters, 1)), np.cumsum(self.intensity, axis=1)])
        self.none = ~(self.capacity > 0)  # no such resource: a load of 0 if the job asks none, else infinite
        self.divisor = np.where(self.none, 1.0, self.capacity)

    def enqueue(self, cluster: int, job: int) -> None:
        """``job`` joins ``cluster``'s queue."""
        self.queued[cluster] += 1
        self.waiting[:, cluster] += self.demand[:, job]

    def dequeue(self, cluster: int, job: int) -> None:
        """``job`` left ``cluster``'s queue (it started)."""
        self.queued[cluster] -= 1
        self.waiting[:, cluster] -= self.demand[:, job]

    @property
    def slots(self) -> int:
        return self.intensity.shape[1] * SLOTS_PER_HOUR

    @property
    def clusters(self) -> int:
        return self.capacity.shape[1]

    def cumulative(self, clusters: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Intensity × PUE integrated from 0 to ``t`` s on ``clusters`` (broadcast), g/kWh × hours;
        past the horizon the last hour's value continues."""
        return integral(self.intensity, self.prefix, clusters, t)

    def run_grams(self, job: np.ndarray, cluster: np.ndarray, start: np.ndarray) -> np.ndarray:
        """Dynamic carbon of running ``job`` on ``cluster`` from ``start``, g (the job model of the oracle)."""
        end = start + self.duration[job]
        return self.kw[job, cluster] * (self.cumulative(cluster, end) - self.cumulative(cluster, start))

    def load_after(self, job: int) -> np.ndarray:
        """Per cluster: the larger of GPU and CPU (running + waiting + this job) / capacity, now; infinite
        where the job is not placeable."""
        need = self.used + self.waiting + self.demand[:, job, None]
        ratio = need / self.divisor
        if self.none.any():
            ratio[self.none] = np.where(need[self.none] > 0, np.inf, 0.0)
        return np.where(self.placeable[job], ratio.max(axis=0), np.inf)


class Dispatcher(ABC):
    """One decision per arriving job; :meth:`reset` before a run."""

    name: ClassVar[str]
    view: View

    def reset(self, view: View) -> None:
        self.view = view

    @abstractmethod
    def dispatch(self, job: int, now: float) -> Decision:
        """Cluster and start time (``>= now``; ``now`` = at once) of ``job``, arriving at ``now``."""

    def reroute(self, job: int, now: float, cluster: int) -> Sequence[int]:
        """Clusters to try, in order, when ``job`` released at ``now`` does not fit ``cluster`` (default: none,
        it queues there)."""
        return ()

    def release(self, job: int, now: float, cluster: int) -> Decision:
        """At ``job``'s release: where it starts and from when (default: ``cluster``, now); a later start releases
        it again then (a dispatcher that holds jobs re-decides here)."""
        return Decision(cluster, now)

    def first_with_room(self, job: int, order: np.ndarray) -> int:
        """The first cluster of ``order`` where ``job`` fits now with nobody waiting; else the least loaded."""
        load = self.view.load_after(job)
        ok = (load[order] <= 1) & (self.view.queued[order] == 0)
        return int(order[np.argmax(ok)]) if ok.any() else int(np.argmin(load))
