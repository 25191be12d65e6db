"""Machine patterns over job shapes: column generation, then an exact pattern MILP.

A *shape* is a request vector plus GPU spec; a *pattern* says how many jobs of
each shape one machine of a type holds (capacity and anti-colocation depend on
the shape only). The master problem chooses how many machines use each pattern
(``lam``) and how many jobs of each shape are placed, heaviest first, with
``placed_s <= sum_p a_ps lam_p`` per shape and ``sum_p lam_p <= M_t`` per
machine type. It relaxes only the per-machine app density rule, which
:func:`quasched.optimize.milp.solve_milp` restores when it assigns apps to the
chosen slots.

Optimality: after column generation the LP bound ``z_lp`` and duals give each
pattern a reduced cost ``rc_p <= 0``, and every integer solution is worth at
most ``z_lp + sum_p rc_p lam_p``. A solution better than a known one of value
``lb`` therefore uses only patterns with ``rc_p >= lb - z_lp``; the patterns
are enumerated (maximal ones suffice: jobs can always be dropped) and the
pattern MILP over them is exact.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from quasched.optimize.classes import JobClass, machine_types
from quasched.optimize.highs import LinearModel
from quasched.optimize.problem import BatchProblem

TOL = 1e-9
MAX_ENUMERATED = 20_000
#: the exact MILP prices segment weights below this share of the heaviest at 0: they sit under HiGHS's cost tolerance
#: ("excessively small costs": fairness decay 0.6 makes an app's 500th job weigh 1e-111), only slow its search
#: (qua-greedy at 20 machines: 13.9 -> 5.9 s with highspy 1.16.0) and move no objective by more than their sum;
#: the heuristic decomposition keeps them (it changed its path there: BENCHMARKS.md)
NEGLIGIBLE = 1e-9


@dataclass
class Shapes:
    """Shapes of a problem's job classes and what one machine of each type can hold."""

    shape_of: np.ndarray  # (C,) shape of each class
    demand: np.ndarray  # (S, R)
    available: np.ndarray  # (S,) jobs of each shape
    types: list[np.ndarray]  # machine indices per type
    capacity: np.ndarray  # (T, R)
    jobs: list[np.ndarray]  # job indices of each shape
    fit: np.ndarray  # (T, S) most jobs of the shape one machine holds alone (0: never)
    hi: np.ndarray  # (T, S) heavy by the hi thresholds
    lo_only: np.ndarray  # (T, S) heavy by the lo thresholds only

    @property
    def n_shapes(self) -> int:
        return len(self.demand)

    def feasible(self, t: int, a: np.ndarray) -> bool:
        """Whether counts ``a`` fit one machine of type ``t``."""
        return bool(self.feasible_rows(t, a[None])[0])

    def feasible_rows(self, t: int, a: np.ndarray) -> np.ndarray:
        """Which rows of counts ``a`` (P, S) fit one machine of type ``t``."""
        ok = np.all((a >= 0) & (a <= self.fit[t]), axis=1) & np.all(a @ self.demand <= self.capacity[t], axis=1)
        heavy = a[:, self.hi[t]].sum(axis=1)
        return ok & (heavy <= 1) & ((heavy == 0) | (a[:, self.lo_only[t]].sum(axis=1) == 0))


