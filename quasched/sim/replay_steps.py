"""The state of one time-based replay (:mod:`.replay`) and its steps without failures: a pod's
arrival (placed by the scheduler or queued), the bookkeeping of a placement (its departure on the
heap), one retry pass of the queue, and the departures and withdrawals of a timestamp. Setting up
a run with a failure model also sets up its device events, work ledger and oracle cordons."""

from __future__ import annotations

import heapq
from typing import Iterable

import numpy as np

from quasched.metrics.typical import TypicalPods
from quasched.model.nodes import NodeSpec
from quasched.model.workload import Pod, Workload
from quasched.policies.queue import PendingQueue
from quasched.sim.engine import build_core, make_stream
from quasched.sim.events import build_timeline
from quasched.sim.failures import DeviceFailure, DeviceFaults, failure_stream
from quasched.sim.records import ARRIVE, DEPART, KILL, QUEUE, START, WITHDRAW
from quasched.sim.replay_result import (DONE, PENDING, QUEUED, RUNNING, SKIPPED, WITHDRAWN, PodOutcomes,
                                        ReplayConfig)
from quasched.sim.work_ledger import WorkLedger, gpu_share


class ReplaySteps:
    """State and failure-free steps of one replay (one instance per run)."""

    def __init__(self, nodes: NodeSpec, workload: Workload, config: ReplayConfig,
                 typical: TypicalPods | None, failures: Iterable[DeviceFailure] | None = None,
                 oracle_cordon: np.ndarray | None = None) -> None:
        if config.departure not in ("trace", "duration"):
            raise ValueError(f"unknown departure mode {config.departure!r}; use 'trace' or 'duration'")
        if config.failures is not None and config.departure != "duration":
            raise ValueError("GPU failures need departure='duration' (a killed pod restarts with the work left)")
        self.config = config
        self.nodes = nodes
        self.workload = workload
        self.timeline = build_timeline(workload, config.missing_creation)
        self.typical = typical or TypicalPods.from_workload(workload, config.typical_threshold)
        self.core = build_core(nodes, config.policy, make_stream(config.rng, config.seed, config.compat_data),
                               self.typical, 3 * len(self.timeline.order) + 1)
        self.cluster, self.scheduler = self.core.cluster, self.core.scheduler
        self.queue = PendingQueue(self.cluster)
        self._pods: dict[int, Pod] = {}

        n = len(workload)
        tl = self.timeline
        self.outcome = PodOutcomes(
            arrival=tl.arrival.copy(),
            placed=np.full(n, np.nan),
            departed=np.full(n, np.nan),
            node=np.full(n, -1, dtype=np.int64),
            devices=np.empty(n, dtype=object),
            status=np.where(tl.skipped, SKIPPED, PENDING).astype(np.int8),
        )
        self.status = self.outcome.status
        self.heap: list[tuple[float, int]] = []
        #: work per pod in seconds (NaN = open-ended) and the departure time of its current run
        self.work = np.where(np.isfinite(workload.deletion_time), tl.deletion - tl.arrival, np.nan)
        self.due = np.full(n, np.nan)
        self.faults: DeviceFaults | None = None
        #: pods whose migration waits for their next periodic checkpoint -> (the due time of that run, the move's)
        self.deferred: dict[int, tuple[float, float]] = {}
        #: drained nodes -> when their latest hold ends, and (``drain_lift``) when their lift is checked next
        self.cordon_until: dict[int, float] = {}
        self.next_check: dict[int, float] = {}
        gpu_work = self.work[(workload.gpu_milli > 0) & np.isfinite(self.work)]
        #: the mean run of a GPU pod, what ``drain_lift`` prices a wait on without durations
        self.mean_run_s = float(gpu_work.mean()) if len(gpu_work) else 0.0
        self.ledger: WorkLedger | None = None
        if config.failures is not None:
            fc = config.failures
            start = float(tl.arrival[tl.order[0]]) if len(tl.order) else 0.0
            self.faults = DeviceFaults(failures if failures is not None
                                       else failure_stream(fc, np.asarray(nodes.num_gpus), start))
            self.ledger = WorkLedger(self.work, gpu_share(workload.gpu_milli, workload.num_gpu),
                                     fc.checkpoint_min * 60, fc.restart_min * 60)
            self.cluster.errors.prior = fc.error_prior(start)
            for node in np.flatnonzero(oracle_cordon if oracle_cordon is not None else []).tolist():
                self.cluster.cordon(node)  # for good, and not counted as a drain
                self.cordon_until[node] = np.inf

    # ---------------------------------------------------------------- small steps
    def pod(self, uid: int) -> Pod:
        pod = self._pods.get(uid)
        if pod is None:
            pod = self._pods[uid] = self.workload.pod(uid)
        return pod

    def record(self, t: float, kind: int, uid: int, node: int) -> None:
        """Append an event row; queue, withdraw and kill events leave the cluster as the row before."""
        self.core.recorder.record(t, kind, uid, node, len(self.queue), state_changed=kind not in (QUEUE, WITHDRAW, KILL))

    def start(self, t: float, uid: int, node: int, devices: tuple[int, ...], kind: int) -> None:
        """Bookkeeping of a placement done by the scheduler."""
        out = self.outcome
        self.status[uid] = RUNNING
        if np.isnan(out.placed[uid]):
            out.placed[uid] = t
        out.node[uid] = node
        out.devices[uid] = devices
        if self.config.departure == "duration":
            run = self.ledger.begin(uid, t) if self.ledger is not None else self.work[uid]
            leave = t + run if np.isfinite(run) else max(t, self.timeline.end)
            self.due[uid] = leave
            heapq.heappush(self.heap, (leave, uid))
        self.record(t, kind, uid, node)

    def enqueue(self, t: float, uid: int) -> None:
        self.queue.push(self.pod(uid))
        self.status[uid] = QUEUED
        self.record(t, QUEUE, uid, -1)

    def retry(self, t: float) -> None:
        """One pass over the queue after capacity grew."""
        for pod, decision in self.queue.retry(self.scheduler.schedule):
            self.start(t, pod.uid, decision.node, decision.devices, START)

    # ------------------------------------------------------------------ steps
    def arrive(self, t: float, uid: int, placed_kind: int = ARRIVE) -> None:
        if self.config.departure == "trace":
            heapq.heappush(self.heap, (float(self.timeline.deletion[uid]), uid))
        decision = self.scheduler.schedule(self.pod(uid))
        if decision.placed:
            self.start(t, uid, decision.node, decision.devices, placed_kind)
        else:
            self.enqueue(t, uid)

    def depart_batch(self, t: float) -> None:
        """Every departure and withdrawal at ``t`` (file order), then one queue retry."""
        heap, freed = self.heap, False
        while heap and heap[0][0] == t:
            _, uid = heapq.heappop(heap)
            state = self.status[uid]
            if self.ledger is not None and self.due[uid] != t:
                continue  # the run this departure belonged to was killed
            if state == RUNNING:
                placement = self.cluster.remove(uid)
                self.status[uid] = DONE
                self.outcome.departed[uid] = t
                if self.ledger is not None:
                    self.ledger.end(uid, t)
                freed = True
                self.record(t, DEPART, uid, placement.node)
            elif state == QUEUED:
                self.status[uid] = WITHDRAWN
                self.queue.discard(uid)
                self.record(t, WITHDRAW, uid, -1)
        if freed and len(self.queue):
            self.retry(t)
