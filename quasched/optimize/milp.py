"""Exact MILP (HiGHS) for the batch problem.

Two formulations over job classes (:mod:`quasched.optimize.classes`):

- ``counts``: integer ``x[c, j]`` = jobs of class ``c`` on machine ``j``. The
  objective is concave in each class's total (heaviest jobs first): one
  continuous ``z[c, k] in [0, 1]`` per job, ``sum_k z[c, k] = sum_j x[c, j]``,
  cost ``w[c, k]``; the LP fills them in order since weights do not increase.
  Per machine: capacity rows, at most one heavy job (and no ``lo`` job beside
  it), per-app density rows (binary switches only for apps whose jobs carry
  different limits), and "load of j >= load of j+1" between identical machines.
  Its LP bound is the pooled capacity, so on Qua's instances it stalls.
- ``patterns`` (default): column generation over machine patterns plus exact
  reduced-cost enumeration (:mod:`quasched.optimize.colgen`) decides how many
  machines hold which multiset of shapes and how many jobs of each class are
  placed; a ``counts`` model restricted to those slots then assigns apps to
  machines under the per-machine density rule. When that succeeds with the
  chosen class totals, the answer meets the pattern bound and is optimal.
"""

from __future__ import annotations

import time

import numpy as np

from quasched.optimize.assignment import Assignment
from quasched.optimize.classes import JobClass, expand, job_classes, machine_types
from quasched.optimize.colgen import (
    MAX_ENUMERATED,
    NEGLIGIBLE,
    Master,
    enumerate_patterns,
    generate,
    shapes,
)
from quasched.optimize.greedy import greedy_priority
from quasched.optimize.highs import LinearModel
from quasched.optimize.problem import BatchProblem

TIME_LIMIT = 10.0
DISTRIBUTION_RESERVE = 1.5  # seconds kept for assigning apps to the chosen slots
QUICK_IP = 2.0  # seconds for the first pattern MILP (CG columns only), which looks for an incumbent
STAGE_GAP = 1e-4  # first reduced-cost window of the proof, relative to the LP bound
GROWTH = 2.0  # each further window is this much wider (never past the incumbent's gap)
REL_GAP = 1e-6
#: HiGHS options of the pattern MILPs: presolve reformulates the many near-duplicate pattern
#: columns slowly (off: 3-4x faster)
PATTERN_IP_OPTIONS = {"presolve": "off"}
#: ... and of proof stages, whose job is the bound: primal heuristics and symmetry detection
#: only cost time there (off: ~10 % faster on Qua's rules)
PROOF_STAGE_OPTIONS = {**PATTERN_IP_OPTIONS, "mip_heuristic_effort": 0.0, "mip_detect_symmetry": False}


