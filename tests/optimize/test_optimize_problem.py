"""Batch problem, verifier and greedy baselines on hand-made instances."""

import numpy as np
import pytest

from quasched.optimize import HeavyRule, verify
from quasched.optimize.greedy import greedy_priority, greedy_qua
from quasched.optimize.problem import small_problem

CAP = [[4000, 2000, 8192]]


def test_weights_decay_per_app_in_submission_order():
    p = small_problem([[1000, 0, 1024]] * 4, CAP, apps=[0, 1, 0, 0], alpha=0.5)
    assert p.weight.tolist() == [1.0, 1.0, 0.5, 0.25]
    assert verify(p, np.array([0, 0, 0, -1])).weighted == pytest.approx(2.5)


def test_verifier_counts_capacity_and_double_placement():
    p = small_problem([[3000, 0, 1024], [2000, 0, 1024]], CAP * 2)
    assert verify(p, np.array([0, 1])).feasible
    bad = verify(p, np.array([0, 0]))
    assert not bad.feasible and "cpu_milli" in bad.violations[0]
    twice = np.array([[1, 1], [0, 0]])
    assert "placed 2 times" in verify(p, twice).violations[0]
    assert not verify(p, np.array([0, 5])).feasible


def test_heavy_jobs_never_share_a_machine():
    p = small_problem([[2000, 0, 1024], [2000, 0, 1024]], CAP, heavy=HeavyRule.symmetric(0.4))
    assert not verify(p, np.array([0, 0])).feasible
    assert verify(p, np.array([0, -1])).feasible


def test_qua_rule_is_asymmetric_on_gpu():
    # GPU shares 0.35 and 0.45 of 2 GPUs: one above 0.4, the other above 0.3 -> conflict
    p = small_problem([[100, 700, 10], [100, 900, 10], [100, 700, 10]], CAP, heavy=HeavyRule.qua())
    assert not verify(p, np.array([0, 0, -1])).feasible
    assert verify(p, np.array([0, -1, 0])).feasible  # two 0.35 jobs: neither above 0.4


def test_density_limit_and_gpu_model():
    p = small_problem([[100, 0, 10]] * 3, CAP, apps=[0, 0, 0], limits=[2, 2, 2])
    assert not verify(p, np.array([0, 0, 0])).feasible
    assert verify(p, np.array([0, 0, -1])).feasible
    g = small_problem([[100, 1000, 10]], CAP * 2, specs=["V100"], models=["T4", "V100"])
    assert not verify(g, np.array([0])).feasible
    assert verify(g, np.array([1])).feasible


def test_exactly_once_flags_unplaced_jobs():
    p = small_problem([[1000, 0, 10]] * 2, CAP, exactly_once=True)
    assert not verify(p, np.array([0, -1])).feasible


@pytest.mark.parametrize("greedy", [greedy_qua, greedy_priority])
def test_greedy_answers_are_feasible(greedy):
    rng = np.random.default_rng(0)
    demand = np.column_stack([rng.integers(1, 5, 40) * 1000, rng.integers(0, 2, 40) * 1000,
                              rng.integers(1, 8, 40) * 1024])
    p = small_problem(demand, CAP * 5, apps=rng.integers(0, 4, 40), limits=rng.choice([-1, 2, 3], 40))
    assert verify(p, greedy(p).machine).feasible


def test_greedy_qua_is_first_fit_in_app_order():
    p = small_problem([[3000, 0, 10], [3000, 0, 10]], CAP * 2, apps=[1, 0])
    assert greedy_qua(p).machine.tolist() == [1, 0]
