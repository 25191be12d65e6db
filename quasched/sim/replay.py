"""Time-based trace replay: pods arrive at their creation time, wait, run, depart.

Unlike the arrival experiment (:mod:`quasched.sim.arrival`), pods leave the
cluster and free what they held, and a pod that does not fit waits in a FIFO
queue instead of being dropped. Every placement goes through the same
:class:`~quasched.policies.Scheduler` and policies, set up by
:func:`~quasched.sim.engine.build_core` like every engine (random stream
``rng`` seeded with ``seed``: NumPy by default, Go's for artifact
comparisons).

Timeline (:func:`~quasched.sim.events.build_timeline`)
    A row without a creation time was created before the trace window, so
    by default (``missing_creation="start"``) it arrives when the trace
    starts; ``"skip"`` drops such rows and counts them. Rows without
    a deletion time run until the end of the trace (the latest creation or
    deletion time of any row).

Departures (``departure=``)
    ``"duration"`` (default): a pod runs for its trace lifetime
    (deletion − creation) from the moment it is placed, as in most
    trace-driven simulators; queued pods wait until they fit, and pods still
    queued when nothing is left running are never placed. ``"trace"``: a pod
    leaves at its trace deletion time wherever it is; if it is still queued
    then, it is *withdrawn* (never placed). Open-ended pods leave at the end
    of the trace (or at once if placed after it).

Event order
    Events are processed in time order. At equal timestamps every departure
    (and withdrawal) comes before any arrival; departures at one timestamp
    run in file order, then the queue is retried once; arrivals at one
    timestamp run in file order, one at a time. A pod whose lifetime is 0
    departs right after it is placed, before the next arrival.

Queue and retry rule
    An arriving pod is scheduled at once even when others wait (no
    head-of-line blocking, as in kube-scheduler); if no node can host it, it
    joins the back of the :class:`~quasched.policies.queue.PendingQueue`.
    After the departures of a timestamp, the queue is retried once, front to
    back (with the queue's fit-class guard, which gives exactly the
    placements of retrying pod by pod; checked against such a naive replay in
    ``tests/test_replay_properties.py``).

Recorded after every event: one row of :class:`~quasched.sim.records.EventRecords`
(fragmentation with typical pods from the whole workload by default; modelled power
under both power models). Per pod: arrival, placement and departure time, node, devices
and waiting time (placement − arrival; NaN if never placed).

GPU failures (``failures=``, :mod:`quasched.sim.failures`; ``"duration"`` departures only)
    Devices fail and come back at the times of a seeded failure process that does not depend
    on the policy. A failed device takes no pod until it is back; a pod on it is killed
    (``kill`` events after the ``down`` event, whose state is without them), keeps the work
    up to its last checkpoint and re-arrives at once:
    placed if a node fits (``start``), else queued at the back. A recovered device lets the
    queue retry. At equal times, device events come before departures and arrivals. Once
    nothing runs and nothing is left to arrive, only recoveries are awaited (for queued pods)
    and failures in between are dropped. Every failure and warning is appended to the cluster's
    :class:`~quasched.model.health.ErrorLog`, whose clock follows the events. Remediation: after
    an error, a node with enough recent errors, or (``drain_flaky``) a node probably flaky, is cordoned for
    a while (a drain: its running pods finish, unless ``evict``: then they all migrate), then pods on the erring device or node
    checkpoint and re-arrive (``migrate`` events,
    then ``start``/``queue``), all before the killed pods re-arrive; a drain's end lets the queue
    retry (``drain_h = inf``: it never ends). With ``drain_lift`` a drained node is uncordoned (and the
    queue retries) while the longest-waiting pod has waited longer than its priced wait, and cordoned
    again when none has (``check`` device events). With ``migrate_rule`` other than ``"always"`` a
    warned device's pod migrates only when that pays (:func:`~quasched.sim.failures.plan_migration`), now or, deferred, at its next
    periodic checkpoint (a ``migrate`` event then, if the pod still runs the same run).

Energy and carbon
    :meth:`ReplayResult.energy_kwh` integrates the recorded power from the first to the
    last event; :meth:`ReplayResult.carbon_kg` weighs each hour's energy with an hourly
    intensity series (:mod:`quasched.traces.carbon`, Electricity Maps, ODbL), the first
    event at ``carbon_start`` (UTC; default the start of the series' year).
"""