def shapes(problem: BatchProblem, classes: list[JobClass]) -> Shapes:
    """The job classes merged into distinct (demand, GPU spec) shapes, priced against each machine type
    (jobs per shape, how many one machine holds, heavy flags): the column-generation view of ``problem``."""
    keys: dict[tuple, int] = {}
    shape_of = np.array([
        keys.setdefault((tuple(c.demand.tolist()), str(problem.job_gpu_model[c.jobs[0]])), len(keys)) for c in classes
    ], dtype=np.int64)
    first = np.zeros(len(keys), dtype=np.int64)
    available = np.zeros(len(keys), dtype=np.int64)
    for c, s in zip(classes, shape_of.tolist()):
        first[s] = c.jobs[0]
        available[s] += c.size
    demand = problem.demand[first]
    types = machine_types(problem)
    rep = np.array([g[0] for g in types])
    capacity = problem.capacity[rep]
    with np.errstate(divide="ignore"):
        per_resource = np.where(demand[None] > 0, capacity[:, None, :] // np.maximum(demand[None], 1), 1 << 40)
    fit = np.minimum(per_resource.min(axis=2), available[None])
    hi = problem.heavy_hi[np.ix_(first, rep)].T
    lo_only = problem.heavy_lo[np.ix_(first, rep)].T & ~hi
    fit = np.where(problem.allowed[np.ix_(first, rep)].T, fit, 0)
    fit = np.where(hi, np.minimum(fit, 1), fit)
    fit = np.minimum(fit, _density_caps(classes, shape_of, len(keys))[None])
    jobs = [np.concatenate([c.jobs for c, k in zip(classes, shape_of.tolist()) if k == s]) for s in range(len(keys))]
    return Shapes(shape_of, demand, available, types, capacity, jobs, fit.astype(np.int64), hi, lo_only)


def _density_caps(classes: list[JobClass], shape_of: np.ndarray, n_shapes: int) -> np.ndarray:
    """Most jobs of each shape one machine can hold under the app density rule.

    An app puts at most its largest limit on a machine (no bound if one of its
    jobs has none), so a shape fits at most the sum over its apps.
    """
    per_app: dict[tuple[int, int], float] = {}
    for cls, s in zip(classes, shape_of.tolist()):
        key = (s, cls.app if cls.app >= 0 else -1 - int(cls.jobs[0]))
        limit = cls.limit if cls.limit >= 1 else np.inf
        per_app[key] = max(per_app.get(key, 0.0), limit)
    caps = np.zeros(n_shapes)
    for (s, _), limit in per_app.items():
        caps[s] += limit
    return np.minimum(caps, 1 << 40).astype(np.int64)


@dataclass
class Master:
    """The pattern master problem over shapes, and its columns.

    A shape's value is concave in the number placed: the heaviest of its jobs
    first (which is earliest-first within each app), as segments of equal
    weight. Rows: one per shape (placed <= slots), then one per machine type.
    Segments lighter than ``negligible`` x the heaviest (the exact MILP passes
    :data:`NEGLIGIBLE`) are priced at 0; ``neglected`` (their total weight) is
    what a bound must add back.
    """

    sh: Shapes
    weights: np.ndarray  # (n,) job values
    columns: list[tuple[int, np.ndarray]] = field(default_factory=list)
    seen: set = field(default_factory=set)
    negligible: float = 0.0

    def __post_init__(self) -> None:
        shape, weight, count = [], [], []
        for s in range(self.sh.n_shapes):
            values, counts = np.unique(self.weights[self.sh.jobs[s]], return_counts=True)
            shape += [s] * len(values)
            weight += values.tolist()
            count += counts.tolist()
        self.seg_shape, self.seg_weight, self.seg_count = np.array(shape), np.array(weight, dtype=float), np.array(count)
        tiny = self.seg_weight < self.negligible * self.seg_weight.max(initial=0.0)
        self.neglected = float(self.seg_weight[tiny] @ self.seg_count[tiny])
        self.seg_weight[tiny] = 0.0

    def add(self, t: int, a: np.ndarray) -> bool:
        key = (t, a.tobytes())
        if key in self.seen or not a.any():
            return False
        self.seen.add(key)
        self.columns.append((t, a.astype(np.int64)))
        return True

    def build(self, integer: bool, window: tuple[np.ndarray, np.ndarray] | None = None
              ) -> tuple[LinearModel, np.ndarray, np.ndarray]:
        """Model, pattern columns and segment columns.

        The integer model also carries ``placed_s`` as integer variables (after the segments):
        implied by integer patterns at any optimum, but branching on these 25-odd totals
        instead of on thousands of near-duplicate pattern columns proves Qua's instances
        10-100x faster. ``window`` bounds those totals (see :meth:`window`).
        """
        sh = self.sh
        m = LinearModel()
        lam = m.add_vars(len(self.columns), 0, [len(sh.types[t]) for t, _ in self.columns], integer=integer)
        z = m.add_vars(len(self.seg_shape), 0, self.seg_count, cost=self.seg_weight)
        lo, hi = window if window is not None else (0, sh.available)
        placed = m.add_vars(sh.n_shapes, lo, hi, integer=True) if integer else None
        a = self.matrix()
        for s in range(sh.n_shapes):
            segs = np.flatnonzero(self.seg_shape == s)
            used = np.flatnonzero(a[:, s])
            m.add_row(np.concatenate([z[segs], lam[used]]), np.concatenate([np.ones(len(segs)), -a[used, s]]),
                      hi=0.0)
            if placed is not None:
                m.add_row(np.append(z[segs], placed[s]), np.append(np.ones(len(segs)), -1.0), lo=0.0, hi=0.0)
        for t, group in enumerate(sh.types):
            m.add_row(lam[[k for k, (tt, _) in enumerate(self.columns) if tt == t]], 1.0, hi=float(len(group)))
        return m, lam, z

    def matrix(self) -> np.ndarray:
        """(P, S) jobs of each shape per pattern."""
        return np.array([col for _, col in self.columns], dtype=np.int64).reshape(len(self.columns), -1)

    def point(self, chosen: list[tuple[int, np.ndarray, int]]) -> np.ndarray:
        """The integer model's full variable vector for the machine contents ``chosen`` (added as
        columns when missing): every covered slot filled, heaviest segments first."""
        for t, a, _ in chosen:
            self.add(t, a)
        index = {(t, a.tobytes()): k for k, (t, a) in enumerate(self.columns)}
        counts = np.zeros(len(self.columns))
        for t, a, count in chosen:
            counts[index[(t, a.astype(np.int64).tobytes())]] += count
        cover = np.minimum(counts @ self.matrix(), self.sh.available)
        z = np.zeros(len(self.seg_shape))
        for s in range(self.sh.n_shapes):
            left = cover[s]
            for g in np.flatnonzero(self.seg_shape == s)[np.argsort(-self.seg_weight[self.seg_shape == s],
                                                                     kind="stable")]:
                z[g] = min(self.seg_count[g], left)
                left -= z[g]
        return np.concatenate([counts, z, cover])

    def chosen(self, x: np.ndarray) -> list[tuple[int, np.ndarray, int]]:
        """Machine contents ``(type, pattern, machines)`` of an integer model's solution."""
        lam = np.round(x[:len(self.columns)]).astype(np.int64)
        return [(t, a, int(k)) for (t, a), k in zip(self.columns, lam.tolist()) if k > 0]

    def projected(self, pi: np.ndarray, mu: np.ndarray, delta: float) -> Master:
        """A master over this one's columns cut to the shape window of ``delta`` (``min(a, hi)``),
        keeping those within ``delta`` reduced cost.

        A solution within ``delta`` of the LP bound places at most ``hi_s`` jobs of shape ``s``,
        so one machine never needs more; cutting patterns merges many that differ only there
        (a quarter fewer columns, twice as fast on Qua's instances). The cut pattern's own
        reduced cost is valid in the budget row: cutting lowers a solution's coverage slack by
        exactly what it lowers the reduced costs.
        """
        _, hi = self.window(pi, delta)
        out = Master(self.sh, self.weights, negligible=self.negligible)
        for t, a in self.columns:
            cut = np.minimum(a, hi)
            if mu[t] - pi @ cut <= delta:
                out.add(t, cut)
        return out

    def window(self, pi: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
        """Jobs placed per shape in any solution within ``delta`` of the LP bound at prices ``pi``.

        A solution's value is the LP bound minus nonnegative terms, among them each shape's
        loss ``max_n g_s(n) - g_s(placed_s)`` with ``g_s(n) = V_s(n) - pi_s n`` (``V_s``: the
        ``n`` heaviest jobs as priced here, negligible ones at 0), so every shape's loss is at most ``delta``.
        """
        lo = np.zeros(self.sh.n_shapes, dtype=np.int64)
        hi = np.zeros(self.sh.n_shapes, dtype=np.int64)
        for s in range(self.sh.n_shapes):
            seg = self.seg_shape == s
            priced = np.sort(np.repeat(self.seg_weight[seg], self.seg_count[seg]))[::-1]
            g = np.concatenate([[0.0], np.cumsum(priced)]) - pi[s] * np.arange(len(priced) + 1)
            inside = np.flatnonzero(g >= g.max() - delta)
            lo[s], hi[s] = inside[0], inside[-1]
        return lo, hi

    def reduced_costs(self, pi: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """``-rc_p >= 0`` of every column at duals ``(pi, mu)``."""
        types = np.array([t for t, _ in self.columns], dtype=np.int64)
        return np.maximum(mu[types] - self.matrix() @ pi, 0.0)

    def duals(self, row_dual: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Shape prices and machine-type prices from the LP row duals."""
        s = self.sh.n_shapes
        return np.maximum(row_dual[:s], 0.0), np.maximum(row_dual[s:s + len(self.sh.types)], 0.0)

    def slots(self, chosen: list[tuple[int, np.ndarray, int]]) -> np.ndarray:
        """(m, S) jobs of each shape per machine for machine contents ``chosen``."""
        out = np.zeros((sum(len(g) for g in self.sh.types), self.sh.n_shapes), dtype=np.int64)
        free = [list(group) for group in self.sh.types]
        for t, a, count in chosen:
            for _ in range(count):
                out[free[t].pop(0)] = a
        return out


#: ``pricer(shapes, type, prices) -> (patterns, proven)``, as :func:`price`
Pricer = Callable[[Shapes, int, np.ndarray], tuple[list[np.ndarray], bool]]


def price(sh: Shapes, t: int, pi: np.ndarray) -> tuple[list[np.ndarray], bool]:
    """Most valuable pattern of type ``t`` under shape prices ``pi`` (small MILP), and whether proven."""
    useful = np.flatnonzero((pi > TOL) & (sh.fit[t] > 0))
    a = np.zeros(sh.n_shapes, dtype=np.int64)
    if not len(useful):
        return [a], True
    m = LinearModel()
    x = m.add_vars(len(useful), 0, sh.fit[t, useful], cost=pi[useful], integer=True)
    _pattern_rows(m, sh, t, useful, x)
    sol = m.solve(time_limit=5.0, rel_gap=1e-9)
    if sol.x is None:
        return [], False
    a[useful] = np.round(sol.x[x]).astype(np.int64)
    return [a], sol.status == "optimal"


def _pattern_rows(m: LinearModel, sh: Shapes, t: int, idx: np.ndarray, x: np.ndarray) -> None:
    for r in range(sh.demand.shape[1]):
        if sh.demand[idx, r] @ sh.fit[t, idx] > sh.capacity[t, r]:
            m.add_row(x, sh.demand[idx, r], hi=float(sh.capacity[t, r]))
    hi, lo = sh.hi[t, idx], sh.lo_only[t, idx]
    if hi.sum() > 1:
        m.add_row(x[hi], 1.0, hi=1.0)
    if hi.any() and lo.any():
        big = float(sh.fit[t, idx][lo].sum())
        m.add_row(np.concatenate([x[lo], x[hi]]), np.concatenate([np.ones(lo.sum()), np.full(hi.sum(), big)]), hi=big)


def generate(master: Master, deadline: float, pricer: Pricer | None = None, patience: int = 0) -> tuple[float, np.ndarray, np.ndarray, bool]:
    """Column generation: LP value, final duals, and whether it provably converged.

    ``pricer(shapes, type, prices) -> (patterns, proven)`` returns candidate
    patterns (default: the exact MILP :func:`price`, one pattern); every one
    with positive reduced cost joins. The LP value is a bound only when
    converged. A heuristic pricer gets ``patience`` more tries when it finds no column.
    """
    pricer = pricer or price
    misses = 0
    while True:
        m, *_ = master.build(integer=False)
        sol = m.solve(time_limit=max(deadline - time.perf_counter(), 0.1))
        if sol.status != "optimal" or sol.row_dual is None:
            raise RuntimeError(f"master LP: {sol.status}")
        pi, mu = master.duals(sol.row_dual)
        added, exact = False, True
        for t in range(len(master.sh.types)):
            patterns, optimal = pricer(master.sh, t, pi)
            exact &= optimal
            for a in patterns:
                if pi @ a - mu[t] > 1e-7 and master.add(t, a):
                    added = True
        misses = 0 if added else misses + 1
        if (not added and (exact or misses > patience)) or time.perf_counter() > deadline:
            return sol.objective, pi, mu, exact and not added


def enumerate_patterns(sh: Shapes, t: int, pi: np.ndarray, floor: float,
                       limit: int = MAX_ENUMERATED) -> list[np.ndarray] | None:
    """Maximal patterns of type ``t`` worth at least ``floor`` at prices ``pi``; None past ``limit``."""
    order = [s for s in np.argsort(-pi, kind="stable").tolist() if sh.fit[t, s] > 0]
    k_max, n_res = len(order), sh.demand.shape[1]
    dem = [tuple(int(v) for v in sh.demand[s]) for s in order]
    price_ = [float(pi[s]) for s in order]
    fit = [int(sh.fit[t, s]) for s in order]
    hi = [bool(sh.hi[t, s]) for s in order]
    lo = [bool(sh.lo_only[t, s]) for s in order]
    cap = [int(v) for v in sh.capacity[t]]
    # suffix bounds: best price per unit of each resource, and total price of the rest at full fit
    ratio = [[0.0] * n_res for _ in range(k_max + 1)]
    total = [0.0] * (k_max + 1)
    for k in range(k_max - 1, -1, -1):
        total[k] = total[k + 1] + price_[k] * fit[k]
        ratio[k] = [max(ratio[k + 1][r], price_[k] / dem[k][r] if dem[k][r] else float("inf"))
                    for r in range(n_res)]
    counts = [0] * k_max
    used = [0] * n_res
    out: list[np.ndarray] = []
    state = {"hi": 0, "lo": 0}

    def can_add(q: int) -> bool:
        if counts[q] >= fit[q] or any(used[r] + dem[q][r] > cap[r] for r in range(n_res)):
            return False
        if hi[q]:
            return state["hi"] == 0 and state["lo"] == 0
        return not (lo[q] and state["hi"])

    def bound(k: int) -> float:
        best = total[k]
        for r in range(n_res):
            if ratio[k][r] != float("inf"):
                best = min(best, ratio[k][r] * (cap[r] - used[r]))
        return best

    def dfs(k: int, value: float) -> bool:
        if value + bound(k) < floor - TOL:
            return True
        if k == k_max:
            if not any(can_add(q) for q in range(k_max)):
                a = np.zeros(sh.n_shapes, dtype=np.int64)
                a[order] = counts
                out.append(a)
            return len(out) <= limit
        placed = 0
        while can_add(k):
            _step(k, +1)
            placed += 1
        for _ in range(placed + 1):
            if not dfs(k + 1, value + price_[k] * counts[k]):
                return False
            if counts[k]:
                _step(k, -1)
        return True

    def _step(k: int, sign: int) -> None:
        counts[k] += sign
        for r in range(n_res):
            used[r] += sign * dem[k][r]
        state["hi"] += sign * hi[k]
        state["lo"] += sign * lo[k]

    return out if dfs(0, 0.0) else None
