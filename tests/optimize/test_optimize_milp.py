"""Exact MILP: known optima, exactly-once infeasibility, both formulations agree."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from quasched.optimize import HeavyRule, verify
from quasched.optimize.classes import job_classes
from quasched.optimize.colgen import NEGLIGIBLE, Master, shapes
from quasched.optimize.milp import REL_GAP
from quasched.optimize.problem import small_problem
from quasched.optimize.solvers import solve

CAP = [[4000, 2000, 8192]]


def brute_force(p):
    """Best weighted objective over every assignment (tiny instances only)."""
    best = 0.0
    for choice in itertools.product(range(-1, p.n_machines), repeat=p.n_jobs):
        v = verify(p, np.array(choice))
        if v.feasible:
            best = max(best, v.weighted)
    return best


def random_problem(seed, n=6, m=2, **options):
    rng = np.random.default_rng(seed)
    demand = np.column_stack([rng.integers(1, 4, n) * 1000, rng.integers(0, 3, n) * 500,
                              rng.integers(1, 6, n) * 1024])
    return small_problem(demand, CAP * m, apps=rng.integers(0, 3, n), limits=rng.choice([-1, 1, 2], n),
                         heavy=HeavyRule.symmetric(0.45), **options)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("method", ["patterns", "counts"])
def test_milp_matches_brute_force(seed, method):
    p = random_problem(seed)
    result = solve(p, "milp", method=method)
    assert result.verdict.feasible and result.status == "optimal"
    assert result.verdict.weighted == pytest.approx(brute_force(p), abs=1e-6)
    assert result.bound >= result.verdict.weighted - 1e-6


def test_hand_solved_knapsack():
    # two machines of 4 cores, no heavy rule: jobs 3+1 and 2+2 fill both (app 0's 4-core job weighs 0.6)
    p = small_problem([[3000, 0, 10], [2000, 0, 10], [2000, 0, 10], [1000, 0, 10], [4000, 0, 10]],
                      CAP * 2, apps=[0, 1, 2, 3, 0], heavy=HeavyRule.symmetric(1.0))
    result = solve(p, "milp")
    assert result.status == "optimal" and result.verdict.jobs == 4
    assert result.verdict.weighted == pytest.approx(4.0)


def test_exactly_once_infeasible_is_reported():
    p = small_problem([[1000, 0, 10]] * 3, CAP, apps=[0, 0, 0], limits=[2, 2, 2], exactly_once=True,
                      heavy=HeavyRule.symmetric(1.0))
    result = solve(p, "milp")
    assert result.status == "infeasible" and "2 of 3" in result.message
    homeless = small_problem([[5000, 0, 10]], CAP, exactly_once=True)
    assert "fit no machine" in solve(homeless, "milp").message
    crowded = small_problem([[2000, 0, 10]] * 3, CAP * 2, exactly_once=True)  # 3 heavy jobs, 2 machines
    assert solve(crowded, "milp").status == "infeasible"


def test_exactly_once_feasible_places_everything():
    p = small_problem([[2000, 0, 10]] * 4, CAP * 2, exactly_once=True, heavy=HeavyRule.symmetric(1.0))
    result = solve(p, "milp")
    assert result.verdict.feasible and result.verdict.jobs == 4


def test_anticolocation_and_gpu_model_respected():
    p = small_problem([[2000, 1000, 10], [2000, 1000, 10], [500, 500, 10]], CAP * 2,
                      specs=["", "", "V100"], models=["T4", "V100"], heavy=HeavyRule.symmetric(0.4))
    result = solve(p, "milp")
    assert result.verdict.feasible and result.verdict.jobs == 3
    assert result.machine[2] == 1 and result.machine[0] != result.machine[1]


def test_lexicographic_adds_jobs_without_losing_weight():
    # app 0's first job (weight 1) or its 2nd+3rd jobs (0.5 + 0.25) share the last slot
    p = small_problem([[4000, 0, 10], [2000, 0, 10], [2000, 0, 10]], CAP, apps=[0, 0, 0], alpha=0.5)
    weighted = solve(p, "milp")
    lexi = solve(p.with_options(objective="lexicographic"), "milp")
    assert weighted.verdict.weighted == lexi.verdict.weighted == pytest.approx(1.0)
    assert lexi.verdict.jobs == 1


def test_shape_window_hand_computed():
    # one shape, one app: weights 1, 0.6, 0.36; at price 0.5, g(n) = V(n) - 0.5 n = 0, 0.5, 0.6, 0.46
    p = small_problem([[1000, 0, 10]] * 3, CAP, apps=[0, 0, 0])
    sh = shapes(p, job_classes(p))
    master = Master(sh, p.weight)
    assert [tuple(b.tolist()) for b in master.window(np.array([0.5]), 0.05)] == [(2,), (2,)]
    assert [tuple(b.tolist()) for b in master.window(np.array([0.5]), 0.15)] == [(1,), (3,)]
    assert [tuple(b.tolist()) for b in master.window(np.array([0.0]), 0.0)] == [(3,), (3,)]


def test_shape_window_uses_the_priced_weights():
    # weights 1 and five of 1e-10 (priced at 0): at price 0 every count from 1 loses nothing in the master,
    # though the true weights would put 1-4 jobs 1e-10 x (5 - n) > delta below 5 or 6
    p = small_problem([[1000, 0, 10]] * 6, CAP)
    master = Master(shapes(p, job_classes(p)), np.array([1.0] + [1e-10] * 5), negligible=NEGLIGIBLE)
    assert [tuple(b.tolist()) for b in master.window(np.array([0.0]), 1e-10)] == [(1,), (6,)]


def test_negligible_segments_priced_at_zero_and_added_to_the_bound():
    # one app, alpha 1e-6: weights 1, 1e-6, 1e-12; the last is under NEGLIGIBLE (1e-9) x the heaviest
    p = small_problem([[1000, 0, 10]] * 3, CAP, apps=[0, 0, 0], alpha=1e-6, heavy=HeavyRule.symmetric(1.0))
    master = Master(shapes(p, job_classes(p)), p.weight, negligible=NEGLIGIBLE)
    assert master.seg_weight.tolist() == [0.0, 1e-6, 1.0]
    assert Master(shapes(p, job_classes(p)), p.weight).seg_weight.tolist() == [1e-12, 1e-6, 1.0]  # the default keeps all
    assert master.neglected == pytest.approx(1e-12, rel=1e-9)
    result = solve(p, "milp")
    assert result.status == "optimal" and result.verdict.jobs == 3
    assert result.info["neglected_weight"] == master.neglected
    assert result.bound >= result.verdict.weighted - 1e-15


def test_neglected_weight_lifts_the_bound_to_the_true_optimum():
    # two 4-core machines; greedy strands a 3-core job (3 + 1e-5 + 1e-10). The optimum, {1, 3} and {3, app 0 x3},
    # is 4 + 1e-5 + 1e-10; the pattern MILP sees 4 + 1e-5 (its LP bound): only the neglected 1e-10 covers the rest
    p = small_problem([[1000, 0, 10], [3000, 0, 10], [3000, 0, 10]] + [[250, 0, 10]] * 3, CAP * 2,
                      apps=[-1, -1, -1, 0, 0, 0], alpha=1e-5, heavy=HeavyRule.symmetric(1.0))
    result = solve(p, "milp")
    assert result.status == "optimal" and result.verdict.weighted == pytest.approx(4 + 1e-5, abs=1e-9)
    assert result.info["neglected_weight"] == pytest.approx(1e-10, rel=1e-9)
    assert result.bound >= 4 + 1e-5 + 1e-10


def staged_problem(seed, n=40):
    """Identical machines and few shapes: the pattern LP is fractional, so the staged proof runs."""
    rng = np.random.default_rng(seed)
    demand = np.column_stack([rng.choice([1000, 2000, 3000], n), rng.choice([0, 500], n),
                              rng.choice([1024, 3072, 5120], n)])
    return small_problem(demand, [[8000, 2000, 16384]] * 5, apps=rng.integers(0, 8, n), heavy=HeavyRule.symmetric(0.3))


@pytest.mark.parametrize("seed", range(4))
def test_staged_pattern_proof_agrees_with_counts_model(seed):
    p = staged_problem(seed)
    patterns, counts = solve(p, "milp"), solve(p, "milp", method="counts", time_limit=60)
    assert patterns.verdict.feasible and counts.verdict.feasible
    assert patterns.status == counts.status == "optimal"
    assert patterns.verdict.weighted == pytest.approx(counts.verdict.weighted, abs=1e-6)
    assert patterns.bound >= patterns.verdict.weighted - 1e-6


@pytest.mark.slow  # a long property run
@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10_000), alpha=st.sampled_from([1e-4, 1e-5, 1e-6]),
       objective=st.sampled_from(["weighted", "lexicographic"]))
def test_negligible_weights_keep_the_bound_and_optimal_honest(seed, alpha, objective):
    # one app's 3rd job weighs alpha^2 <= 1e-8 of the heaviest, its 4th alpha^3 (< NEGLIGIBLE): priced at 0
    rng = np.random.default_rng(seed)
    n = 5
    demand = np.column_stack([rng.integers(1, 4, n) * 1000, np.zeros(n, dtype=np.int64), rng.integers(1, 6, n) * 1024])
    p = small_problem(demand, CAP * 2, apps=rng.integers(0, 2, n), heavy=HeavyRule.symmetric(0.45), alpha=alpha,
                      objective=objective)
    result, best = solve(p, "milp"), brute_force(p)
    assert result.verdict.feasible
    # a bound on the true optimum, to HiGHS's dual feasibility tolerance (1e-7: a cost of 1e-8 can go unseen by the LP,
    # with or without the negligible weights)
    assert result.bound is not None and result.bound >= best - 1e-7 * max(1.0, best)
    if result.status == "optimal":  # honest to the solver's gap (the proof and the app assignment each within REL_GAP)
        gap = 2 * REL_GAP * max(1.0, best)
        assert result.verdict.weighted == pytest.approx(best, abs=gap)
        counts = solve(p, "milp", method="counts")
        assert counts.status == "optimal" and counts.verdict.weighted == pytest.approx(best, abs=gap)


def test_mip_gap_reaches_every_highs_solve(monkeypatch):
    # --mip-gap (rel_gap) is the tolerance of the MILP solves, the pattern MILPs of the staged proof included
    from quasched.optimize.highs import LinearModel

    seen, solve_highs = [], LinearModel.solve

    def spy(self, time_limit=10.0, rel_gap=1e-6, *args, **kwargs):
        if np.concatenate(self.integer).any():  # MILPs only: an LP has no gap
            seen.append(rel_gap)
        return solve_highs(self, time_limit, rel_gap, *args, **kwargs)

    monkeypatch.setattr(LinearModel, "solve", spy)
    loose = solve(staged_problem(0), "milp", rel_gap=0.05)
    assert loose.verdict.feasible and loose.bound >= loose.verdict.weighted - 1e-6
    # the pattern MILPs and the assignment at 0.05; only column generation's pricing keeps its own exact 1e-9
    assert seen.count(0.05) >= 2 and set(seen) <= {0.05, 1e-9}, seen
