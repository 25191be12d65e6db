"""The dispatch rules of a federation, shared by the replay (:mod:`.engine`) and the live front (``quasched federate``).

A job's life as the rules see it: it *arrives* (the dispatcher names its cluster and the time it is released); at its
*release* the dispatcher may move or hold it, else the cluster's sites are asked in order (the dispatcher's cluster,
then its :meth:`~.Dispatcher.reroute` list) to start it now; if none does, it waits in its cluster's queue, unless no
node there could ever hold it (``View.placeable``): then it is dropped, never placed. It *starts* (at once, or later
from the queue) and *departs*. What a :class:`Site` is differs: a simulated cluster in the replay, a running cluster
behind its API in the front; the rules, and the :class:`~.View` they keep, are the same.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

import numpy as np

from quasched.federation.dispatch import Dispatcher, View
from quasched.model.cluster import Cluster
from quasched.model.workload import Pod


class Site(Protocol):
    """One member cluster as the rules use it."""

    #: its node-level state, which the dispatchers read (``View.nodes``)
    cluster: Cluster

    def place(self, pod: Pod, now: float) -> bool:
        """Start ``pod`` now if a node holds it; False: it did not start."""

    def wait(self, pod: Pod, now: float) -> None:
        """``pod`` joins the back of the cluster's queue."""


class Dispatching:
    """Per job: its cluster (-1: not arrived), release and start time (NaN: not yet); ``started(job, t)`` is called at
    every start (the replay schedules the departure)."""

    def __init__(self, dispatcher: Dispatcher, view: View, sites: Sequence[Site], jobs: int,
                 started: Callable[[int, float], None]) -> None:
        self.dispatcher, self.view, self.sites, self.started = dispatcher, view, sites, started
        self.cluster = np.full(jobs, -1, dtype=np.int64)
        self.released, self.placed = np.full(jobs, np.nan), np.full(jobs, np.nan)

    def grow(self, jobs: int) -> None:
        """Room for ``jobs`` jobs in all (the front's stream has no end)."""
        more = jobs - len(self.cluster)
        if more > 0:
            self.cluster = np.concatenate([self.cluster, np.full(more, -1, dtype=np.int64)])
            self.released = np.concatenate([self.released, np.full(more, np.nan)])
            self.placed = np.concatenate([self.placed, np.full(more, np.nan)])

    def arrive(self, job: int, now: float) -> float:
        """The dispatcher's decision on ``job`` arriving at ``now``; returns when it is released (``>= now``)."""
        cluster, when = self.dispatcher.dispatch(job, now)
        self.cluster[job] = cluster
        return max(when, now)

    def release(self, job: int, now: float) -> float | None:
        """``job``'s release at ``now`` (module docstring); returns when it is released again if the dispatcher holds
        it, else None (it started, waits in its cluster's queue, or was dropped)."""
        cluster, when = self.dispatcher.release(job, now, int(self.cluster[job]))
        self.cluster[job] = cluster
        if when > now:
            return when
        self.released[job] = now
        pod = self.view.pod(job)
        on = next((c for c in (cluster, *self.dispatcher.reroute(job, now, cluster)) if self.sites[c].place(pod, now)),
                  None)
        if on is not None:
            self.cluster[job] = on
            self.start(job, now)
        elif self.view.placeable[job, cluster]:
            self.sites[cluster].wait(pod, now)
            self.view.enqueue(cluster, job)
        return None

    def start(self, job: int, now: float) -> None:
        """``job`` started at ``now`` on its cluster (after :meth:`dequeue` if it waited)."""
        self.placed[job] = now
        self.view.used[:, self.cluster[job]] += self.view.demand[:, job]
        self.started(job, now)

    def dequeue(self, job: int, now: float) -> None:
        """``job``, waiting in its cluster's queue, started at ``now``."""
        self.view.dequeue(int(self.cluster[job]), job)
        self.start(job, now)

    def depart(self, job: int) -> int:
        """``job`` ended; returns its cluster."""
        cluster = int(self.cluster[job])
        self.view.used[:, cluster] -= self.view.demand[:, job]
        return cluster
