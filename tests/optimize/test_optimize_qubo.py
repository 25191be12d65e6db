"""QUBO encodings, the annealing decomposition and a tiny QAOA run."""

import itertools

import numpy as np
import pytest
from extra import needs

for _module in ("dimod", "dwave.samplers", "qiskit", "qiskit_aer"):
    needs(_module, "quantum")

from quasched.optimize import HeavyRule, highs, verify
from quasched.optimize.anneal import _direct, annealer
from quasched.optimize.problem import small_problem
from quasched.optimize.qaoa import energies, qaoa
from quasched.optimize.qubo import _slack_coefficients, build_qubo, decode_placement, dense, pattern_qubo, slack_unit
from quasched.optimize.solvers import solve

CAP = [[4000, 2000, 8192]]


@pytest.mark.parametrize("top", [1, 2, 5, 7, 8, 100])
def test_slack_covers_exactly_zero_to_top(top):
    coefs = _slack_coefficients(top)
    sums = {sum(c for c, b in zip(coefs, bits) if b) for bits in itertools.product([0, 1], repeat=len(coefs))}
    assert sums == set(range(top + 1))


def tiny():
    return small_problem([[2000, 0, 10], [2000, 0, 10], [1000, 1000, 10], [3000, 0, 10]], CAP * 2,
                         apps=[0, 0, 1, 2], heavy=HeavyRule.symmetric(0.6))


def test_placement_qubo_ground_state_is_the_optimum():
    p = tiny()
    q = build_qubo(p, np.arange(p.n_jobs), np.arange(p.n_machines))
    lin, quad, offset = dense(q.bqm)
    energy = energies(lin, quad, offset)
    ground = int(np.argmin(energy))
    machine = decode_placement(q, (ground >> np.arange(q.n_vars)) & 1, p.n_jobs)
    verdict = verify(p, machine)
    assert verdict.feasible and verdict.weighted == pytest.approx(solve(p, "milp").verdict.weighted)


def test_annealer_finds_the_ground_state_of_a_small_qubo():
    p = tiny()
    q = build_qubo(p, np.arange(p.n_jobs), np.arange(p.n_machines))
    lin, quad, offset = dense(q.bqm)
    best = annealer(reads=16, sweeps=500)(q)[0]
    assert q.bqm.energy(dict(enumerate(best))) == pytest.approx(energies(lin, quad, offset).min())


def test_pattern_qubo_counts_respect_capacity():
    demand = np.array([[3, 1], [2, 2]])
    q = pattern_qubo(demand, np.array([6, 4]), np.array([2, 2]), np.zeros(2, bool), np.zeros(2, bool),
                     np.array([1.0, 1.5]), np.array([0, 1]))
    best = annealer(reads=16, sweeps=500)(q)[0]
    a = q.counts(best)
    assert np.all(a @ demand <= [6, 4]) and a.tolist() == [0, 2]


def test_qubo_sa_answers_are_verified_feasible():
    rng = np.random.default_rng(3)
    demand = np.column_stack([rng.integers(1, 4, 30) * 1000, rng.integers(0, 3, 30) * 500, np.full(30, 1024)])
    p = small_problem(demand, CAP * 4, apps=rng.integers(0, 5, 30), limits=rng.choice([-1, 2], 30))
    result = solve(p, "qubo-sa", reads=8, sweeps=300)
    assert result.verdict.feasible and result.verdict.jobs > 0
    assert 0 < result.info["sample_feasibility"] <= 1


def test_qubo_sa_out_of_time_says_so_instead_of_an_empty_answer(monkeypatch):
    """A loaded machine: HiGHS's time limit runs out before the pattern MILP has any integer answer."""
    real = highs.LinearModel.solve

    def out_of_time(model, time_limit=10.0, *args, **kwargs):
        if any(flags.any() for flags in model.integer):
            return highs.Solution("no_solution", None, float("nan"), float("inf"), 0.0, time_limit)
        return real(model, time_limit, *args, **kwargs)

    monkeypatch.setattr(highs.LinearModel, "solve", out_of_time)
    p = tiny()
    result = solve(p, "qubo-sa", reads=8, sweeps=300, time_limit=3)
    assert result.status == "no_answer" and result.placed == 0
    assert result.message == "no feasible answer within the time limit (3 s)"
    assert result.verdict is not None  # still verified


def test_direct_qubo_sa_without_a_feasible_sample_gives_no_answer():
    p = tiny()  # every job on every machine at once: no sample is feasible
    result = _direct(p, lambda qubo: np.ones((4, qubo.n_vars), dtype=np.int8))
    assert result.status == "no_answer" and result.placed == 0
    assert result.message == "no feasible sample among 4" and result.info["sample_feasibility"] == 0


def test_qaoa_beats_uniform_sampling_on_a_tiny_qubo():
    lin = np.array([-1.0, -1.0, -1.0, 0.5])
    quad = np.zeros((4, 4))
    quad[0, 1] = quad[1, 2] = 2.0
    samples, run = qaoa(lin, quad, layers=1, maxiter=30)
    assert run.p_optimum > run.p_uniform
    best = samples[0]
    assert best.tolist() == [1, 0, 1, 0]


def test_qaoa_solver_end_to_end_on_a_tiny_problem():
    p = tiny()
    result = solve(p, "qaoa", max_qubits=8, layers=1, maxiter=20, shots=128)
    assert result.verdict.feasible
    assert result.info["qaoa_runs"] >= 1 and result.info["qubits_max"] <= 8


def test_direct_qubo_sa_reaches_the_optimum_of_a_tiny_problem():
    p = tiny()
    result = solve(p, "qubo-sa", method="direct", reads=32, sweeps=1000)
    assert result.verdict.feasible
    assert result.verdict.weighted == pytest.approx(solve(p, "milp").verdict.weighted)


def test_slack_unit_keeps_tight_contents_feasible():
    gib = 1024
    need = np.array([320, 40, 16, 480, 200, 240, 300]) * gib
    cap = 1024 * gib
    assert slack_unit(need, cap, None) == 4 * gib  # exact: the gcd
    unit = slack_unit(need, cap, 6)
    assert cap // unit <= 2 ** 6 - 1 and unit % (4 * gib) == 0
    tight = np.array([320, 320, 320, 40, 16]) * gib  # 1,016 GiB: fits, and must stay feasible
    assert (-(-tight // unit)).sum() <= cap // unit

