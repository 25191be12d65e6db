"""One entry point for every solver; every answer goes through the verifier."""

from __future__ import annotations

import time
from collections.abc import Callable

from quasched.extras import require
from quasched.optimize.assignment import Assignment
from quasched.optimize.greedy import greedy_priority, greedy_qua
from quasched.optimize.problem import BatchProblem
from quasched.optimize.verifier import verify


def _milp(problem: BatchProblem, **options) -> Assignment:
    from quasched.optimize.milp import solve_milp
    return solve_milp(problem, **options)


#: solver -> the optional modules it imports (all from the ``quantum`` extra); the other solvers need only the core
OPTIONAL_MODULES = {"qubo-sa": ("dimod", "dwave.samplers"), "qaoa": ("dimod", "qiskit", "qiskit_aer")}


def check_installed(solver: str) -> None:
    """Raise :class:`~quasched.extras.MissingExtra` (naming the ``pip install``) if ``solver``'s modules are missing."""
    for module in OPTIONAL_MODULES.get(solver, ()):
        require(module, "quantum")


def _qubo_sa(problem: BatchProblem, **options) -> Assignment:
    check_installed("qubo-sa")
    from quasched.optimize.anneal import solve_qubo_sa
    return solve_qubo_sa(problem, **options)


def _qaoa(problem: BatchProblem, **options) -> Assignment:
    check_installed("qaoa")
    from quasched.optimize.qaoa import solve_qaoa
    return solve_qaoa(problem, **options)


SOLVERS: dict[str, Callable[..., Assignment]] = {
    "greedy-qua": greedy_qua,
    "greedy": greedy_priority,
    "milp": _milp,
    "qubo-sa": _qubo_sa,
    "qaoa": _qaoa,
}


def solve(problem: BatchProblem, solver: str = "milp", **options) -> Assignment:
    """Run ``solver`` on ``problem``, time it, and attach the verifier's verdict."""
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; choose from {', '.join(SOLVERS)}")
    start = time.perf_counter()
    result = SOLVERS[solver](problem, **options)
    result.time = time.perf_counter() - start
    result.verdict = verify(problem, result.machine)
    return result