from __future__ import annotations

import heapq
import time as _time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Literal

import numpy as np

from quasched.metrics.fragmentation import TypicalPods
from quasched.metrics.power import SECONDS_PER_HOUR, WATTS_PER_KW, PowerMode, carbon_kg, energy_kwh
from quasched.model.cluster import Cluster, NodeSpec
from quasched.model.workload import Pod, Workload
from quasched.policies.queue import PendingQueue
from quasched.sim.engine import RngKind, build_core, make_stream
from quasched.sim.events import MissingCreation, Timeline, build_timeline
from quasched.sim.failures import (DeviceFailure, DeviceFaults, FailureConfig, Move, WorkLedger, failure_stream,
                                   gpu_share, plan_migration)
from quasched.sim.records import ARRIVE, DEPART, DOWN, KILL, MIGRATE, QUEUE, START, UP, WITHDRAW, EventRecords
from quasched.traces.carbon import CarbonIntensity

DepartureMode = Literal["trace", "duration"]

#: Pod states (``PodOutcomes.status``).
PENDING, RUNNING, QUEUED, DONE, WITHDRAWN, SKIPPED = range(6)
STATUS_NAMES = ("pending", "running", "queued", "done", "withdrawn", "skipped")

@dataclass(frozen=True)
class ReplayConfig:
    """Parameters of one replay."""

    policy: str = "fgd"
    seed: int = 42
    departure: DepartureMode = "duration"
    missing_creation: MissingCreation = "start"
    typical_threshold: float = 95.0
    rng: RngKind = "native"
    compat_data: Path | None = None
    #: GPU failure process and job recovery (None = no failures)
    failures: FailureConfig | None = None


@dataclass
class PodOutcomes:
    """Per workload row (index = row): what happened to the pod."""

    arrival: np.ndarray
    #: first placement (a pod restarted after a failure keeps it)
    placed: np.ndarray
    departed: np.ndarray
    node: np.ndarray
    devices: np.ndarray
    status: np.ndarray

    @property
    def wait(self) -> np.ndarray:
        """Placement − arrival in seconds; NaN for pods never placed or skipped."""
        return self.placed - self.arrival

    @property
    def was_placed(self) -> np.ndarray:
        return np.isfinite(self.placed)

    @property
    def never_placed(self) -> np.ndarray:
        """Rows that arrived but never ran (withdrawn, or still queued at the end)."""
        return (self.status == WITHDRAWN) | (self.status == QUEUED)


