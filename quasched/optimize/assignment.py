"""What every solver returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quasched.optimize.problem import BatchProblem
from quasched.optimize.verifier import Verdict


@dataclass
class Assignment:
    """A solver's answer: ``machine[i]`` is job i's machine, -1 when not placed.

    ``objective`` is what the solver believes it achieved, ``bound`` a proven
    upper bound on the weighted objective (``None`` when the solver has none);
    :func:`quasched.optimize.solve` sets ``verdict`` from the verifier. ``status``: ``optimal`` (proven),
    ``feasible`` (limit reached, bound known), ``heuristic`` (no bound), ``incomplete`` (a heuristic missed
    exactly-once), ``infeasible`` (proven: no assignment exists), ``no_answer`` (a heuristic found no feasible
    answer, e.g. within its time limit: nothing placed, and not a solution; ``message`` says why) or ``error``.
    """

    solver: str
    machine: np.ndarray
    status: str
    objective: float = float("nan")
    bound: float | None = None
    time: float = 0.0
    message: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    verdict: Verdict | None = None

    @property
    def gap(self) -> float | None:
        """Relative gap between the proven bound and the verified weighted objective."""
        if self.bound is None or self.verdict is None:
            return None
        return max(0.0, self.bound - self.verdict.weighted) / max(abs(self.bound), 1e-12)

    @property
    def placed(self) -> int:
        return int(np.sum(self.machine >= 0))


def no_answer(solver: str, problem: BatchProblem, why: str, info: dict[str, Any]) -> Assignment:
    """The answer of a heuristic that found no feasible one (``why``): every job unplaced, status ``no_answer``."""
    return Assignment(solver, np.full(problem.n_jobs, -1, dtype=np.int64), "no_answer", message=why, info=info)
