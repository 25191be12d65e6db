"""QUBOs: placing jobs on machines, and the pricing subproblem of the decomposition.

Binary ``x[i, j]``: candidate ``i`` on machine ``j``. Energy, to minimise::

    - sum w_i x_ij                                   (priority, scaled to max 1)
    + P sum_i sum_{j<k} x_ij x_ik                    (at most once)
    + P sum_{j,r} ((sum_i d_ir x_ij + u_r s_jr - C_jr) / u_r)^2    (capacity, slack s)
    + P sum_{j, conflicting i<k} x_ij x_kj           (heavy anti-colocation)
    + P sum_{j,a} (sum_{i in a} x_ij + t_ja - L_a)^2  (app density, slack t)

Slacks are binary with coefficients 1, 2, 4, ... and a capped last one, so they
cover exactly 0..C/u. The unit ``u_r`` is the gcd of the requests and the
capacity, so every residual is an integer number of units and any violation
costs at least ``P``; with ``P = penalty * max w`` (``penalty`` > 1) breaking
a constraint to add a job never pays. ``max_slack_bits`` coarsens units
(requests rounded up, capacity down: still safe) to save qubits for QAOA.
Rows that cannot bind for these candidates get no penalty at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import reduce

import dimod
import numpy as np
from numpy.typing import ArrayLike

from quasched.optimize.problem import BatchProblem

PENALTY = 2.0


@dataclass
class PlacementQubo:
    """A QUBO over ``(job, machine)`` pairs plus slack variables ``0..n_vars-1``."""

    jobs: np.ndarray
    machines: np.ndarray
    bqm: dimod.BinaryQuadraticModel
    pairs: list[tuple[int, int]] = field(default_factory=list)  # variable k -> (job, machine)

    @property
    def n_vars(self) -> int:
        return self.bqm.num_variables

    def decode(self, sample: np.ndarray) -> list[tuple[int, int]]:
        """(job, machine) pairs set in a sample (a 0/1 vector in variable order)."""
        return [self.pairs[k] for k in range(len(self.pairs)) if sample[k]]


def dense(bqm: dimod.BinaryQuadraticModel) -> tuple[np.ndarray, np.ndarray, float]:
    """(linear, upper-triangular quadratic, offset) of a BQM over variables 0..n-1."""
    n = bqm.num_variables
    lin = np.array([bqm.get_linear(v) for v in range(n)])
    quad = np.zeros((n, n))
    for (u, v), bias in bqm.quadratic.items():
        quad[min(u, v), max(u, v)] += bias
    return lin, quad, float(bqm.offset)


def _slack_coefficients(top: int) -> list[int]:
    """Binary coefficients whose subset sums are exactly 0..top."""
    coefs, total, bit = [], 0, 1
    while total + bit <= top:
        coefs.append(bit)
        total += bit
        bit *= 2
    if total < top:
        coefs.append(top - total)
    return coefs


def build_qubo(problem: BatchProblem, jobs: ArrayLike, machines: ArrayLike, free: np.ndarray | None = None,
               penalty: float = PENALTY, max_slack_bits: int | None = None) -> PlacementQubo:
    """QUBO placing ``jobs`` on ``machines`` (empty unless ``free`` (len(machines), R) says what is left)."""
    jobs, machines = np.asarray(jobs, dtype=np.int64), np.asarray(machines, dtype=np.int64)
    free = problem.capacity[machines] if free is None else np.asarray(free)
    weight = problem.weight[jobs] / max(float(problem.weight[jobs].max(initial=0)), 1e-300)
    big = penalty * float(weight.max(initial=1.0))
    bqm = dimod.BinaryQuadraticModel("BINARY")
    pairs: list[tuple[int, int]] = []
    var: dict[tuple[int, int], int] = {}
    for a, i in enumerate(jobs.tolist()):
        for b, j in enumerate(machines.tolist()):
            if problem.allowed[i, j] and np.all(problem.demand[i] <= free[b]):
                var[(i, j)] = len(pairs)
                pairs.append((i, j))
                bqm.add_linear(var[(i, j)], -weight[a])
    for i in jobs.tolist():
        mine = [var[(i, j)] for j in machines.tolist() if (i, j) in var]
        for p, u in enumerate(mine):
            for v in mine[p + 1:]:
                bqm.add_quadratic(u, v, big)
    for b, j in enumerate(machines.tolist()):
        here = [i for i in jobs.tolist() if (i, j) in var]
        _capacity(bqm, problem, j, here, var, free[b], big, max_slack_bits)
        for p, i in enumerate(here):
            for k in here[p + 1:]:
                if (problem.heavy_hi[i, j] and problem.heavy_lo[k, j]) or (problem.heavy_lo[i, j] and problem.heavy_hi[k, j]):
                    bqm.add_quadratic(var[(i, j)], var[(k, j)], big)
        _density(bqm, problem, here, var, j, big)
    return PlacementQubo(jobs, machines, bqm, pairs)


def _constraint(bqm: dimod.BinaryQuadraticModel, terms: list[tuple[int, int]], top: int, big: float) -> None:
    """Penalise ``sum c*x > top`` via ``big * (sum c*x + slack - top)^2`` (integer coefficients)."""
    slack = [(bqm.num_variables + k, c) for k, c in enumerate(_slack_coefficients(top))]
    for v, _ in slack:
        bqm.add_variable(v)
    bqm.add_linear_equality_constraint(terms + slack, big, -top)


def slack_unit(need: np.ndarray, cap: int, max_slack_bits: int | None, candidates: int = 256) -> int:
    """Unit of a capacity row: the gcd of ``need`` and ``cap`` (exact), or with ``max_slack_bits``
    the multiple of it with at most ``2**bits - 1`` units of capacity that wastes least.

    Requests are rounded up to units (safe), so a coarse unit can shut out tight machine
    contents: 16.25 GiB units turn 3 x 320 + 40 + 16 = 1,016 GiB into 64 units of 63. The
    waste of a unit is the capacity lost to rounding, summed over the requests and the
    capacity itself; 8 GiB units lose nothing on those jobs.
    """
    gcd = reduce(math.gcd, need.tolist() + [cap]) or 1
    if max_slack_bits is None or cap // gcd <= 2 ** max_slack_bits - 1:
        return gcd
    first = -(-cap // (gcd * (2 ** max_slack_bits - 1)))
    units = gcd * np.arange(first, first + candidates, dtype=np.int64)
    waste = (-(-need[None, :] // units[:, None]) * units[:, None] - need[None, :]).sum(axis=1) + cap % units
    return int(units[np.argmin(waste)])


def _capacity(bqm, problem: BatchProblem, j: int, here: list[int], var: dict, free: np.ndarray, big: float,
              max_slack_bits: int | None) -> None:
    for r in range(len(problem.resources)):
        d = problem.demand[here, r].astype(np.int64)
        cap = int(free[r])
        if d.sum() <= cap:
            continue
        unit = slack_unit(d, cap, max_slack_bits)
        coef = -(-d // unit)  # rounded up: never admits an over-full machine
        terms = [(var[(i, j)], int(c)) for i, c in zip(here, coef.tolist()) if c]
        _constraint(bqm, terms, cap // unit, big)


def _density(bqm, problem: BatchProblem, here: list[int], var: dict, j: int, big: float) -> None:
    by_app: dict[int, list[int]] = {}
    for i in here:
        if problem.app[i] >= 0 and problem.limit[i] >= 1:
            by_app.setdefault(int(problem.app[i]), []).append(i)
    for a, members in by_app.items():
        same_app = [i for i in here if problem.app[i] == a]
        limit = int(min(problem.limit[i] for i in members))
        if len(same_app) > limit:
            _constraint(bqm, [(var[(i, j)], 1) for i in same_app], limit, big)


@dataclass
class PatternQubo:
    """Pricing QUBO: how many jobs of each shape one machine of a type takes, at shape prices.

    Counts are binary-encoded (capped powers of two); variable ``k < len(bits)``
    adds ``bits[k][1]`` jobs of shape ``bits[k][0]``; slack variables follow.
    """

    bits: list[tuple[int, int]]
    bqm: dimod.BinaryQuadraticModel
    n_shapes: int

    @property
    def n_vars(self) -> int:
        return self.bqm.num_variables

    def counts(self, samples: np.ndarray) -> np.ndarray:
        """Shape counts of a sample (or of each row of a 2-D array of samples)."""
        per_bit = np.zeros((len(self.bits), self.n_shapes), dtype=np.int64)
        for k, (s, c) in enumerate(self.bits):
            per_bit[k, s] = c
        return np.asarray(samples, dtype=np.int64)[..., :len(self.bits)] @ per_bit


def pattern_qubo(demand: np.ndarray, capacity: np.ndarray, fit: np.ndarray, hi: np.ndarray, lo_only: np.ndarray,
                 price: np.ndarray, shapes: np.ndarray, penalty: float = PENALTY,
                 max_slack_bits: int | None = None, unbalanced: tuple[float, float] | None = None) -> PatternQubo:
    """Maximise ``price @ a`` over shape counts ``a`` (only ``shapes``) that fit one machine.

    Capacity rows use slack variables, or with ``unbalanced = (l1, l2)`` no
    slack at all: ``-l1 h + l2 h^2`` with ``h = 1 - use / capacity`` (the
    unbalanced penalisation of Montanez-Barrera et al.), which favours
    ``h`` slightly above 0 and punishes ``h < 0`` but can admit overfull
    answers: every sample is checked.
    """
    top = float(max(price[shapes].max(initial=0.0), 1e-12))
    bqm = dimod.BinaryQuadraticModel("BINARY")
    bits = [(int(s), c) for s in shapes.tolist() for c in _slack_coefficients(int(fit[s]))]
    for k in range(len(bits)):
        bqm.add_variable(k)
    big = penalty * max((price[s] * c / top for s, c in bits), default=1.0)
    for k, (s, c) in enumerate(bits):
        bqm.add_linear(k, -price[s] * c / top)
    for r in range(demand.shape[1]):
        need = np.array([demand[s, r] * c for s, c in bits], dtype=np.int64)
        cap = int(capacity[r])
        if need.sum() <= cap:
            continue
        if unbalanced is not None:
            _unbalanced(bqm, need / cap, *unbalanced)
            continue
        unit = slack_unit(need, cap, max_slack_bits)
        _constraint(bqm, [(k, int(v)) for k, v in enumerate((-(-need // unit)).tolist()) if v], cap // unit, big)
    heavy = [k for k, (s, _) in enumerate(bits) if hi[s]]
    light = [k for k, (s, _) in enumerate(bits) if lo_only[s]]
    for p, u in enumerate(heavy):
        for v in heavy[p + 1:] + light:
            bqm.add_quadratic(u, v, big)
    return PatternQubo(bits, bqm, len(price))


def _unbalanced(bqm: dimod.BinaryQuadraticModel, share: np.ndarray, l1: float, l2: float) -> None:
    """Add ``-l1 h + l2 h^2`` for ``h = 1 - share @ x`` (constant terms dropped)."""
    for k, a in enumerate(share.tolist()):
        if a:
            bqm.add_linear(k, l1 * a - 2 * l2 * a + l2 * a * a)
    nonzero = np.flatnonzero(share)
    for p, k in enumerate(nonzero.tolist()):
        for m in nonzero[p + 1:].tolist():
            bqm.add_quadratic(k, m, 2 * l2 * share[k] * share[m])


def placement_ok(problem: BatchProblem, machine: np.ndarray) -> bool:
    """Solver-side check of a machine vector (the verifier re-checks independently)."""
    for j in np.unique(machine[machine >= 0]).tolist():
        rows = np.flatnonzero(machine == j)
        if np.any(problem.demand[rows].sum(axis=0) > problem.capacity[j]) or not problem.allowed[rows, j].all():
            return False
        hi, lo = problem.heavy_hi[rows, j], problem.heavy_lo[rows, j]
        if hi.sum() > 1 or (hi.any() and lo.sum() > 1):
            return False
        limited = rows[problem.limit[rows] >= 1]
        if any(np.sum(problem.app[rows] == problem.app[i]) > problem.limit[i] for i in limited.tolist()):
            return False
    return True


def decode_placement(qubo: PlacementQubo, sample: np.ndarray, n_jobs: int) -> np.ndarray | None:
    """Machine vector of a placement sample; None when a job is placed twice."""
    machine = np.full(n_jobs, -1, dtype=np.int64)
    for i, j in qubo.decode(sample):
        if machine[i] >= 0:
            return None
        machine[i] = j
    return machine
