"""Run the arrival experiment for many (policy, seed) pairs of one trace on all cores.

Worker processes are forked with the cluster and workload already loaded, so
each task ships only its (policy, seed) and returns a compact
:class:`RunSummary` (curves, failures by shape, end state and, on request,
the per-event log).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Iterable

import numpy as np

from quasched.metrics.allocation import allocation_summary
from quasched.metrics.curves import Curves, arrival_curves
from quasched.metrics.fragmentation import cluster_fragmentation, state_table
from quasched.model.nodes import NodeSpec
from quasched.model.workload import FULL_GPU_MILLI, Workload
from quasched.sim.arrival import ExperimentConfig, ExperimentResult, run_experiment
from quasched.sim.backends import LocalBackend
from quasched.sim.records import EventRecords


def shape_label(cpu_milli: int, num_gpu: int, gpu_milli: int, gpu_model: str) -> str:
    """A pod shape as the reference simulator prints failed pods."""
    return f"<CPU: {cpu_milli / 1000:.2f}, GPU: {num_gpu} x {{{gpu_milli}}}m ({gpu_model})>"


@dataclass
class RunSummary:
    """What one (policy, seed) run produced, small enough to send between processes."""

    policy: str
    seed: int
    events: int
    placed: int
    curves: Curves
    failed_shapes: Counter
    final_alloc_pct: float
    final_frag_ratio: float
    elapsed_s: float
    end_state: dict[str, float]
    display_nodes: np.ndarray | None = None
    pod_names: np.ndarray | None = None
    log: EventRecords | None = None

    @property
    def failed(self) -> int:
        return self.events - self.placed


CurveFunction = Callable[..., Curves]


def summarize(result: ExperimentResult, keep_log: bool = False, curves: CurveFunction = arrival_curves) -> RunSummary:
    """Condense an :class:`~quasched.sim.arrival.ExperimentResult`; ``curves`` bins its records
    (:func:`~quasched.compat.curves.discrete_curves` for the artifact's rounding)."""
    log, w = result.events, result.workload
    failed = result.failed
    shapes = Counter(
        shape_label(int(w.cpu_milli[i]), int(w.num_gpu[i]), int(w.gpu_milli[i]), str(w.gpu_model[i]))
        for i in failed.tolist()
    )
    total = result.total_gpus
    return RunSummary(
        policy=result.config.policy,
        seed=result.config.seed,
        events=len(log),
        placed=len(log) - len(failed),
        curves=curves(log.arrived_gpu_milli, log.used_gpu_milli, log.frag_milli, log.frag_ratio, total),
        failed_shapes=shapes,
        final_alloc_pct=100.0 * int(log.used_gpu_milli[-1]) / (FULL_GPU_MILLI * total) if len(log) else 0.0,
        final_frag_ratio=float(log.frag_ratio[-1]) if len(log) else 0.0,
        elapsed_s=result.elapsed_s,
        end_state=allocation_summary(
            result.cluster, cluster_fragmentation(state_table(result.cluster, result.typical))
        ),
        display_nodes=result.display_names() if keep_log else None,
        pod_names=np.asarray(w.name, dtype=object) if keep_log else None,
        log=log if keep_log else None,
    )


_SHARED: dict = {}


def _init_worker(nodes: NodeSpec, workload: Workload) -> None:
    _SHARED["nodes"], _SHARED["workload"] = nodes, workload


def _run_one(task: tuple[ExperimentConfig, bool, CurveFunction]) -> RunSummary:
    config, keep_log, curves = task
    result = run_experiment(_SHARED["nodes"], _SHARED["workload"], config)
    return summarize(result, keep_log, curves)


def run_sweep(
    nodes: NodeSpec,
    workload: Workload,
    policies: Iterable[str],
    seeds: Iterable[int],
    base: ExperimentConfig = ExperimentConfig(),
    workers: int | None = None,
    keep_logs: bool = False,
    on_done: Callable[[RunSummary], None] | None = None,
    curves: CurveFunction = arrival_curves,
) -> list[RunSummary]:
    """All (policy, seed) runs, in policy-then-seed order; ``on_done`` sees each as it finishes.

    Runs on a :class:`~quasched.sim.backends.LocalBackend` of ``workers`` (forked with the
    inputs loaded); ``curves`` (a module-level function, sent to the workers) bins each run's records.
    """
    configs = [replace(base, policy=p, seed=s) for p in policies for s in seeds]
    order = {config: i for i, config in enumerate(configs)}
    slots: list[RunSummary | None] = [None] * len(configs)
    tasks = [(config, keep_logs, curves) for config in configs]
    for (config, _, _), summary in LocalBackend(workers).map(_run_one, tasks, _init_worker, (nodes, workload)):
        slots[order[config]] = summary
        if on_done:
            on_done(summary)
    return [r for r in slots if r is not None]