@dataclass
class ReplayResult:
    """Everything one replay produced."""

    config: ReplayConfig
    nodes: NodeSpec
    workload: Workload
    timeline: Timeline
    rank: np.ndarray
    typical: TypicalPods
    events: EventRecords
    pods: PodOutcomes
    cluster: Cluster
    elapsed_s: float = 0.0
    #: hourly intensity for :meth:`carbon_kg` in :meth:`summary` (None = no carbon figures)
    carbon: CarbonIntensity | None = None
    #: UTC time of the first event on the intensity series' clock (None = its first hour)
    carbon_start: np.datetime64 | None = None
    #: power usage effectiveness: facility energy / IT energy
    pue: float = 1.0
    #: lost and allocated work of a run with failures (None = no failures)
    ledger: WorkLedger | None = None
    #: GPU warnings seen and nodes drained (runs with failures)
    warnings: int = 0
    drains: int = 0

    @property
    def wait(self) -> np.ndarray:
        return self.pods.wait

    def power_series(self, mode: PowerMode = "step") -> np.ndarray:
        """Modelled cluster power after each event, W."""
        return self.events.power_w if mode == "step" else self.events.power_linear_w

    def energy_kwh(self, mode: PowerMode = "step") -> float:
        """IT energy from the first to the last event (× ``pue`` for the facility), kWh."""
        return self.pue * energy_kwh(self.events.time, self.power_series(mode))

    def carbon_kg(self, carbon: CarbonIntensity | None = None, mode: PowerMode = "step",
                  start: np.datetime64 | None = None) -> float:
        """Emissions of :meth:`energy_kwh` under ``carbon`` (default: the run's), kg CO2eq.

        The first event happens at ``start`` (default :attr:`carbon_start`, else the series'
        first hour); the series wraps around if the replay runs past its end.
        """
        carbon = carbon or self.carbon
        if carbon is None:
            raise ValueError("no carbon intensity series: pass one (quasched.traces.carbon.load_carbon)")
        times = self.events.time
        if len(times) == 0:
            return 0.0
        when = start if start is not None else self.carbon_start if self.carbon_start is not None else carbon.start
        at = np.asarray(when, dtype="datetime64[s]")
        into_hour = float((at - at.astype("datetime64[h]")) / np.timedelta64(1, "s"))
        hour0 = float(times[0]) - into_hour
        hours = int(np.ceil((float(times[-1]) - hour0) / SECONDS_PER_HOUR)) + 1
        return carbon_kg(times, self.power_series(mode), carbon.hours_from(when, hours), hour0, pue=self.pue)

    def failure_summary(self) -> dict[str, float | int]:
        """Device failures and recoveries, interruptions, lost GPU-hours and goodput (:class:`WorkLedger`)."""
        assert self.ledger is not None, "the replay ran without failures"
        kinds = self.events.kind
        return {"device_failures": int(np.sum(kinds == DOWN)), "device_recoveries": int(np.sum(kinds == UP)),
                "warnings": self.warnings, "drains": self.drains, **self.ledger.summary()}

    def time_average(self, values: np.ndarray) -> float:
        """Time average of a per-event step series from the first to the last event."""
        return time_average(self.events.time, values)

    def summary(self) -> dict[str, float | int | str]:
        """Headline figures (times in seconds, allocation and fragmentation in %)."""
        ev, pods = self.events, self.pods
        placed = pods.was_placed
        waits = pods.wait[placed]
        arrived = pods.status != SKIPPED

        def stat(fn) -> float:
            return float(fn(waits)) if len(waits) else float("nan")

        return {
            "policy": self.config.policy,
            "seed": self.config.seed,
            "departure": self.config.departure,
            "nodes": len(self.nodes),
            "gpus": self.nodes.total_gpus,
            "pods": len(self.workload),
            "skipped": self.timeline.n_skipped,
            "arrived": int(arrived.sum()),
            "placed": int(placed.sum()),
            "placed_on_arrival": int(np.sum(ev.kind == ARRIVE)),
            "queued": int(np.sum(ev.kind == QUEUE)),
            "never_placed": int(pods.never_placed.sum()),
            "withdrawn": int(np.sum(pods.status == WITHDRAWN)),
            "still_queued": int(np.sum(pods.status == QUEUED)),
            "wait_mean_s": stat(np.mean),
            "wait_p50_s": stat(lambda w: np.percentile(w, 50)),
            "wait_p95_s": stat(lambda w: np.percentile(w, 95)),
            "wait_max_s": stat(np.max),
            "gpu_alloc_avg_pct": self.time_average(ev.gpu_alloc_pct),
            "cpu_alloc_avg_pct": self.time_average(ev.cpu_alloc_pct),
            "frag_ratio_avg_pct": self.time_average(ev.frag_ratio),
            "peak_gpu_alloc_pct": float(ev.gpu_alloc_pct.max(initial=0.0)),
            "peak_queue": int(ev.queue_len.max(initial=0)),
            "power_avg_kw": self.time_average(ev.power_w) / WATTS_PER_KW,
            "power_linear_avg_kw": self.time_average(ev.power_linear_w) / WATTS_PER_KW,
            "energy_kwh": self.energy_kwh("step"),
            "energy_linear_kwh": self.energy_kwh("linear"),
            **({"carbon_zone": self.carbon.zone, "carbon_kg": self.carbon_kg(mode="step"),
                "carbon_linear_kg": self.carbon_kg(mode="linear"), "carbon_source": self.carbon.source}
               if self.carbon is not None else {}),
            **(self.failure_summary() if self.ledger is not None else {}),
            "events": len(ev),
            "start_s": float(ev.time[0]) if len(ev) else float("nan"),
            "end_s": float(ev.time[-1]) if len(ev) else float("nan"),
            "elapsed_s": round(self.elapsed_s, 3),
        }


