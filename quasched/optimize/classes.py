"""Symmetry reduction: identical jobs form classes, identical machines form types.

Jobs of one app with the same requests, limit and GPU spec are interchangeable
in every constraint and differ only in priority, so an optimal solution always
places the earliest (heaviest) ones of such a class: a solver only needs how
many of each class go to each machine (:func:`expand` picks the jobs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from quasched.optimize.problem import BatchProblem


@dataclass(frozen=True)
class JobClass:
    """Interchangeable jobs, heaviest first."""

    jobs: np.ndarray
    demand: np.ndarray  # (R,)
    app: int
    limit: int
    weights: np.ndarray  # non-increasing, one per job

    @property
    def size(self) -> int:
        return len(self.jobs)


def job_classes(problem: BatchProblem, jobs: np.ndarray | None = None) -> list[JobClass]:
    """Classes of ``jobs`` (default: all) keyed by (app, requests, limit, GPU spec)."""
    jobs = np.arange(problem.n_jobs) if jobs is None else np.asarray(jobs)
    members: dict[tuple, list[int]] = {}
    for i in jobs.tolist():
        key = (int(problem.app[i]), tuple(problem.demand[i].tolist()), int(problem.limit[i]),
               str(problem.job_gpu_model[i]))
        members.setdefault(key, []).append(i)
    classes = []
    for (app, demand, limit, _), rows in members.items():
        rows_arr = np.array(rows)
        rows_arr = rows_arr[np.lexsort((rows_arr, -problem.weight[rows_arr]))]
        classes.append(JobClass(rows_arr, np.array(demand, dtype=np.int64), app, limit,
                                problem.weight[rows_arr]))
    return classes


def machine_types(problem: BatchProblem) -> list[np.ndarray]:
    """Groups of interchangeable machines (same capacities and GPU model), as index arrays."""
    groups: dict[tuple, list[int]] = {}
    for j in range(problem.n_machines):
        groups.setdefault((tuple(problem.capacity[j].tolist()), str(problem.machine_gpu_model[j])), []).append(j)
    return [np.array(g) for g in groups.values()]


def expand(problem: BatchProblem, classes: list[JobClass], counts: dict[tuple[int, int], int]) -> np.ndarray:
    """Machine vector from per-(class, machine) counts, heaviest jobs of a class first."""
    machine = np.full(problem.n_jobs, -1, dtype=np.int64)
    taken = [0] * len(classes)
    for (c, j), k in sorted(counts.items()):
        if k > 0:
            rows = classes[c].jobs[taken[c]: taken[c] + k]
            machine[rows] = j
            taken[c] += k
    return machine
