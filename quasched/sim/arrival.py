"""The arrival experiment of the FGD paper (Weng et al., ATC'23).

Pods arrive one at a time in a shuffled order, never depart and are
scheduled exactly once (an unschedulable pod is dropped). The workload is
first *tuned*: resampled up (or randomly thinned down) until its total GPU
request is ``tune_ratio`` × the cluster's GPU capacity. After every event the
cluster's GPU allocation and fragmentation are recorded; post-processing
(:mod:`quasched.compat.curves`) bins them by arrived GPU request.

With ``rng="go"`` every random draw comes from the Go ``math/rand`` port in
:mod:`quasched.compat.gorand`, which reproduces the published results exactly;
``rng="native"`` uses NumPy's generator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

import numpy as np

from quasched.metrics.fragmentation import TypicalPods, cluster_fragmentation, state_table
from quasched.model.cluster import Cluster, NodeSpec
from quasched.model.workload import FULL_GPU_MILLI, Workload
from quasched.policies import Scheduler, make_policy
from quasched.model.random import NumpyStream, RandomStream

RngKind = Literal["go", "native"]


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
class EventLog:
    """One record per pod event, on the cluster state after the event."""

    pod: np.ndarray
    node: np.ndarray
    arrived: np.ndarray
    used_nodes: np.ndarray
    used_gpus: np.ndarray
    used_milli: np.ndarray
    frag_milli: np.ndarray
    frag_ratio: np.ndarray
    q124: np.ndarray

    @classmethod
    def empty(cls, n: int) -> "EventLog":
        ints = ("node", "arrived", "used_nodes", "used_gpus", "used_milli")
        return cls(
            pod=np.empty(n, dtype=object),
            **{k: np.zeros(n, dtype=np.int64) for k in ints},
            frag_milli=np.zeros(n), frag_ratio=np.zeros(n), q124=np.zeros(n),
        )

    def __len__(self) -> int:
        return len(self.pod)


@dataclass
class ExperimentResult:
    """Everything one run produced."""

    config: ExperimentConfig
    workload: Workload
    nodes: NodeSpec
    rank: np.ndarray
    events: EventLog
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


def make_stream(config: ExperimentConfig) -> RandomStream:
    if config.rng == "go":
        from quasched.compat.gorand import GoRand, load_cooked

        return GoRand(config.seed, load_cooked(config.compat_data))
    if config.rng == "native":
        return NumpyStream(config.seed)
    raise ValueError(f"unknown rng {config.rng!r}; use 'go' or 'native'")


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


def node_ranks(nodes: NodeSpec, rng: RandomStream) -> np.ndarray:
    """Tie-break rank per node: a random permutation over the name-sorted nodes."""
    by_name = sorted(range(len(nodes)), key=lambda i: nodes.name[i])
    perm = rng.perm(len(nodes))
    rank = np.empty(len(nodes), dtype=np.int64)
    rank[by_name] = perm
    return rank


def run_experiment(
    nodes: NodeSpec,
    workload: Workload,
    config: ExperimentConfig,
    progress: Callable[[int, int], None] | None = None,
) -> ExperimentResult:
    """Run one arrival experiment; ``progress(done, total)`` is called now and then."""
    start = time.perf_counter()
    typical = TypicalPods.from_workload(workload, config.typical_threshold)
    rng = make_stream(config)
    rng.after_seed()
    events_workload = tune_workload(workload, FULL_GPU_MILLI * nodes.total_gpus, config.tune_ratio, rng)
    rng.after_tuning()
    rank = node_ranks(nodes, rng)

    cluster = Cluster(nodes)
    scheduler = Scheduler(cluster, make_policy(config.policy, typical), rank, rng)
    table = state_table(cluster, typical)
    log = EventLog.empty(len(events_workload))
    capacity_cpu = nodes.cpu_milli
    gpus = nodes.num_gpus
    gpu_capacity = FULL_GPU_MILLI * gpus
    requests = events_workload.gpu_request
    arrived = 0
    for e in range(len(events_workload)):
        pod = events_workload.pod(e)
        arrived += int(requests[e])
        decision = scheduler.schedule(pod)
        used = (cluster.gpu_free.sum(axis=1) < gpu_capacity) | (cluster.cpu_free < capacity_cpu)
        report = cluster_fragmentation(table)
        log.pod[e] = pod.name
        log.node[e] = decision.node
        log.arrived[e] = arrived
        log.used_nodes[e] = used.sum()
        log.used_gpus[e] = gpus[used].sum()
        log.used_milli[e] = cluster.used_gpu_milli
        log.frag_milli[e] = report.frag_milli
        log.frag_ratio[e] = report.frag_ratio
        log.q124[e] = report.q124_ratio
        if progress is not None and (e % 500 == 0 or e == len(log) - 1):
            progress(e + 1, len(log))
    return ExperimentResult(
        config, events_workload, nodes, rank, log, cluster, typical,
        elapsed_s=time.perf_counter() - start,
    )
