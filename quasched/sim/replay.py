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
    ``tests/sim/test_replay_properties.py``).

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

Homes: the configuration and results in :mod:`.replay_result`, a run's state and its steps without
failures in :mod:`.replay_steps`, device events and remediation in :mod:`.remediation`, the event
loop here.
"""

from __future__ import annotations

import time as _time
from typing import Callable, Iterable

import numpy as np

from quasched.metrics.typical import TypicalPods
from quasched.model.nodes import NodeSpec
from quasched.model.workload import Workload
from quasched.sim.failures import DeviceFailure
from quasched.sim.remediation import FailureSteps
from quasched.sim.replay_result import ReplayConfig, ReplayResult
from quasched.traces.carbon import CarbonIntensity


class _Replay(FailureSteps):
    """The event loop (one instance per run): device events, departures and arrivals in time order."""

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
