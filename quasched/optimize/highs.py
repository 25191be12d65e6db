"""A thin sparse-matrix builder around ``highspy`` (rows collected in COO, passed once)."""

from __future__ import annotations

from dataclasses import dataclass

import highspy
import numpy as np
from numpy.typing import ArrayLike

INF = highspy.kHighsInf


@dataclass
class Solution:
    """What HiGHS returned: status, values, objective, proven bound, gap, time and (LPs) row duals."""
    status: str  # "optimal", "feasible", "infeasible", "unbounded", "no_solution"
    x: np.ndarray | None
    objective: float
    bound: float
    gap: float
    time: float
    row_dual: np.ndarray | None = None  # LPs only; >= 0 on binding upper bounds (maximisation)


class LinearModel:
    """Maximisation MILP: add variables and rows, then :meth:`solve`."""

    def __init__(self) -> None:
        self.lb: list[np.ndarray] = []
        self.ub: list[np.ndarray] = []
        self.cost: list[np.ndarray] = []
        self.integer: list[np.ndarray] = []
        self.n = 0
        self.rows: list[tuple[np.ndarray, np.ndarray]] = []
        self.row_lo: list[float] = []
        self.row_hi: list[float] = []

    def add_vars(self, count: int, lb: ArrayLike = 0.0, ub: ArrayLike = INF, cost: ArrayLike = 0.0,
                 integer: bool = False) -> np.ndarray:
        """``count`` new variables; returns their indices."""
        self.lb.append(np.broadcast_to(np.asarray(lb, dtype=float), (count,)))
        self.ub.append(np.broadcast_to(np.asarray(ub, dtype=float), (count,)))
        self.cost.append(np.broadcast_to(np.asarray(cost, dtype=float), (count,)))
        self.integer.append(np.full(count, integer))
        index = np.arange(self.n, self.n + count)
        self.n += count
        return index

    def set_objective(self, index: ArrayLike, value: ArrayLike) -> None:
        """Replace the objective by ``sum(value * x[index])``."""
        cost = np.zeros(self.n)
        cost[np.asarray(index, dtype=np.int64)] = value
        self.cost = [cost]

    def add_row(self, index: ArrayLike, value: ArrayLike, lo: float = -INF, hi: float = INF) -> None:
        """``lo <= sum(value * x[index]) <= hi``."""
        index = np.asarray(index, dtype=np.int64)
        value = np.broadcast_to(np.asarray(value, dtype=float), index.shape)
        if len(index):
            self.rows.append((index, value))
            self.row_lo.append(lo)
            self.row_hi.append(hi)

    def solve(self, time_limit: float = 10.0, rel_gap: float = 1e-6, threads: int = 1,
              options: dict | None = None, start: np.ndarray | None = None) -> Solution:
        """Solve with HiGHS; ``options`` are extra HiGHS options, ``start`` a feasible point to begin from."""
        if self.n == 0:  # nothing to decide (HiGHS needs at least one column)
            return Solution("optimal", np.zeros(0), 0.0, 0.0, 0.0, 0.0, np.zeros(len(self.rows)))
        h = highspy.Highs()
        settings = {"output_flag": False, "time_limit": float(time_limit), "mip_rel_gap": float(rel_gap),
                    "threads": int(threads), **(options or {})}
        for key, value in settings.items():
            h.setOptionValue(key, value)
        lb, ub, cost = (np.concatenate(a) for a in (self.lb, self.ub, self.cost))
        h.addVars(self.n, lb, ub)
        cols = np.arange(self.n, dtype=np.int32)
        h.changeColsCost(self.n, cols, cost)
        integer = np.flatnonzero(np.concatenate(self.integer)).astype(np.int32)
        if len(integer):
            h.changeColsIntegrality(len(integer), integer,
                                    np.full(len(integer), highspy.HighsVarType.kInteger))
        if self.rows:
            starts = np.cumsum([0] + [len(i) for i, _ in self.rows[:-1]]).astype(np.int32)
            index = np.concatenate([i for i, _ in self.rows]).astype(np.int32)
            value = np.concatenate([v for _, v in self.rows])
            h.addRows(len(self.rows), np.array(self.row_lo), np.array(self.row_hi), len(index),
                      starts, index, value)
        h.changeObjectiveSense(highspy.ObjSense.kMaximize)
        if start is not None:
            guess = highspy.HighsSolution()
            guess.col_value = [float(v) for v in start]
            guess.value_valid = True
            h.setSolution(guess)
        h.run()
        return _solution(h, bool(len(integer)))


def _solution(h: highspy.Highs, is_mip: bool) -> Solution:
    model_status = h.getModelStatus()
    info = h.getInfo()
    has_x = info.primal_solution_status == 2  # kSolutionStatusFeasible
    solution = h.getSolution()
    x = np.asarray(solution.col_value) if has_x else None
    objective = info.objective_function_value if has_x else float("nan")
    bound = info.mip_dual_bound if is_mip else objective
    if model_status == highspy.HighsModelStatus.kOptimal:
        status = "optimal"
    elif model_status == highspy.HighsModelStatus.kInfeasible:
        status = "infeasible"
    elif model_status in (highspy.HighsModelStatus.kUnbounded, highspy.HighsModelStatus.kUnboundedOrInfeasible):
        status = "unbounded"
    else:
        status = "feasible" if has_x else "no_solution"
    gap = info.mip_gap if is_mip and has_x else 0.0
    dual = np.asarray(solution.row_dual) if has_x and not is_mip and solution.dual_valid else None
    return Solution(status, x, objective, bound, gap, h.getRunTime(), dual)
