"""Decomposition for QUBO solvers: column generation whose pricing subproblems are QUBOs.

The split of work is explicit. A QUBO solver (simulated annealing or QAOA)
answers every pricing question "which machine content is worth most at these
shape prices?" (:func:`quasched.optimize.qubo.pattern_qubo`); HiGHS solves the
restricted master LP that sets the prices, picks how many machines use each
QUBO-found pattern, and assigns apps to the slots
(:func:`quasched.optimize.milp.solve_milp`'s pipeline). Each sample is
repaired and climbed to a local optimum classically (:mod:`quasched.optimize.polish`,
on by default; ``benchmarks/batch.py ablation`` measures raw samples and random
starts beside it). Nothing is seeded from a greedy answer: the only starting
columns are single-shape patterns.
Generation stops when no sample of a pricing QUBO improves the LP, so no
bound is claimed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from quasched.optimize.assignment import Assignment, no_answer
from quasched.optimize.classes import job_classes
from quasched.optimize.colgen import Shapes
from quasched.optimize.milp import REL_GAP, _patterns
from quasched.optimize.polish import polish
from quasched.optimize.problem import BatchProblem
from quasched.optimize.qubo import PENALTY, PatternQubo, pattern_qubo

#: a subproblem solver: QUBO -> samples (rows of 0/1 in variable order), best first
SubSolver = Callable[[PatternQubo], np.ndarray]


#: QUBO formulations of one pricing question: slack capacity rows (None) or unbalanced (l1, l2)
PORTFOLIO: tuple[tuple[float, float] | None, ...] = ((2.0, 3.0), (3.0, 6.0), (4.0, 20.0), None)


class QuboPricer:
    """Pricing by QUBO samples, with statistics.

    Each question is asked in every formulation of ``formulations`` (see
    :data:`PORTFOLIO`); every feasible sample of any of them is a candidate column,
    after the classical :func:`quasched.optimize.polish.polish` when ``polish`` is set
    (then infeasible samples are repaired too).
    """

    def __init__(self, subsolver: SubSolver, max_vars: int | None = None, penalty: float = PENALTY,
                 max_slack_bits: int | None = None, formulations=PORTFOLIO, polish: bool = True) -> None:
        self.subsolver, self.max_vars = subsolver, max_vars
        self.penalty, self.max_slack_bits, self.formulations = penalty, max_slack_bits, formulations
        self.polish = polish
        self.subproblems = self.samples = self.feasible = self.polished = self.largest = 0
        self.time = 0.0

    def __call__(self, sh: Shapes, t: int, pi: np.ndarray) -> tuple[list[np.ndarray], bool]:
        """Every feasible (or polished) pattern among the QUBOs' samples (never a proof of optimality)."""
        counts = np.concatenate([self._ask(sh, t, pi, form) for form in self.formulations])
        ok = sh.feasible_rows(t, counts)
        self.samples += len(counts)
        self.feasible += int(ok.sum())
        if not self.polish:
            return list(np.unique(counts[ok], axis=0)), False
        starts, inverse = np.unique(counts, axis=0, return_inverse=True)
        better = polish(sh, t, starts, pi)
        self.polished += int(np.any(better != starts, axis=1)[inverse.ravel()].sum())
        return list(better), False

    def _ask(self, sh: Shapes, t: int, pi: np.ndarray, form) -> np.ndarray:
        """Shape counts of the samples of one formulation's QUBO (rows; none if it is too big)."""
        shapes = np.flatnonzero((pi > 1e-9) & (sh.fit[t] > 0))
        shapes = shapes[np.argsort(-pi[shapes], kind="stable")]
        qubo = self._qubo(sh, t, pi, shapes, form)
        while self.max_vars is not None and qubo.n_vars > self.max_vars and len(shapes) > 1:
            shapes = shapes[:-1]
            qubo = self._qubo(sh, t, pi, shapes, form)
        if not len(shapes) or (self.max_vars is not None and qubo.n_vars > self.max_vars):
            return np.zeros((0, sh.n_shapes), dtype=np.int64)
        start = time.perf_counter()
        samples = self.subsolver(qubo)
        self.time += time.perf_counter() - start
        self.subproblems += 1
        self.largest = max(self.largest, qubo.n_vars)
        return qubo.counts(samples)

    def _qubo(self, sh: Shapes, t: int, pi: np.ndarray, shapes: np.ndarray, form) -> PatternQubo:
        return pattern_qubo(sh.demand, sh.capacity[t], sh.fit[t], sh.hi[t], sh.lo_only[t], pi, shapes,
                            self.penalty, self.max_slack_bits, form)

    def stats(self) -> dict:
        return {"subproblems": self.subproblems, "largest_qubo": self.largest,
                "sample_feasibility": round(self.feasible / max(self.samples, 1), 4),
                "polish": self.polish, "samples_changed_by_polish": round(self.polished / max(self.samples, 1), 4),
                "subsolver_time": round(self.time, 3)}


def solve_decomposed(problem: BatchProblem, pricer: QuboPricer, name: str, time_limit: float = 60.0,
                     patience: int = 3) -> Assignment:
    """Column generation with QUBO pricing (``patience`` retries when no column is found), then the
    pattern MILP and app assignment (HiGHS)."""
    start = time.perf_counter()
    classes = job_classes(problem)
    machine, _, _, info = _patterns(problem, classes, start + time_limit, REL_GAP, pricer=pricer,
                                    warm_start=False, patience=patience)
    info.update(pricer.stats())
    placed = machine >= 0
    if not placed.any() and info["lp_value"] > 0:  # HiGHS ran out of time before any integer answer
        return no_answer(name, problem, f"no feasible answer within the time limit ({time_limit:g} s)", info)
    status = "incomplete" if problem.exactly_once and not placed.all() else "heuristic"
    return Assignment(name, machine, status, objective=float(problem.weight[placed].sum()), info=info)
