"""The classical polish of pricing samples: hand-computed moves and invariants."""

import numpy as np
from hypothesis import given, settings, strategies as st

from quasched.optimize.colgen import Shapes
from quasched.optimize.polish import moves, polish, repair


def one_machine(demand, capacity, fit=None, hi=None, lo_only=None) -> Shapes:
    demand = np.asarray(demand, dtype=np.int64)
    n = len(demand)
    fit = np.full(n, 10) if fit is None else np.asarray(fit)
    flags = np.zeros(n, dtype=bool)
    return Shapes(np.arange(n), demand, np.full(n, 10), [np.arange(1)], np.asarray([capacity], dtype=np.int64),
                  [np.array([s]) for s in range(n)], fit[None].astype(np.int64),
                  (flags if hi is None else np.asarray(hi))[None], (flags if lo_only is None else np.asarray(lo_only))[None])


def test_two_for_one_swap_reaches_the_tight_optimum():
    # capacity 10: one job of size 6 (price 1.0) is a local optimum for adds and 1-1 swaps,
    # two of size 5 (0.9 each) are worth 1.8
    sh = one_machine([[6], [5], [5]], [10], fit=[1, 1, 1])
    price = np.array([1.0, 0.9, 0.9])
    assert polish(sh, 0, np.array([[1, 0, 0]]), price)[0].tolist() == [0, 1, 1]


def test_repair_drops_the_job_with_most_relief_per_price():
    sh = one_machine([[4, 1], [3, 1], [1, 1]], [6, 10])
    price = np.array([1.0, 1.0, 0.1])
    # 8 > 6: relief (capped at the overflow 2, per capacity 6) 1/3, 1/3, 1/6; price per relief
    # 3, 3, 0.6 drops shape 2; then 7 > 6: relief 1/6 each, a tie, the first shape goes
    got = repair(sh, 0, np.array([1, 1, 1]), price)
    assert got.tolist() == [0, 1, 0]
    # then climbs to the optimum: two jobs of shape 1 fill the 6 exactly (4 + 1 + 1 is worth 1.2)
    assert polish(sh, 0, np.array([[1, 1, 1]]), price)[0].tolist() == [0, 2, 0]


def test_repair_breaks_heavy_clash_by_dropping_a_heavy_job():
    sh = one_machine([[1], [1], [1]], [10], hi=[True, True, False])
    got = repair(sh, 0, np.array([1, 1, 1]), np.array([1.0, 2.0, 0.01]))
    assert got.tolist() == [0, 1, 1]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_polish_is_feasible_local_optimum_never_worse_than_repair(data):
    n = data.draw(st.integers(1, 6))
    demand = data.draw(st.lists(st.lists(st.integers(0, 8), min_size=2, max_size=2), min_size=n, max_size=n))
    capacity = data.draw(st.lists(st.integers(1, 16), min_size=2, max_size=2))
    hi = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    lo = [not h and data.draw(st.booleans()) for h in hi]
    sh = one_machine(demand, capacity, fit=data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)),
                     hi=hi, lo_only=lo)
    price = np.array(data.draw(st.lists(st.floats(0.0, 3.0), min_size=n, max_size=n)))
    start = np.array(data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)))
    fixed = repair(sh, 0, start, price)
    (got,) = polish(sh, 0, start[None], price)
    assert sh.feasible(0, fixed) and sh.feasible(0, got)
    assert np.all(fixed <= np.minimum(start, sh.fit[0]))
    assert price @ got >= price @ fixed - 1e-9
    # no move (add, swap, two-for-one) that Shapes.feasible accepts would still gain
    for plus, plus2, minus in zip(*moves(n)):
        step = np.zeros(n + 1, dtype=np.int64)
        step[plus] += 1
        step[plus2] += 1
        step[minus] -= 1
        if sh.feasible(0, got + step[:n]):
            assert price @ step[:n] <= 1e-9
