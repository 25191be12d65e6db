"""Independent checker of batch assignments.

Works from the raw arrays of a :class:`BatchProblem` only (requests,
capacities, apps, limits, GPU specs and models, submission times, rule
parameters) and deliberately shares no code with the solvers' constraint
construction: weights, heavy flags and model checks are recomputed here, job
by job and machine by machine.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from quasched.model.nodes import accessible
from quasched.optimize.problem import BatchProblem

#: violations listed in a verdict (the count is always complete)
MAX_LISTED = 20


@dataclass
class Verdict:
    """Outcome of :func:`verify`: feasibility plus the recomputed objective values."""

    feasible: bool
    violations: list[str] = field(default_factory=list)
    n_violations: int = 0
    weighted: float = 0.0
    jobs: int = 0
    apps: int = 0

    @property
    def mark(self) -> str:
        return "✓" if self.feasible else f"✗ ({self.n_violations})"


def priorities(problem: BatchProblem) -> list[float]:
    """alpha ** (k-1) for the k-th job of each app by submission time (ties: row order)."""
    times = [float("inf") if t != t else float(t) for t in problem.submit_time.tolist()]
    seen: Counter[int] = Counter()
    weight = [1.0] * problem.n_jobs
    for i in sorted(range(problem.n_jobs), key=lambda i: (times[i], i)):
        app = int(problem.app[i])
        if app >= 0:
            weight[i] = problem.alpha ** seen[app]
            seen[app] += 1
    return weight


def as_matrix(answer: np.ndarray, n_jobs: int, n_machines: int) -> np.ndarray:
    """An answer as an (n, m) 0/1 matrix: from a machine vector (-1 = unplaced) or a matrix."""
    answer = np.asarray(answer)
    if answer.shape == (n_jobs, n_machines):
        return answer.astype(np.int64)
    if answer.shape != (n_jobs,):
        raise ValueError(f"answer has shape {answer.shape}; expected ({n_jobs},) or ({n_jobs}, {n_machines})")
    x = np.zeros((n_jobs, n_machines), dtype=np.int64)
    placed = answer >= 0
    if np.any(answer[placed] >= n_machines) or np.any(answer < -1):
        bad = answer[(answer >= n_machines) | (answer < -1)]
        raise ValueError(f"machine index {int(bad[0])} out of range 0..{n_machines - 1}")
    x[np.flatnonzero(placed), answer[placed]] = 1
    return x


def _heavy(problem: BatchProblem, i: int, j: int, thresholds) -> bool:
    return any(
        problem.demand[i, problem.resources.index(r)] > share * problem.capacity[j, problem.resources.index(r)]
        for r, share in thresholds.items()
    )


def _machine_violations(problem: BatchProblem, j: int, jobs: list[int]) -> list[str]:
    out = []
    for k, r in enumerate(problem.resources):
        used = sum(int(problem.demand[i, k]) for i in jobs)
        if used > int(problem.capacity[j, k]):
            out.append(f"machine {j}: {r} {used} > capacity {int(problem.capacity[j, k])}")
    for i in jobs:
        has_gpu = "gpu_milli" in problem.resources and problem.demand[i, problem.resources.index("gpu_milli")] > 0
        if has_gpu and not accessible(str(problem.machine_gpu_model[j]), str(problem.job_gpu_model[i])):
            out.append(f"machine {j}: job {i} needs GPU {problem.job_gpu_model[i]!r}, machine has {problem.machine_gpu_model[j]!r}")
    if problem.enforce_max_per_node:
        per_app = Counter(int(problem.app[i]) for i in jobs if problem.app[i] >= 0)
        for i in jobs:
            limit = int(problem.max_per_node[i])
            if problem.app[i] >= 0 and limit >= 1 and per_app[int(problem.app[i])] > limit:
                out.append(f"machine {j}: job {i} allows {limit} of its app per node, "
                           f"{per_app[int(problem.app[i])]} there")
    hi = [i for i in jobs if _heavy(problem, i, j, problem.heavy.hi)]
    lo = [i for i in jobs if i in hi or _heavy(problem, i, j, problem.heavy.low)]
    for a in hi:
        for b in lo:
            if a != b:
                out.append(f"machine {j}: heavy jobs {a} and {b} share it")
                break
    return out


def verify(problem: BatchProblem, answer: np.ndarray) -> Verdict:
    """Check every constraint of ``problem`` and recompute the objective of ``answer``."""
    n, m = problem.n_jobs, problem.n_machines
    try:
        x = as_matrix(answer, n, m)
    except ValueError as exc:
        return Verdict(False, [str(exc)], 1)
    violations: list[str] = []
    if np.any((x != 0) & (x != 1)):
        violations.append("entries other than 0 and 1")
    for i in np.flatnonzero(x.sum(axis=1) > 1).tolist():
        violations.append(f"job {i} placed {int(x[i].sum())} times")
    if problem.exactly_once:
        for i in np.flatnonzero(x.sum(axis=1) == 0).tolist():
            violations.append(f"job {i} not placed (exactly-once mode)")
    on_machine: dict[int, list[int]] = defaultdict(list)
    for i, j in zip(*np.nonzero(x)):
        on_machine[int(j)].append(int(i))
    for j, jobs in sorted(on_machine.items()):
        violations += _machine_violations(problem, j, jobs)
    weight = priorities(problem)
    placed = [i for i in range(n) if x[i].sum() >= 1]
    owners = {int(problem.app[i]) if problem.app[i] >= 0 else -1 - i for i in placed}
    return Verdict(
        feasible=not violations,
        violations=violations[:MAX_LISTED],
        n_violations=len(violations),
        weighted=float(sum(weight[i] for i in placed)),
        jobs=len(placed),
        apps=len(owners),
    )
