"""Node patterns: the configuration LP of the offline packing problem, by column generation (HiGHS).

A *pattern* of node group ``g`` (:class:`~quasched.optimize.shapes.NodeGroups`) is
what one node of ``g`` holds: pods of given shapes on given devices, within its
CPU and memory, a whole-GPU pod alone on each of its devices, sharing pods on
one device summing to at most 1000 milli. With ``z[g, p] ≥ 0`` nodes of ``g``
packed as pattern ``p``, the master problem is

    max Σ v_p z[g, p]   s.t.   Σ_p z[g, p] ≤ N_g  (dual μ_g),   Σ_{g,p} a_sp z[g, p] ≤ n_s  (dual π_s)

(``v_p`` the pattern's GPU milli, ``a_sp`` its pods of shape ``s``, ``n_s`` the pods
of shape ``s`` there are). Pricing group ``g`` is a one-node MILP,
``price_g = max Σ_s (v_s − π_s) a_s`` over its patterns; patterns worth more than
``μ_g`` enter. Every round, the Lagrangian bound (shape rows relaxed with the master's duals)

    Σ_s π_s n_s + Σ_g N_g · max(0, price_g)      (price_g: the pricing MILP's dual bound)

is an upper bound on any packing's GPU milli; at convergence it is the
configuration LP optimum, never above :func:`quasched.optimize.bound.gpu_bound`'s
(each of its rows is a sum of per-node rows every pattern satisfies). The integer
master over the generated patterns, warm-started from the rounded-down LP, is a
packing; :func:`place_patterns` binds it on the real cluster model, which checks
every placement.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.nodes import NodeSpec
from quasched.model.workload import FULL_GPU_MILLI, Workload
from quasched.optimize.highs import LinearModel
from quasched.optimize.shapes import NodeGroups, Shapes

TOLERANCE = 1e-6


@dataclass(frozen=True)
class Pattern:
    """One node's packing: its group and ``(shape, devices)`` per pod."""

    group: int
    pods: tuple[tuple[int, tuple[int, ...]], ...]

    def counts(self, n_shapes: int) -> np.ndarray:
        return np.bincount(np.array([s for s, _ in self.pods], dtype=np.int64), minlength=n_shapes)

    def key(self) -> tuple:
        return self.group, tuple(sorted(s for s, _ in self.pods))


@dataclass(frozen=True)
class PatternSolution:
    """Upper bound (the best Lagrangian, GPU milli), the last master LP, the integer packing as (pattern, nodes) pairs."""

    bound: float
    lp: float
    packing: list[tuple[Pattern, int]]
    packing_milli: int
    patterns: int
    rounds: int
    converged: bool


def solve_patterns(groups: NodeGroups, shapes: Shapes, initial: Sequence[Pattern] = (), rounds: int = 100,
                   seconds: float = 120.0, price_seconds: float = 5.0, milp_seconds: float = 30.0) -> PatternSolution:
    """Column generation from ``initial`` patterns until none prices out, ``rounds`` or ``seconds``; then the integer master."""
    columns = {p.key(): p for p in initial}
    bound, deadline, converged, done = float("inf"), time.perf_counter() + seconds, False, 0
    size, fits, value = groups.size, groups.fits(shapes), shapes.value
    while done < rounds and not converged:
        done += 1
        master = _master(list(columns.values()), shapes, size, integer=False)
        solution = master[0].solve(time_limit=60.0)
        pi, mu = master[1](solution.row_dual)
        lagrangian, entering, proven = float(pi @ shapes.count), [], True
        for g in np.flatnonzero(size * groups.cap[:, 2] > 0).tolist():
            pattern, price, optimal = _price(groups, shapes, g, np.where(fits[:, g], value - pi, 0.0), price_seconds)
            lagrangian += size[g] * max(0.0, price)
            if price - mu[g] > TOLERANCE * max(1.0, price):
                proven &= optimal  # a pricing stopped by its time limit proves nothing about better columns
                if pattern is not None:
                    entering.append(pattern)
        bound = min(bound, lagrangian)
        entering = [p for p in entering if p.key() not in columns]  # (one already there: round-off in the duals)
        converged = not entering and proven
        columns.update((p.key(), p) for p in entering)
        if not entering or time.perf_counter() > deadline:
            break
    patterns = list(columns.values())
    model, _ = _master(patterns, shapes, size, integer=True)
    last = solution if converged else _master(patterns, shapes, size, integer=False)[0].solve()  # with the last columns
    start = np.floor(last.x + TOLERANCE)
    packed = model.solve(time_limit=milp_seconds, rel_gap=1e-6, start=start)
    z = np.rint(packed.x if packed.x is not None else start).astype(np.int64)
    chosen = [(p, int(n)) for p, n in zip(patterns, z) if n > 0]
    milli = int(sum(n * int(value @ p.counts(len(shapes))) for p, n in chosen))
    return PatternSolution(bound, solution.objective, chosen, milli, len(patterns), done, converged)


