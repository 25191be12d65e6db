"""Federated replay: a dispatcher above one scheduler per cluster.

Each cluster is a :func:`~quasched.sim.engine.build_core` core (its own policy instance, tie-break
ranks from its own stream ``seed + index``) with a :class:`~quasched.policies.queue.PendingQueue`
and a :class:`~quasched.metrics.power.PowerMeter`. Events, in time order; at equal times
departures, then releases, then arrivals, each kind in job order:

- arrival: the dispatcher returns ``(cluster, start)``; the job is released at ``start``;
- release: the dispatcher may move or hold the job (:meth:`~.Dispatcher.release`; held: released again
  later); else the cluster's scheduler places the job; if it cannot, the clusters of the dispatcher's
  :meth:`~.Dispatcher.reroute` are tried in order; else the job joins the back of the first cluster's queue,
  unless no node of that cluster could ever hold it (``View.placeable``): then it is dropped, never placed;
- departure (``duration`` after placement): the job leaves; after the departures of one time,
  each cluster that freed capacity retries its queue once, front to back.

After every change of a cluster its modelled power (both models) is appended to its series.
"""

from __future__ import annotations

import heapq
import time as _time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from quasched.federation.dispatch import Dispatcher, View
from quasched.federation.forecast import HISTORY_H
from quasched.federation.loop import Dispatching
from quasched.federation.scenario import Scenario
from quasched.metrics.fragmentation import TypicalPods
from quasched.metrics.power import PowerMeter
from quasched.model.cluster import Cluster
from quasched.model.random import NumpyStream
from quasched.model.workload import Pod
from quasched.policies.queue import PendingQueue
from quasched.sim.engine import build_core

DEPART, RELEASE, ARRIVE = 0, 1, 2


@dataclass
class PowerSeries:
    """One cluster's modelled IT power after each change, W (``idle_*``: the empty cluster's)."""

    time: np.ndarray
    step_w: np.ndarray
    linear_w: np.ndarray
    idle_step_w: float
    idle_linear_w: float


@dataclass
class FederationRun:
    """Per job: cluster, release and placement time (NaN: never placed); per cluster: power; wall and CPU
    time of the replay (this process)."""

    scenario: Scenario
    dispatcher: str
    policy: str
    cluster: np.ndarray
    released: np.ndarray
    placed: np.ndarray
    power: list[PowerSeries]
    view: View
    elapsed_s: float
    cpu_s: float


def make_view(scenario: Scenario) -> View:
    """The dispatchers' :class:`View` of ``scenario`` (intensity × PUE over its horizon and the week before)."""
    w = scenario.workload
    capacity = np.array([[m.nodes.num_gpus.sum() * 1000 for m in scenario.members],
                         [m.nodes.cpu_milli.sum() for m in scenario.members]], dtype=float)
    demand = np.vstack([w.gpu_request, w.cpu_milli]).astype(float)
    return View(capacity, demand, scenario.duration, scenario.arrival + scenario.slack, scenario.job_kw,
                scenario.intensity(scenario.horizon_hours), scenario.intensity(HISTORY_H, -HISTORY_H), scenario.placeable)


class _Site:
    """One cluster at run time."""

    def __init__(self, scenario: Scenario, index: int, policy: str, seed: int, typical: TypicalPods) -> None:
        self.core = build_core(scenario.members[index].nodes, policy, NumpyStream(seed + index), typical,
                               power=scenario.power)
        self.cluster: Cluster = self.core.cluster
        self.queue = PendingQueue(self.cluster)
        self.pods: dict[int, Pod] = {}  # by job: the pods placed or waiting here
        self.meter = PowerMeter(self.cluster, scenario.power)
        step, linear = self.meter.refresh()
        self.idle = (step, linear)
        self.series: list[tuple[float, float, float]] = [(0.0, step, linear)]

    def place(self, pod: Pod, now: float) -> bool:
        if not self.core.scheduler.schedule(pod).placed:
            return False
        self.pods[pod.uid] = pod
        return True

    def wait(self, pod: Pod, now: float) -> None:
        self.pods[pod.uid] = pod
        self.queue.push(pod)

    def remove(self, job: int) -> None:
        self.cluster.remove(self.pods.pop(job))

    def record(self, t: float) -> None:
        step, linear = self.meter.refresh()
        if self.series[-1][0] == t:
            self.series.pop()
        self.series.append((t, step, linear))

    def power(self) -> PowerSeries:
        t, step, linear = (np.array(c, dtype=float) for c in zip(*self.series))
        return PowerSeries(t, step, linear, *self.idle)


def run_federation(scenario: Scenario, dispatcher: Dispatcher, policy: str = "fgd", seed: int = 42,
                   typical: TypicalPods | None = None) -> FederationRun:
    """Replay ``scenario`` under ``dispatcher`` with ``policy`` in every cluster (module docstring)."""
    began, cpu = _time.perf_counter(), _time.process_time()
    w = scenario.workload
    typical = typical or TypicalPods.from_workload(w)
    sites = [_Site(scenario, i, policy, seed, typical) for i in range(len(scenario.members))]
    view = make_view(scenario)
    view.nodes, view.pod = [s.cluster for s in sites], lru_cache(maxsize=4096)(w.pod)  # jobs re-released
    dispatcher.reset(view)
    heap: list[tuple[float, int, int]] = [(float(t), ARRIVE, j) for j, t in enumerate(scenario.arrival.tolist())]
    heapq.heapify(heap)
    duration = scenario.duration.tolist()
    rules = Dispatching(dispatcher, view, sites, len(w),
                        lambda j, t: heapq.heappush(heap, (t + duration[j], DEPART, j)))
    dirty: set[int] = set()
    while heap:
        t, kind, j = heapq.heappop(heap)
        if kind == ARRIVE:
            heapq.heappush(heap, (rules.arrive(j, t), RELEASE, j))
        elif kind == RELEASE:
            again = rules.release(j, t)
            if again is not None:
                heapq.heappush(heap, (again, RELEASE, j))
            elif rules.placed[j] == t:
                sites[int(rules.cluster[j])].record(t)
        else:
            c = rules.depart(j)
            sites[c].remove(j)
            dirty.add(c)
            if heap and heap[0][:2] == (t, DEPART):
                continue
            for c in sorted(dirty):
                site = sites[c]
                for pod, _ in site.queue.retry(site.core.scheduler.schedule):
                    rules.dequeue(pod.uid, t)
                site.record(t)
            dirty.clear()
    return FederationRun(scenario, dispatcher.name, policy, rules.cluster, rules.released, rules.placed,
                         [s.power() for s in sites], view, _time.perf_counter() - began,
                         _time.process_time() - cpu)