def time_average(times: np.ndarray, values: np.ndarray) -> float:
    """Mean of a step function (value i holds from ``times[i]`` to ``times[i+1]``).

    Events that share a timestamp get no weight except the last of them; with
    a single distinct timestamp the last value is returned.
    """
    if len(times) == 0:
        return float("nan")
    span = float(times[-1] - times[0])
    if span <= 0:
        return float(values[-1])
    return float(np.dot(np.diff(times), values[:-1]) / span)


class _Replay:
    """The event loop (one instance per run)."""

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

    # ---------------------------------------------------------------- helpers
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

    def device_event(self, failures: bool) -> None:
        """The next device event: a failure kills its pods, a failure or warning may drain its node and
        migrate pods (all re-arrive at once); a device or a drained node back lets the queue retry."""
        assert self.faults is not None and self.ledger is not None and self.config.failures is not None
        event = self.faults.pop(failures)
        if event is None:
            return
        t, node, device, kind = event
        if kind == "move":
            self.deferred_move(t, node, device)
            return
        if kind == "check":
            self.lift_check(t, node)
            return
        if kind == "uncordon":
            if t < self.cordon_until[node]:
                return  # a later hold extended the drain
            self.cluster.uncordon(node)
        elif kind == "back":
            self.cluster.set_device_health(node, device, True)
            self.record(t, UP, -1, node)
        if kind in ("uncordon", "back"):
            if len(self.queue):
                self.retry(t)
            return
        self.cluster.errors.record(t, node, device)
        hit = self.running_on(node, device) if kind == "fail" else []
        if kind == "fail":
            self.cluster.set_device_health(node, device, False)
            for uid in hit:
                self.stop(uid)
                self.ledger.kill(uid, t, node)
            self.record(t, DOWN, -1, node)
            for uid in hit:
                self.record(t, KILL, uid, node)
        fc = self.config.failures
        evict = self.drain(t, node) and fc.evict
        scope = "node" if evict else fc.migrate
        moved = [] if scope == "off" else self.running_on(node, device if scope == "device" else None)
        if kind == "warn" and not evict and fc.migrate_rule != "always":  # only migrate="device" moves on a rule
            moved = [uid for uid in moved if self.plan_move(t, node, uid) == "now"]
        self.migrate(t, node, moved, fc.checkpoint_cost_min * 60)
        for uid in hit + moved:
            self.arrive(t, uid, START)
        if (hit or moved) and len(self.queue):
            self.retry(t)

    def plan_move(self, t: float, node: int, uid: int) -> Move:
        """Whether the warned pod ``uid`` stays, moves now or at its next checkpoint (deferred here)."""
        fc, ledger, faults = self.config.failures, self.ledger, self.faults
        assert fc is not None and ledger is not None and faults is not None
        if self.deferred.get(uid, (np.nan,))[0] == self.due[uid]:
            return "stay"  # already moving at its next checkpoint
        done, left, to_next, since = ledger.position(uid, t)
        remaining = done if fc.migrate_rule == "pays_lindy" else left
        move = plan_migration(fc, remaining if np.isfinite(remaining) else np.inf, to_next, since)
        if move == "checkpoint":
            self.deferred[uid] = (self.due[uid], t + to_next)
            faults.defer(uid, node, t + to_next)
        return move

    def deferred_move(self, t: float, node: int, uid: int) -> None:
        """A deferred migration at the pod's periodic checkpoint: nothing to write, unless the run it was planned
        for has ended (killed, finished)."""
        if self.status[uid] == RUNNING and self.deferred.get(uid) == (self.due[uid], t):
            del self.deferred[uid]
            self.migrate(t, node, [uid], 0.0)
            self.arrive(t, uid, START)
            if len(self.queue):
                self.retry(t)

    def migrate(self, t: float, node: int, uids: list[int], cost_s: float) -> None:
        """Checkpoint ``uids`` (``cost_s`` each on its GPUs) and take them off ``node``; they re-arrive after."""
        assert self.ledger is not None
        for uid in uids:
            devices = self.outcome.devices[uid]
            self.stop(uid)
            self.ledger.migrate(uid, t, cost_s, node, devices)
            self.record(t, MIGRATE, uid, node)

    def running_on(self, node: int, device: int | None) -> list[int]:
        """Pods running on ``node`` (on its GPU ``device`` unless None), in row order."""
        on_node = np.flatnonzero((self.outcome.node == node) & (self.status == RUNNING)).tolist()
        return on_node if device is None else [uid for uid in on_node if device in self.outcome.devices[uid]]

    def stop(self, uid: int) -> None:
        """Take a running pod off its node before it re-arrives (killed or migrated)."""
        self.cluster.remove(uid)
        self.due[uid] = np.nan
        self.status[uid] = PENDING

    def drain(self, t: float, node: int) -> bool:
        """Cordon ``node`` for ``drain_h`` after ``drain_errors`` errors within ``drain_window_h`` (0 = never), and
        with ``drain_flaky`` while its posterior odds of being flaky are at least that (extended by each error);
        whether it was drained now."""
        fc, errors = self.config.failures, self.cluster.errors
        assert fc is not None and self.faults is not None
        until = -np.inf
        if fc.drain_errors and not self.cluster.cordoned[node] and \
                errors.count(node, t - fc.drain_window_h * SECONDS_PER_HOUR) >= fc.drain_errors:
            until = t + fc.drain_h * SECONDS_PER_HOUR
        if fc.drain_flaky and errors.prior is not None:
            g = self.cluster.num_gpus[node]
            threshold = np.log(fc.drain_flaky / (1 - fc.drain_flaky))
            excess = float(errors.prior.log_odds(errors.count(node, -np.inf), g, t)) - threshold
            if excess >= 0 and (fading := float(errors.prior.fading(g))) > 0:
                until = max(until, t + excess / fading)
        if until <= self.cordon_until.get(node, t):
            return False
        drained = not self.cluster.cordoned[node]
        self.cluster.cordon(node)
        self.cordon_until[node] = until
        self.faults.hold(node, until)
        if fc.drain_lift:
            self.next_check[node] = t
            self.lift_check(t, node)
        return drained

    def lift_check(self, t: float, node: int) -> None:
        """``drain_lift``: the drained ``node`` takes pods while the longest-waiting pod has waited longer than
        :meth:`FailureConfig.lift_wait_s` of the node's posterior, else it is cordoned; checked again when that
        can change (at least a minute later), until its drain ends."""
        fc, ledger, faults, errors = self.config.failures, self.ledger, self.faults, self.cluster.errors
        assert fc is not None and ledger is not None and faults is not None and errors.prior is not None
        if self.next_check.get(node) != t or t >= self.cordon_until[node]:
            return  # superseded by a later drain's check, or the drain is over
        queued = np.flatnonzero(self.status == QUEUED)
        since = np.where(np.isfinite(ledger.killed_at[queued]), ledger.killed_at[queued], self.outcome.arrival[queued])
        oldest = int(np.argmin(since)) if len(queued) else -1
        waited = t - since[oldest] if len(queued) else 0.0
        run = ledger.left[queued[oldest]] if fc.drain_lift_run == "known" and len(queued) else self.mean_run_s
        log_odds = float(errors.prior.log_odds(errors.count(node, -np.inf), self.cluster.num_gpus[node], t))
        wait = fc.lift_wait_s(1 / (1 + np.exp(-log_odds)), run if np.isfinite(run) else np.inf)
        lift = len(queued) > 0 and waited >= wait
        if lift and self.cluster.cordoned[node]:
            self.cluster.uncordon(node)
            self.retry(t)
        elif not lift:
            self.cluster.cordon(node)
        after = wait if lift else wait - waited
        if np.isfinite(after) and t + after < self.cordon_until[node]:
            self.next_check[node] = t + max(after, 60.0)
            faults.check(node, self.next_check[node])

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

    def run(self, progress: Callable[[int, int], None] | None) -> None:
        order = self.timeline.order
        times = self.timeline.arrival[order].tolist()
        uids = order.tolist()
        n, i, heap = len(uids), 0, self.heap
        inf = float("inf")
        faults, errors = self.faults, self.cluster.errors
        while i < n or heap or (faults is not None and faults.recovering and len(self.queue)):
            t_arrival = times[i] if i < n else inf
            if faults is not None:
                busy = i < n or bool(heap)
                t_device = faults.next_time(busy)
                errors.now = min(t_device, heap[0][0] if heap else inf, t_arrival)
                if t_device <= errors.now:
                    self.device_event(busy)
                    continue
            if heap and heap[0][0] <= t_arrival:
                self.depart_batch(heap[0][0])
                continue
            self.arrive(t_arrival, uids[i])
            i += 1
            if progress is not None and (i % 500 == 0 or i == n):
                progress(i, n)


