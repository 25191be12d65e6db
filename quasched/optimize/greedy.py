"""Greedy baselines: Qua's first-fit ("nearest available machine") and a priority-ordered best-fit."""

from __future__ import annotations

import numpy as np

from quasched.model.workload import NO_LIMIT
from quasched.optimize.assignment import Assignment
from quasched.optimize.problem import BatchProblem


class MachineState:
    """Incremental state of every machine during a greedy pass."""

    def __init__(self, problem: BatchProblem) -> None:
        self.p = problem
        self.free = problem.capacity.astype(np.int64).copy()
        self.has_hi = np.zeros(problem.n_machines, dtype=bool)
        self.has_lo = np.zeros(problem.n_machines, dtype=bool)
        self.app_count: dict[tuple[int, int], int] = {}
        self.app_cap: dict[tuple[int, int], int] = {}  # smallest limit among the app's jobs there
        self.machine = np.full(problem.n_jobs, -1, dtype=np.int64)

    def feasible(self, i: int) -> np.ndarray:
        """Machines that can take job ``i`` now."""
        p = self.p
        ok = np.all(self.free >= p.demand[i], axis=1) & p.allowed[i]
        ok &= ~(p.heavy_hi[i] & self.has_lo) & ~(p.heavy_lo[i] & self.has_hi)
        a, limit = int(p.app[i]), int(p.limit[i])
        if a != NO_LIMIT and p.enforce_max_per_node:
            for j in np.flatnonzero(ok).tolist():
                count = self.app_count.get((j, a), 0) + 1
                if count > self.app_cap.get((j, a), 1 << 30) or (limit >= 1 and count > limit):
                    ok[j] = False
        return ok

    def place(self, i: int, j: int) -> None:
        p = self.p
        self.free[j] -= p.demand[i]
        self.has_hi[j] |= p.heavy_hi[i, j]
        self.has_lo[j] |= p.heavy_lo[i, j]
        a, limit = int(p.app[i]), int(p.limit[i])
        if a != NO_LIMIT:
            self.app_count[(j, a)] = self.app_count.get((j, a), 0) + 1
            if limit >= 1:
                self.app_cap[(j, a)] = min(limit, self.app_cap.get((j, a), 1 << 30))
        self.machine[i] = j


def qua_order(problem: BatchProblem) -> np.ndarray:
    """Qua's processing order: by app name, then submission time (stable)."""
    names = np.array([problem.app_names[a] if a >= 0 else "" for a in problem.app.tolist()], dtype=object)
    return np.lexsort((np.nan_to_num(problem.submit_time, nan=np.inf), names))


def greedy_qua(problem: BatchProblem) -> Assignment:
    """First fit in (app name, submission time) order: each job to the lowest-index machine that fits."""
    state = MachineState(problem)
    for i in qua_order(problem).tolist():
        ok = np.flatnonzero(state.feasible(i))
        if len(ok):
            state.place(i, int(ok[0]))
    return _result("greedy-qua", problem, state.machine)


def greedy_priority(problem: BatchProblem) -> Assignment:
    """Highest priority first (ties: smallest dominant share), each to the fullest machine it fits."""
    share = problem.demand / np.maximum(problem.capacity.max(axis=0), 1)
    order = np.lexsort((share.max(axis=1), -problem.weight))
    state = MachineState(problem)
    cap = np.maximum(problem.capacity, 1)
    for i in order.tolist():
        ok = np.flatnonzero(state.feasible(i))
        if len(ok):
            fullness = (1 - state.free[ok] / cap[ok]).sum(axis=1)
            state.place(i, int(ok[np.argmax(fullness)]))
    return _result("greedy", problem, state.machine)


def _result(name: str, problem: BatchProblem, machine: np.ndarray) -> Assignment:
    placed = machine >= 0
    status, message = "heuristic", ""
    if problem.exactly_once and not placed.all():
        status, message = "incomplete", f"exactly-once not met: {int((~placed).sum())} job(s) unplaced"
    return Assignment(name, machine, status, objective=float(problem.weight[placed].sum()), message=message)
