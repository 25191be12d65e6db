"""A resumable sweep over traces × policies × seeds, e.g. the FGD paper's published matrix.

Each run is a self-contained :class:`MatrixTask` (trace *name*, configuration,
curve binning, data directory), so any :mod:`~quasched.sim.backends` backend can
run it; a worker loads each trace once and keeps it. Finished runs go to a
:class:`~quasched.sim.store.ResultStore` as they arrive; runs already stored
under the same :class:`~quasched.sim.store.RunKey` are not run again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

from quasched.model.nodes import NodeSpec
from quasched.model.workload import Workload
from quasched.sim.arrival import ExperimentConfig, run_experiment
from quasched.sim.backends import Backend
from quasched.sim.store import ResultStore, RunKey, inputs_digest
from quasched.sim.sweep import CurveFunction, RunSummary, summarize
from quasched.traces import catalog


@dataclass(frozen=True)
class MatrixTask:
    """One run: ``config`` on trace ``trace`` (read from ``data_dir``), binned by ``curves``."""

    trace: str
    config: ExperimentConfig
    curves: CurveFunction
    data_dir: Path | None = None


@dataclass
class MatrixResult:
    """Every run of the matrix in task order; ``skipped`` of them came from the store."""

    tasks: list[MatrixTask]
    runs: list[RunSummary]
    skipped: int
    total_gpus: dict[str, int]


@lru_cache(maxsize=4)
def _load(trace: str, data_dir: Path | None) -> tuple[NodeSpec, Workload]:
    return catalog.load_trace(trace, data_dir)


def run_task(task: MatrixTask) -> RunSummary:
    """Run one task (in a worker: its trace is loaded once per process)."""
    nodes, workload = _load(task.trace, task.data_dir)
    return summarize(run_experiment(nodes, workload, task.config), curves=task.curves)


def matrix_tasks(traces: Sequence[str], policies: Sequence[str], seeds: Sequence[int], base: ExperimentConfig,
                 curves: CurveFunction, data_dir: Path | None = None) -> list[MatrixTask]:
    """Tasks in trace, policy, seed order."""
    return [MatrixTask(t, replace(base, policy=p, seed=s), curves, data_dir)
            for t in traces for p in policies for s in seeds]


def task_key(task: MatrixTask, inputs: str) -> RunKey:
    """The store key of ``task`` on trace data with digest ``inputs``."""
    return RunKey.of(task.trace, inputs, task.config, f"{task.curves.__module__}.{task.curves.__qualname__}")


def run_matrix(tasks: Sequence[MatrixTask], store: ResultStore, backend: Backend,
               on_done: Callable[[MatrixTask, RunSummary, bool], None] | None = None) -> MatrixResult:
    """Run the tasks not yet in ``store`` on ``backend``, storing each as it finishes.

    ``on_done(task, summary, from_store)`` sees every task once (stored ones first).
    """
    digests, total_gpus = {}, {}
    for trace, data_dir in dict.fromkeys((t.trace, t.data_dir) for t in tasks):
        nodes, workload = _load(trace, data_dir)
        digests[trace], total_gpus[trace] = inputs_digest(nodes, workload), nodes.total_gpus
    keys = {task: task_key(task, digests[task.trace]) for task in tasks}
    done = store.done(keys.values())
    runs: dict[MatrixTask, RunSummary] = {}
    for task in tasks:
        stored = store.get(keys[task]) if keys[task] in done else None
        if stored is not None:
            runs[task] = stored
            if on_done:
                on_done(task, stored, True)
    todo = [task for task in tasks if task not in runs]
    for task, summary in backend.map(run_task, todo):
        store.put(keys[task], summary)
        runs[task] = summary
        if on_done:
            on_done(task, summary, False)
    return MatrixResult(list(tasks), [runs[t] for t in tasks], len(tasks) - len(todo), total_gpus)
