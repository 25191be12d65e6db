"""The arrival experiment of the FGD paper (Weng et al., ATC'23).

Pods arrive one at a time in a shuffled order, never depart and are
scheduled exactly once (an unschedulable pod is dropped). The workload is
first *tuned*: resampled up (or randomly thinned down) until its total GPU
request is ``tune_ratio`` × the cluster's GPU capacity. After every event the
cluster's GPU allocation and fragmentation are recorded; post-processing
(:mod:`quasched.metrics.curves`; the artifact's rounding in :mod:`quasched.compat.curves`)
bins them by arrived GPU request.

With ``rng="go"`` every random draw comes from the Go ``math/rand`` port in
:mod:`quasched.model.gorand`, which reproduces the published results exactly;
``rng="native"`` uses NumPy's generator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from quasched.metrics.typical import TypicalPods
from quasched.model.cluster import Cluster
from quasched.model.nodes import NodeSpec
from quasched.model.random import RandomStream
from quasched.model.workload import FULL_GPU_MILLI, Workload
from quasched.policies.framework import Policy
from quasched.sim.engine import EngineCore, RngKind, build_core, make_stream
from quasched.sim.records import ARRIVE, FAIL, EventRecords


@dataclass(frozen=True)
class ExperimentConfig:
    """Parameters of one run."""

    policy: str = "fgd"
    seed: int = 42
    tune_ratio: float = 1.3
    rng: RngKind = "native"
    typical_threshold: float = 95.0
    compat_data: Path | None = None


@dataclass
class ExperimentResult:
    """Everything one run produced."""

    config: ExperimentConfig
    workload: Workload
    nodes: NodeSpec
    rank: np.ndarray
    events: EventRecords
    cluster: Cluster
    typical: TypicalPods
    elapsed_s: float = 0.0

    @property
    def total_gpus(self) -> int:
        return self.nodes.total_gpus

    @property
    def failed(self) -> np.ndarray:
        """Event indices of unschedulable pods."""
        return np.flatnonzero(self.events.node < 0)

    def display_names(self) -> np.ndarray:
        """Node names prefixed with their rank, as the reference simulator prints them."""
        return np.array([f"{r:04d}-{n}" for r, n in zip(self.rank, self.nodes.name)], dtype=object)


def tune_workload(workload: Workload, capacity_milli: int, ratio: float, rng: RandomStream) -> Workload:
    """Shuffle the name-sorted pods, then resample up or thin down to ``ratio × capacity`` GPU milli.

    Tuning up appends clones (named ``<name>-tuned-<i>``) drawn with
    replacement from the name-sorted trace and stops at the first draw whose
    *per-GPU* milli would cross the target (the reference's test). Tuning
    down removes uniformly random pods until the total is at most the target.
    ``ratio <= 0`` only shuffles.
    """
    by_name = sorted(range(len(workload)), key=lambda i: workload.name[i])
    order = list(by_name)
    rng.shuffle(order)
    names = [str(workload.name[i]) for i in order]
    request = workload.gpu_request.tolist()
    per_gpu = workload.gpu_milli.tolist()
    total = sum(request[i] for i in order)
    target = ratio * capacity_milli
    if ratio <= 0:
        pass
    elif total < target:
        if not any(per_gpu):
            raise ValueError("cannot tune up a workload without GPU requests; use tune ratio 0")
        clone = 0
        while True:
            pick = by_name[rng.intn(len(by_name))]
            if total + per_gpu[pick] > target:
                break
            order.append(pick)
            names.append(f"{workload.name[pick]}-tuned-{clone}")
            total += request[pick]
            clone += 1
    else:
        while total > target:
            gone = rng.intn(len(order))
            total -= request[order.pop(gone)]
            names.pop(gone)
    return workload.take(order, names)


def prepare(nodes: NodeSpec, workload: Workload, config: ExperimentConfig, typical: TypicalPods,
            policy: Policy | None = None) -> tuple[Workload, EngineCore]:
    """The tuned arrivals of ``config.seed`` and the engine core (``policy``, else ``config.policy``)."""
    rng = make_stream(config.rng, config.seed, config.compat_data)
    rng.after_seed()
    events_workload = tune_workload(workload, FULL_GPU_MILLI * nodes.total_gpus, config.tune_ratio, rng)
    rng.after_tuning()
    return events_workload, build_core(nodes, policy or config.policy, rng, typical, len(events_workload))


def run_experiment(
    nodes: NodeSpec,
    workload: Workload,
    config: ExperimentConfig,
    progress: Callable[[int, int], None] | None = None,
) -> ExperimentResult:
    """Run one arrival experiment; ``progress(done, total)`` is called now and then."""
    start = time.perf_counter()
    typical = TypicalPods.from_workload(workload, config.typical_threshold)
    events_workload, core = prepare(nodes, workload, config, typical)
    requests = events_workload.gpu_request.tolist()
    arrived = 0
    for e in range(len(events_workload)):
        pod = events_workload.pod(e)
        arrived += requests[e]
        decision = core.scheduler.schedule(pod)
        core.recorder.record(float(e), ARRIVE if decision.placed else FAIL, e, decision.node,
                             arrived_gpu_milli=arrived, state_changed=decision.placed)
        if progress is not None and (e % 500 == 0 or e == len(events_workload) - 1):
            progress(e + 1, len(events_workload))
    return ExperimentResult(
        config, events_workload, nodes, core.rank, core.recorder.result(), core.cluster, typical,
        elapsed_s=time.perf_counter() - start,
    )