class ClassModel:
    """The counts MILP of a problem."""

    def __init__(self, problem: BatchProblem, classes: list[JobClass], pairs: np.ndarray | None = None) -> None:
        """``pairs`` (C, m) bool restricts which classes may go to which machines (no symmetry rows then)."""
        self.p, self.classes = problem, classes
        self.m = LinearModel()
        self.x: dict[tuple[int, int], int] = {}
        self._counts(pairs)
        self._machines()
        self._objective()
        if pairs is None:
            self._symmetry()

    def _counts(self, pairs: np.ndarray | None) -> None:
        p = self.p
        self.ub: dict[tuple[int, int], float] = {}
        for c, cls in enumerate(self.classes):
            first = cls.jobs[0]
            for j in range(p.n_machines):
                cap = p.capacity[j]
                if not p.allowed[first, j] or np.any(cls.demand > cap) or (pairs is not None and not pairs[c, j]):
                    continue
                need = cls.demand > 0
                ub = min(cls.size, int(np.min(cap[need] // cls.demand[need])) if need.any() else cls.size)
                if cls.limit >= 1:
                    ub = min(ub, cls.limit)
                if p.heavy_hi[first, j]:
                    ub = min(ub, 1)
                self.x[(c, j)] = int(self.m.add_vars(1, 0, ub, integer=True)[0])
                self.ub[(c, j)] = float(ub)
        self.on: dict[int, list[int]] = {}
        for c, j in self.x:
            self.on.setdefault(j, []).append(c)

    def _machines(self) -> None:
        p = self.p
        for j, cs in self.on.items():
            col = np.array([self.x[(c, j)] for c in cs])
            demand = np.array([self.classes[c].demand for c in cs])
            ubs = np.array([self.ub[(c, j)] for c in cs])
            for r in range(len(p.resources)):
                if demand[:, r] @ ubs > p.capacity[j, r]:
                    self.m.add_row(col, demand[:, r], hi=float(p.capacity[j, r]))
            first = [self.classes[c].jobs[0] for c in cs]
            hi = np.array([p.heavy_hi[i, j] for i in first])
            lo_only = np.array([p.heavy_lo[i, j] for i in first]) & ~hi
            if hi.sum() > 1:
                self.m.add_row(col[hi], 1.0, hi=1.0)
            if hi.any() and lo_only.any():
                big = float(ubs[lo_only].sum())
                self.m.add_row(np.concatenate([col[lo_only], col[hi]]),
                               np.concatenate([np.ones(lo_only.sum()), np.full(hi.sum(), big)]), hi=big)
            self._density(j, cs)

    def _density(self, j: int, cs: list[int]) -> None:
        by_app: dict[int, list[int]] = {}
        for c in cs:
            if self.classes[c].app >= 0:
                by_app.setdefault(self.classes[c].app, []).append(c)
        for members in by_app.values():
            limits = sorted({self.classes[c].limit for c in members if self.classes[c].limit >= 1})
            total = sum(self.ub[(c, j)] for c in members)
            if not limits or total <= limits[0]:
                continue
            col = np.array([self.x[(c, j)] for c in members])
            all_limited = all(self.classes[c].limit >= 1 for c in members)
            for k, limit in enumerate(limits):
                if total <= limit:
                    continue
                if all_limited and k == len(limits) - 1:
                    self.m.add_row(col, 1.0, hi=float(limit))
                    continue
                switch = int(self.m.add_vars(1, 0, 1, integer=True)[0])
                for c in members:
                    if self.classes[c].limit == limit:
                        self.m.add_row([self.x[(c, j)], switch], [1.0, -self.ub[(c, j)]], hi=0.0)
                self.m.add_row(np.append(col, switch), np.append(np.ones(len(col)), total - limit), hi=total)

    def columns(self, c: int) -> list[int]:
        return [self.x[(c, j)] for j in range(self.p.n_machines) if (c, j) in self.x]

    def _objective(self) -> None:
        z_cols, z_cost = [], []
        for c, cls in enumerate(self.classes):
            cols = self.columns(c)
            if cols:
                z = self.m.add_vars(cls.size, 0, 1, cost=cls.weights)
                self.m.add_row(np.concatenate([cols, z]), np.concatenate([np.ones(len(cols)), -np.ones(cls.size)]),
                               lo=0.0, hi=0.0)
                z_cols.append(z)
                z_cost.append(cls.weights)
        self.z = np.concatenate(z_cols) if z_cols else np.zeros(0, dtype=np.int64)
        self.z_cost = np.concatenate(z_cost) if z_cost else np.zeros(0)

    def _symmetry(self) -> None:
        scale = np.maximum(self.p.capacity.max(axis=0), 1)
        load = [float((cls.demand / scale).sum()) for cls in self.classes]
        for group in machine_types(self.p):
            for j, k in zip(group[:-1], group[1:]):
                cs = self.on.get(int(j), [])
                if cs:
                    self.m.add_row([self.x[(c, int(j))] for c in cs] + [self.x[(c, int(k))] for c in cs],
                                   [load[c] for c in cs] + [-load[c] for c in cs], lo=0.0)

    def counts(self, x: np.ndarray) -> dict[tuple[int, int], int]:
        return {key: int(round(x[col])) for key, col in self.x.items()}




def solve_milp(problem: BatchProblem, time_limit: float = TIME_LIMIT, rel_gap: float = REL_GAP,
               method: str = "patterns") -> Assignment:
    """Maximise the weighted objective (then, if lexicographic, the job count) with HiGHS.

    In exactly-once mode the solver maximises the number of placed jobs and
    reports ``infeasible`` when that maximum is proven below the job count.
    """
    start = time.perf_counter()
    none = np.full(problem.n_jobs, -1, dtype=np.int64)
    if problem.exactly_once and (why := problem.obvious_infeasibility()):
        return Assignment("milp", none, "infeasible", message=why)
    classes = job_classes(problem)
    deadline = start + time_limit
    solver = _patterns if method == "patterns" else _counts
    machine, status, bound, info = solver(problem, classes, deadline, rel_gap)
    if method == "patterns" and status != "optimal" and deadline - time.perf_counter() > 1.0:
        # the per-machine density rule may be what separates the pattern bound from the answer:
        # the counts model states it exactly (and is quick on small instances)
        alt, alt_status, alt_bound, _ = _counts(problem, classes, deadline, rel_gap)
        value = problem.weight if not problem.exactly_once else np.ones(problem.n_jobs)
        if alt_status == "optimal" or value[alt >= 0].sum() > value[machine >= 0].sum():
            machine = alt
            if alt_status == "optimal":
                status = "optimal"
                bound = alt_bound if bound is None or alt_bound is None else min(bound, alt_bound)
        info["counts_fallback"] = alt_status
    placed = machine >= 0
    if problem.exactly_once and not placed.all():
        if status == "optimal":
            return Assignment("milp", machine, "infeasible", bound=bound, info=info,
                              message=f"at most {int(placed.sum())} of {problem.n_jobs} jobs can be placed")
        return Assignment("milp", machine, "error", bound=bound, info=info,
                          message="exactly-once not decided within the time limit")
    return Assignment("milp", machine, status, objective=float(problem.weight[placed].sum()),
                      bound=bound, info=info)


def _counts(problem: BatchProblem, classes: list[JobClass], deadline: float, rel_gap: float):
    model = ClassModel(problem, classes)
    if problem.exactly_once:
        model.m.set_objective(model.z, 1.0)
    sol = model.m.solve(max(deadline - time.perf_counter(), 0.1), rel_gap)
    info = {"formulation": "counts", "variables": model.m.n, "rows": len(model.m.rows)}
    if sol.x is None:
        return np.full(problem.n_jobs, -1), "error", None, info
    x, status = sol.x, sol.status
    if problem.objective == "lexicographic" and status == "optimal" and not problem.exactly_once:
        model.m.add_row(model.z, model.z_cost, lo=sol.objective - rel_gap * max(1.0, abs(sol.objective)))
        model.m.set_objective(model.z, 1.0)
        second = model.m.solve(max(deadline - time.perf_counter(), 0.2), rel_gap)
        if second.x is not None:
            x, status = second.x, second.status
    bound = None if problem.exactly_once else float(sol.bound)
    return expand(problem, classes, model.counts(x)), status, bound, info


def _patterns(problem: BatchProblem, classes: list[JobClass], deadline: float, rel_gap: float,
              pricer=None, warm_start: bool = True, patience: int = 0):
    """Pattern pipeline; ``pricer`` replaces exact pricing (then nothing is proven), and without
    ``warm_start`` no greedy answer seeds the columns or serves as fallback."""
    sh = shapes(problem, classes)
    weights = np.ones(problem.n_jobs) if problem.exactly_once else problem.weight
    master = Master(sh, weights, negligible=NEGLIGIBLE if pricer is None else 0.0)  # nothing to prove otherwise
    fallback = greedy_priority(problem).machine if warm_start else np.full(problem.n_jobs, -1, dtype=np.int64)
    _seed(master, fallback)
    t0 = time.perf_counter()
    # a heuristic pricer's columns only count once the pattern MILP has picked from them: keep it time
    cg_deadline = deadline - DISTRIBUTION_RESERVE - (QUICK_IP if pricer is not None else 0.0)
    z_lp, pi, mu, converged = generate(master, cg_deadline, pricer, patience)
    info = {"formulation": "patterns", "classes": len(classes), "shapes": sh.n_shapes, "lp_value": z_lp,
            "neglected_weight": master.neglected,
            "cg_columns": len(master.columns), "cg_time": round(time.perf_counter() - t0, 3)}
    tol = rel_gap * max(1.0, abs(z_lp))
    lexicographic = problem.objective == "lexicographic" and not problem.exactly_once
    ip_deadline = deadline - DISTRIBUTION_RESERVE
    if converged:
        best, bound = _prove(master, z_lp, pi, mu, float(weights[fallback >= 0].sum()), ip_deadline, tol, rel_gap, info)
        bound += master.neglected  # the priced-at-0 segments could all be placed on top
    else:
        sol = _pattern_ip(master, max(ip_deadline, time.perf_counter() + QUICK_IP), rel_gap)
        best, bound = ((sol.objective, master.chosen(sol.x)) if sol.x is not None else None), None
    proven = best is not None and bound is not None and best[0] >= bound - tol
    info.update(patterns=len(master.columns))
    if best is None:
        return fallback, "feasible", bound, info
    value, chosen = best
    if lexicographic and proven:
        start = master.point(chosen)
        model, _, z = master.build(integer=True)
        model.add_row(z, master.seg_weight, lo=value - tol)
        model.set_objective(z, 1.0)
        second = model.solve(max(ip_deadline - time.perf_counter(), 0.5), rel_gap, options=PATTERN_IP_OPTIONS,
                             start=start)
        proven = second.status == "optimal"
        chosen = master.chosen(second.x) if second.x is not None else chosen
    machine = _distribute(problem, classes, master.slots(chosen), sh.shape_of, deadline,
                          rel_gap, value - tol if lexicographic else None)
    if weights[machine >= 0].sum() < weights[fallback >= 0].sum():
        machine = fallback
    reached = float(weights[machine >= 0].sum()) >= value - tol
    info["apps_assigned_exactly"] = reached
    status = "optimal" if proven and reached else "feasible" if bound is not None else "heuristic"
    return machine, status, (None if problem.exactly_once else bound), info


def _prove(master: Master, z_lp: float, pi: np.ndarray, mu: np.ndarray, lb: float, deadline: float,
           tol: float, rel_gap: float, info: dict):
    """Best machine contents ``(value, chosen)`` (or None) and an upper bound, by staged
    reduced-cost enumeration.

    A solution within ``delta`` of the LP bound uses only patterns with ``rc_p >= -delta``,
    spends at most ``delta`` reduced cost and places per shape a count in the window of
    ``delta``. Each stage enumerates those patterns (maximal ones suffice: jobs can be
    dropped), cuts them to the window and solves the pattern MILP so restricted: its
    optimum ``v`` gives the bound ``max(v, z_lp - delta)``, and ``v >= z_lp - delta`` is a
    proof. Stages start at ``STAGE_GAP * z_lp`` and widen (by GROWTH) up to ``z_lp - lb``,
    where the stage holds every better solution: a good incumbent keeps that stage small.
    """
    sol = _pattern_ip(master, min(deadline, time.perf_counter() + QUICK_IP), rel_gap)
    best = (sol.objective, master.chosen(sol.x)) if sol.x is not None else None
    lb = max(lb, best[0] if best else lb)
    info["quick_incumbent"] = (round(lb, 6), round(sol.time, 3))
    bound, delta = z_lp, STAGE_GAP * abs(z_lp)
    pad = 1e-9 * max(1.0, abs(z_lp))  # numerical slack on windows (``tol`` only decides when to stop)
    stages = []
    while time.perf_counter() < deadline and bound - lb > tol:
        delta = min(delta, z_lp - lb)
        if not _enumerate(master, pi, mu, delta + pad, info):
            break
        stage = master.projected(pi, mu, delta + pad)
        inside = best is not None and best[0] >= z_lp - delta - pad  # a start outside the window only slows HiGHS
        start = stage.point(best[1]) if inside and best is not None else None
        sol = _pattern_ip(stage, deadline, rel_gap, (pi, mu, delta + pad), start)
        stages.append((round(delta, 6), len(stage.columns), round(sol.objective, 6), sol.status, round(sol.time, 3)))
        if sol.x is not None and (best is None or sol.objective > best[0]):
            best = (sol.objective, stage.chosen(sol.x))
            lb = max(lb, sol.objective)
        if sol.status == "infeasible":  # nothing within delta of the LP bound
            bound = min(bound, max(lb, z_lp - delta))
        else:
            bound = min(bound, max(sol.bound, z_lp - delta))
            if sol.status != "optimal":
                break
        delta *= GROWTH
    info["proof_stages"] = stages
    return best, max(bound, lb)


def _pattern_ip(master: Master, deadline: float, rel_gap: float, budget=None, start: np.ndarray | None = None):
    """The pattern MILP, optionally from a ``start`` point (:meth:`Master.point`).

    ``budget = (pi, mu, delta)`` keeps (at least) the solutions within ``delta`` of the LP bound:
    they spend at most that much reduced cost, ``sum(-rc_p lam_p) <= delta``, and place per
    shape a count inside :meth:`Master.window` (the model is infeasible when there are none).
    """
    window = None if budget is None else master.window(budget[0], budget[2])
    model, lam, _ = master.build(integer=True, window=window)
    if budget is not None:
        pi, mu, delta = budget
        model.add_row(lam, master.reduced_costs(pi, mu), hi=delta)
    options = PATTERN_IP_OPTIONS if budget is None else PROOF_STAGE_OPTIONS
    return model.solve(max(deadline - time.perf_counter(), 0.1), rel_gap, options=options, start=start)


def _seed(master: Master, machine: np.ndarray) -> None:
    """Initial columns: the greedy answer's machine contents and single-shape patterns."""
    sh = master.sh
    shape_of_job = np.full(len(machine), -1)
    for s, rows in enumerate(sh.jobs):
        shape_of_job[rows] = s
    type_of = np.zeros(sum(len(g) for g in sh.types), dtype=np.int64)
    for t, group in enumerate(sh.types):
        type_of[group] = t
    for j in np.unique(machine[machine >= 0]).tolist():
        master.add(int(type_of[j]), np.bincount(shape_of_job[machine == j], minlength=sh.n_shapes))
    for t in range(len(sh.types)):
        for s in np.flatnonzero(sh.fit[t]).tolist():
            a = np.zeros(sh.n_shapes, dtype=np.int64)
            a[s] = sh.fit[t, s]
            while a[s] and not sh.feasible(t, a):
                a[s] -= 1
            master.add(t, a)


def _enumerate(master: Master, pi: np.ndarray, mu: np.ndarray, delta: float, info: dict) -> bool:
    """Add every maximal pattern with reduced cost >= -delta; False if there are too many."""
    before = len(master.columns)
    for t in range(len(master.sh.types)):
        found = enumerate_patterns(master.sh, t, pi, mu[t] - delta)
        if found is None:
            info["enumeration"] = f"over {MAX_ENUMERATED} patterns within {delta:.3g} of the LP bound"
            return False
        for a in found:
            master.add(t, a)
    info["enumerated"] = len(master.columns) - before
    return True


def _distribute(problem: BatchProblem, classes: list[JobClass], slots: np.ndarray, shape_of: np.ndarray,
                deadline: float, rel_gap: float, weighted_floor: float | None) -> np.ndarray:
    """Fill each machine's shape slots with classes, now under the per-machine density rule.

    Maximises the weighted objective (the job count when ``weighted_floor`` is set, keeping
    the weighted objective above it; the job count in exactly-once mode).
    """
    model = ClassModel(problem, classes, slots[:, shape_of].T > 0)
    for j, cs in model.on.items():
        for s in np.unique(shape_of[cs]).tolist():
            members = [c for c in cs if shape_of[c] == s]
            model.m.add_row([model.x[(c, j)] for c in members], 1.0, hi=float(slots[j, s]))
    if weighted_floor is not None:
        model.m.add_row(model.z, model.z_cost, lo=weighted_floor)
    if weighted_floor is not None or problem.exactly_once:
        model.m.set_objective(model.z, 1.0)
    sol = model.m.solve(max(deadline - time.perf_counter(), DISTRIBUTION_RESERVE), rel_gap)
    if sol.x is None:
        return np.full(problem.n_jobs, -1, dtype=np.int64)
    return expand(problem, classes, model.counts(sol.x))