def _master(patterns: list[Pattern], shapes: Shapes, size: np.ndarray, integer: bool):
    """The master model and a function from its row duals to (π per shape, μ per group)."""
    lm = LinearModel()
    counts = np.array([p.counts(len(shapes)) for p in patterns], dtype=float).reshape(len(patterns), len(shapes))
    group = np.array([p.group for p in patterns], dtype=np.int64)
    z = lm.add_vars(len(patterns), cost=counts @ shapes.value, integer=integer)  # no bounds: duals on the rows
    rows: list[tuple[str, int]] = []
    for g in np.unique(group).tolist():
        lm.add_row(z[group == g], 1.0, hi=float(size[g]))
        rows.append(("g", g))
    for s in np.flatnonzero(counts.sum(axis=0)).tolist():
        lm.add_row(z[counts[:, s] > 0], counts[counts[:, s] > 0, s], hi=float(len(shapes.rows[s])))
        rows.append(("s", s))

    def duals(row_dual: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        pi, mu = np.zeros(len(shapes)), np.zeros(len(size))
        for (kind, i), y in zip(rows, row_dual if row_dual is not None else np.zeros(len(rows))):
            (mu if kind == "g" else pi)[i] = max(0.0, y)
        return pi, mu

    return lm, duals


def _price(groups: NodeGroups, shapes: Shapes, g: int, reduced: np.ndarray,
           seconds: float) -> tuple[Pattern | None, float, bool]:
    """The best pattern of group ``g`` for reduced values ``reduced`` (S,), the MILP's upper bound on its value, and
    whether the MILP proved it (else it stopped at its time limit)."""
    cpu, mem, devices = groups.cap[g].tolist()
    pick = np.flatnonzero(reduced > TOLERANCE)
    whole, share = pick[shapes.m[pick] >= FULL_GPU_MILLI], pick[shapes.m[pick] < FULL_GPU_MILLI]
    if not len(pick):
        return None, 0.0, True
    count = shapes.count
    lm = LinearModel()
    x = lm.add_vars(len(whole), ub=np.minimum(count[whole], devices // shapes.k[whole]).astype(float),
                    cost=reduced[whole], integer=True)
    y = lm.add_vars(len(share) * devices, ub=np.repeat(np.minimum(count[share], FULL_GPU_MILLI // shapes.m[share]), devices)
                    .astype(float), cost=np.repeat(reduced[share], devices), integer=True).reshape(len(share), devices)
    w = lm.add_vars(devices, ub=1.0, integer=True)  # device d held by whole-GPU pods
    lm.add_row(np.concatenate([x, w]), np.concatenate([shapes.k[whole], -np.ones(devices)]), lo=0.0, hi=0.0)
    load = [(np.concatenate([[w[d]], y[:, d]]), np.concatenate([[FULL_GPU_MILLI], shapes.m[share]])) for d in range(devices)]
    for d, (index, milli) in enumerate(load):
        lm.add_row(index, milli, hi=float(FULL_GPU_MILLI))
        if d + 1 < devices:  # symmetry: whole-GPU devices first, then sharing devices by load, descending
            lm.add_row([w[d], w[d + 1]], [1.0, -1.0], lo=0.0)
            lm.add_row(np.concatenate([index, load[d + 1][0]]), np.concatenate([milli, -load[d + 1][1]]), lo=0.0)
    for need, cap in ((shapes.cpu, cpu), (shapes.mem, mem)):
        lm.add_row(np.concatenate([x, y.ravel()]), np.concatenate([need[whole], np.repeat(need[share], devices)]),
                   hi=float(cap))
    for i, s in enumerate(share.tolist()):
        lm.add_row(y[i], 1.0, hi=float(count[s]))
    solution = lm.solve(time_limit=seconds, rel_gap=1e-9)
    optimal = solution.status == "optimal"
    if solution.x is None:
        return None, solution.bound, optimal
    return _pattern(g, whole, share, shapes.k, np.rint(solution.x).astype(np.int64), x, y), solution.bound, optimal


def _pattern(g: int, whole: np.ndarray, share: np.ndarray, k: np.ndarray, v: np.ndarray, x: np.ndarray,
             y: np.ndarray) -> Pattern:
    """Read a pricing solution: whole-GPU pods on devices 0, 1, … in turn, sharing pods where ``y`` puts them."""
    pods: list[tuple[int, tuple[int, ...]]] = []
    next_device = 0
    for s, n in zip(whole.tolist(), v[x].tolist()):
        for _ in range(n):
            pods.append((s, tuple(range(next_device, next_device + int(k[s])))))
            next_device += int(k[s])
    for i, s in enumerate(share.tolist()):
        for d, n in enumerate(v[y[i]].tolist()):
            pods.extend([(s, (d,))] * n)
    return Pattern(g, tuple(pods))


def patterns_of(cluster: Cluster, groups: NodeGroups, shapes: Shapes, workload: Workload) -> list[Pattern]:
    """The pattern of every node of a packed ``cluster`` whose pods are rows of ``workload`` (uid = row)."""
    group_of = np.empty(cluster.n_nodes, dtype=np.int64)
    for g, members in enumerate(groups.members):
        group_of[members] = g
    shape_of = np.full(len(workload), -1, dtype=np.int64)
    for s, rows in enumerate(shapes.rows):
        shape_of[rows] = s
    pods: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
    for uid, placement in cluster.placements.items():
        if shape_of[uid] >= 0:
            pods.setdefault(placement.node, []).append((int(shape_of[uid]), placement.devices))
    return [Pattern(int(group_of[n]), tuple(p)) for n, p in sorted(pods.items())]


def place_patterns(cluster: Cluster, groups: NodeGroups, shapes: Shapes, workload: Workload,
                   packing: list[tuple[Pattern, int]]) -> None:
    """Bind ``packing`` on ``cluster``: each group's nodes in order take its patterns, each shape its rows in order."""
    next_row = np.zeros(len(shapes), dtype=np.int64)
    next_node = np.zeros(len(groups.members), dtype=np.int64)
    for pattern, n in packing:
        for node in groups.members[pattern.group][next_node[pattern.group]:next_node[pattern.group] + n].tolist():
            for s, devices in pattern.pods:
                cluster.place(workload.pod(int(shapes.rows[s][next_row[s]])), node, devices)
                next_row[s] += 1
        next_node[pattern.group] += n


def pattern_packing(nodes: NodeSpec, workload: Workload, packed: Sequence[Cluster] = (), rounds: int = 100,
                    seconds: float = 120.0) -> tuple[PatternSolution, Cluster]:
    """:func:`solve_patterns` on ``workload``'s GPU pods, starting from the patterns of ``packed`` clusters of
    ``nodes`` (uid = workload row), and its packing bound on a fresh :class:`Cluster`."""
    shapes, groups = Shapes.of(workload), NodeGroups.of(nodes)
    initial = [p for cluster in packed for p in patterns_of(cluster, groups, shapes, workload)]
    solution = solve_patterns(groups, shapes, initial, rounds=rounds, seconds=seconds)
    cluster = Cluster(nodes)
    place_patterns(cluster, groups, shapes, workload, solution.packing)
    return solution, cluster