def replay(
    nodes: NodeSpec,
    workload: Workload,
    config: ReplayConfig = ReplayConfig(),
    progress: Callable[[int, int], None] | None = None,
    typical: TypicalPods | None = None,
    carbon: CarbonIntensity | None = None,
    carbon_start: np.datetime64 | None = None,
    pue: float = 1.0,
    failures: Iterable[DeviceFailure] | None = None,
    oracle_cordon: np.ndarray | None = None,
) -> ReplayResult:
    """Replay ``workload`` on ``nodes``; ``progress(arrived, total)`` is called every 500 arrivals.

    ``failures``: explicit device failures in time order instead of ``config.failures``'s
    random process (which still sets checkpoints and restarts; tests and what-if timelines).
    ``oracle_cordon``: a node mask cordoned from the start for the whole run. It is a clairvoyant reference for
    benchmarks (e.g. the failure model's true flaky nodes), not a scheduler option: no policy spec, CLI option or
    :class:`FailureConfig` field reaches it.

    ``typical`` overrides the typical pods used for fragmentation (and FGD);
    by default they come from the whole ``workload``. ``carbon``, ``carbon_start`` and
    ``pue`` add carbon figures to the summary (:meth:`ReplayResult.carbon_kg`).
    """
    if pue < 1:
        raise ValueError(f"PUE is facility / IT energy, at least 1; got {pue}")
    start = _time.perf_counter()
    if failures is not None and config.failures is None:
        raise ValueError("explicit failures need config.failures (checkpoint interval, restart overhead)")
    if oracle_cordon is not None and config.failures is None:
        raise ValueError("oracle_cordon is a reference on a failure model: it needs config.failures")
    run = _Replay(nodes, workload, config, typical, failures, oracle_cordon)
    run.run(progress)
    return ReplayResult(
        config=config,
        nodes=nodes,
        workload=workload,
        timeline=run.timeline,
        rank=run.core.rank,
        typical=run.typical,
        events=run.core.recorder.result(),
        pods=run.outcome,
        cluster=run.cluster,
        elapsed_s=_time.perf_counter() - start,
        carbon=carbon,
        carbon_start=carbon_start,
        pue=pue,
        ledger=run.ledger,
        warnings=run.faults.warned if run.faults is not None else 0,
        drains=run.faults.drained if run.faults is not None else 0,
    )


def run_replay(
    nodes: NodeSpec,
    workload: Workload,
    policy: str,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
    **options,
) -> ReplayResult:
    """CLI entry point: :func:`replay` with ``ReplayConfig(policy, seed, **options)``.

    ``options``: ``departure`` (``"trace"``/``"duration"``), ``missing_creation``
    (``"skip"``/``"start"``), ``typical_threshold``, ``failures``; ``typical``, ``carbon``,
    ``carbon_start`` and ``pue`` are passed through.
    """
    extra = {k: options.pop(k) for k in ("typical", "carbon", "carbon_start", "pue") if k in options}
    return replay(nodes, workload, ReplayConfig(policy=policy, seed=seed, **options), progress, **extra)
