"""QUBO-SA: simulated annealing (``dwave-samplers``) as the QUBO solver of the decomposition."""

from __future__ import annotations

from collections.abc import Callable

import dimod
import numpy as np
from dwave.samplers import SimulatedAnnealingSampler

from quasched.optimize.assignment import Assignment, no_answer
from quasched.optimize.decompose import QuboPricer, solve_decomposed
from quasched.optimize.problem import BatchProblem
from quasched.optimize.qubo import PatternQubo, PlacementQubo, build_qubo, decode_placement, placement_ok

#: a QUBO solver: QUBO -> samples (rows of 0/1 in variable order), best first
QuboSolver = Callable[[PlacementQubo | PatternQubo], np.ndarray]


def ordered(sampleset: dimod.SampleSet, n_vars: int) -> np.ndarray:
    """Samples as rows in variable order 0..n-1, lowest energy first."""
    order = np.argsort(sampleset.record.energy, kind="stable")
    columns = [list(sampleset.variables).index(v) for v in range(n_vars)]
    return sampleset.record.sample[order][:, columns]


def annealer(reads: int = 32, sweeps: int = 1000, seed: int = 0) -> QuboSolver:
    """A QUBO solver running ``reads`` independent anneals of ``sweeps`` sweeps each."""
    sampler = SimulatedAnnealingSampler()
    rng = np.random.default_rng(seed)

    def solve(qubo: PlacementQubo | PatternQubo) -> np.ndarray:
        result = sampler.sample(qubo.bqm, num_reads=reads, num_sweeps=sweeps, seed=int(rng.integers(2**31)))
        return ordered(result, qubo.n_vars)

    return solve


def random_bits(reads: int = 32, seed: int = 0) -> QuboSolver:
    """A control "solver" returning ``reads`` uniformly random bit vectors (for ablations)."""
    rng = np.random.default_rng(seed)
    return lambda qubo: rng.integers(0, 2, size=(reads, qubo.n_vars), dtype=np.int8)


MAX_DIRECT_VARS = 2000


def solve_qubo_sa(problem: BatchProblem, *, reads: int = 64, sweeps: int = 2000, seed: int = 0,
                  time_limit: float = 60.0, max_slack_bits: int | None = 6, method: str = "decomposed",
                  patience: int = 3, sampler: str = "sa", **pricer_options) -> Assignment:
    """Decomposed QUBO solved by simulated annealing (slack units coarsened to ``max_slack_bits``).

    ``method="direct"`` anneals the whole placement QUBO instead (small problems only).
    ``sampler="random"`` replaces the annealer by random bits (control for ablations);
    ``polish=False`` (a :class:`QuboPricer` option) keeps the raw samples.
    """
    if method == "direct":
        return _direct(problem, annealer(reads, sweeps, seed))
    if sampler not in ("sa", "random"):
        raise ValueError(f"sampler {sampler!r}: choose sa or random")
    subsolver = annealer(reads, sweeps, seed) if sampler == "sa" else random_bits(reads, seed)
    pricer = QuboPricer(subsolver, max_slack_bits=max_slack_bits, **pricer_options)
    result = solve_decomposed(problem, pricer, "qubo-sa", time_limit, patience)
    result.info.update(reads=reads, sweeps=sweeps, sampler=sampler)
    return result


def _direct(problem: BatchProblem, solver) -> Assignment:
    """The best feasible sample of the full placement QUBO (status ``no_answer`` if none is feasible)."""
    qubo = build_qubo(problem, np.arange(problem.n_jobs), np.arange(problem.n_machines))
    if qubo.n_vars > MAX_DIRECT_VARS:
        raise ValueError(f"{qubo.n_vars} QUBO variables: use the decomposition for problems this large")
    samples = solver(qubo)
    machines = [decode_placement(qubo, s, problem.n_jobs) for s in samples]
    ok = [m for m in machines if m is not None and placement_ok(problem, m)]
    info = {"qubo_vars": qubo.n_vars, "sample_feasibility": len(ok) / max(len(samples), 1)}
    if not ok:
        return no_answer("qubo-sa", problem, f"no feasible sample among {len(samples)}", info)
    best = max(ok, key=lambda m: problem.weight[m >= 0].sum())
    return Assignment("qubo-sa", best, "heuristic", objective=float(problem.weight[best >= 0].sum()), info=info)
