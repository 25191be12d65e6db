"""The rule's priced intensity kept per hour of dispatch (:meth:`CarbonAware.priced`) equals the one computed afresh for
every run, bit for bit, whatever the runs asked before (longer runs, another hour, the horizon's end)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st
from test_federation import H, small_scenarios

from quasched.federation.carbon_aware import CarbonAware
from quasched.federation.dispatch import SLOTS_PER_HOUR, View
from quasched.federation.engine import make_view
from quasched.federation.forecast import HISTORY_H
from quasched.federation.scenario import Scenario


def fresh(d: CarbonAware, now: float, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The priced intensity and gap of ``index`` computed for this run alone (the NumPy code the cache replaced)."""
    hours = np.arange(index[0] // SLOTS_PER_HOUR, index[-1] // SLOTS_PER_HOUR + 1)
    expected = d.expected(now, hours)
    mean, worst = expected.mean(axis=0), expected.max(axis=0)
    gap = np.clip(mean + d.toward * (worst - mean) - expected, 0, None)
    at = index // SLOTS_PER_HOUR - hours[0]
    return expected[:, at], gap[:, at]


def test_kept_intensity_follows_the_hour_and_grows_by_hand():
    """A (100 g/kWh all week, 500 in hour 1) and B (300). At 0 h the forecast of hour 1 is A's daily profile, 100; at
    1 h the observed 500 (the kept hour-0 values are not reused), and B's gap is 150 (mean 400, reference
    400 + 0.5 × (500 − 400) = 450). A longer run at 1 h extends what is kept."""
    intensity = np.array([[100.0, 500.0, 100.0, 100.0], [300.0] * 4])
    view = View(capacity=np.ones((2, 2)), demand=np.zeros((2, 1)), duration=np.zeros(1), latest_start=np.zeros(1),
                kw=np.ones((1, 2)), intensity=intensity, history=np.repeat(intensity[:, :1], HISTORY_H, axis=1),
                placeable=np.ones((1, 2), dtype=bool))
    d = CarbonAware()
    d.reset(view)
    assert d.priced(0.0, np.array([4, 5]))[0].tolist() == [[100.0, 100.0], [300.0, 300.0]]  # hour 1 asked at 0 h
    expected, gap = d.priced(H, np.array([4, 5]))
    assert expected.tolist() == [[500.0, 500.0], [300.0, 300.0]] and gap.tolist() == [[0.0, 0.0], [150.0, 150.0]]
    expected, _ = d.priced(H, np.arange(4, 12))  # into hour 2: A's forecast falls back towards its profile
    assert expected[0, :4].tolist() == [500.0] * 4 and (expected[0, 4:] < 500.0).all()


@settings(max_examples=40, deadline=None)
@given(small_scenarios(), st.lists(st.tuples(st.integers(0, 80), st.integers(1, 300)), min_size=1, max_size=12),
       st.booleans())
def test_kept_intensity_equals_fresh_bit_for_bit(sc: Scenario, runs: list[tuple[int, int]], perfect: bool):
    view = make_view(sc)
    d = CarbonAware(perfect=perfect)
    d.reset(view)
    for quarter, length in runs:  # in any order, past the horizon too
        now = quarter * 900.0 + 300.0
        index = np.minimum(int(now // 900) + np.arange(length), view.slots - 1)
        got, want = d.priced(now, index), fresh(d, now, index)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
