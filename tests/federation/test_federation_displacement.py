"""The displacement price of ``carbon-defer`` (water-filled load samples of past arrivals; module docstring of
:mod:`quasched.federation.displacement`), here without the protection price (``protect=false``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from test_federation import H, small_scenarios

from quasched.federation.carbon_aware import CarbonAware
from quasched.federation.carbon_defer import CarbonDefer
from quasched.federation.dispatch import View
from quasched.federation.displacement import LEAD_SLOTS
from quasched.federation.engine import make_view
from quasched.federation.forecast import HISTORY_H
from quasched.federation.registry import make_dispatcher


def hand_view(kw_new: float) -> View:
    """Clusters A (100 g/kWh) and B (300) of 1 GPU; job 0 (1 GPU, 1 h, 1 kW, inflexible) arrived at 0;
    job 1 (half a GPU, ``kw_new`` kW, inflexible) arrives at 1 h."""
    intensity = np.array([[100.0] * 4, [300.0] * 4])
    return View(capacity=np.array([[1000.0, 1000.0], [8000.0, 8000.0]]),
                demand=np.array([[1000.0, 500.0], [0.0, 0.0]]), duration=np.array([H, 4 * H]),
                latest_start=np.array([0.0, H]), kw=np.array([[1.0, 1.0], [kw_new, kw_new]]),
                intensity=intensity, history=np.repeat(intensity[:, :1], HISTORY_H, axis=1),
                placeable=np.ones((2, 2), dtype=bool))


def test_displacement_price_by_hand():
    """At 1 h the only sample (hour 0: job 0) expects, L ahead, 1 GPU × min(1 h, L) / 1 h of new load at
    1 kW × min(1, L / 1 h). Slot 4 (15 min ahead): 0.25 GPU; with job 1 on A, A keeps 0.5 GPU: the load still
    fits, no price. Slot 7 (1 h ahead): 1 GPU; with job 1 on A half of it goes to B: 0.5 × 1 kW × (300 − 100)
    = 100 g/h displaced, / 0.5 kW = 200 g/kWh on A (which makes A cost what B does: the dual). Job 1 on B
    displaces nothing (the load stays on A)."""
    d = CarbonDefer(protect=False, price=0, perfect=True)
    d.reset(hand_view(0.5))
    d.displacement.record(0, 0.0)
    rate = d.rate(1, H, np.array([4, 7]), np.zeros((2, 2, 2)))
    assert rate == pytest.approx(np.array([[100.0, 300.0], [300.0, 300.0]]))
    d.ledger[0, 0, 7] = 600.0  # 0.6 GPU of A booked at 1:45: the load takes A's 0.4 and 0.6 of B; with job 1 on A, all B
    rate = d.rate(1, H, np.array([7]), d.ledger[:, :, [7]])
    assert rate[:, 0] == pytest.approx([100.0 + 0.4 * 200 / 0.5, 300.0])


def test_no_price_without_a_whole_past_hour_and_rule_price_added():
    d = CarbonDefer(protect=False, price=0, perfect=True)
    d.reset(hand_view(0.5))
    d.displacement.record(0, 0.0)
    assert d.rate(1, 0.5 * H, np.array([4, 7]), np.zeros((2, 2, 2))) == pytest.approx(np.array([[100.0] * 2, [300.0] * 2]))
    ruled = CarbonDefer(protect=False, price=1, power=1, toward=1, perfect=True)
    ruled.reset(hand_view(0.5))
    ruled.displacement.record(0, 0.0)  # rule: + 1 × (300 − 100) × u, u = 0.5 with job 1 on A; then + 200 of displacement at slot 7
    assert ruled.rate(1, H, np.array([7]), np.zeros((2, 2, 1)))[:, 0] == pytest.approx([100 + 100 + 200, 300])


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="memory='0' must be at least 1"):
        make_dispatcher("carbon-defer:memory=0")
    with pytest.raises(ValueError, match=r"flexible='2': must be in \[0, 1\]"):
        make_dispatcher("carbon-defer:flexible=2")


@pytest.mark.slow  # a long property run
@settings(max_examples=20, deadline=None)
@given(small_scenarios(), st.integers(1, 5), st.integers(0, 100))
def test_price_reads_only_the_forecast_and_past_arrivals(sc, hour, seed):
    """Changing the true intensity after the current hour, and the jobs not yet arrived, does not change the rate."""
    now = hour * H + 1200.0
    views = [make_view(sc), make_view(sc)]
    rng = np.random.default_rng(seed)
    views[1].intensity[:, hour + 1:] = rng.uniform(0, 1000, views[1].intensity[:, hour + 1:].shape)
    later = (sc.arrival > now) & (np.arange(len(sc.arrival)) > 0)
    views[1].duration[later] = rng.uniform(0, 10 * H, later.sum())
    views[1].demand[:, later] = rng.uniform(0, 2000, (2, later.sum()))
    job = 0
    index = np.minimum(np.arange(int(now // 900), int(now // 900) + 12), views[0].slots - 1)
    rates = []
    for view in views:
        d = CarbonDefer(protect=False)
        d.reset(view)
        for j in np.argsort(sc.arrival, kind="stable").tolist():
            if sc.arrival[j] <= now:
                d.displacement.record(j, float(sc.arrival[j]))
        rates.append(d.rate(job, now, index, d.ledger[:, :, index]))
    assert np.array_equal(rates[0], rates[1])
    d = CarbonDefer(protect=False, perfect=True)  # the displacement price is never negative
    d.reset(views[0])
    expected = views[0].intensity[:, index // 4]
    for j in np.flatnonzero(sc.arrival <= now).tolist():
        d.displacement.record(j, float(sc.arrival[j]))
    assert np.all(d.rate(job, now, index, d.ledger[:, :, index]) >= expected - 1e-9)


def plain_displacement(d: CarbonDefer, job: int, now: float, index: np.ndarray, ledger: np.ndarray) -> np.ndarray:
    """The module docstring's added price, slot by slot, sample by sample, cluster by cluster (loops; no pruning of
    slots or samples, no sharing between alike slots): the reference for the vectorised :meth:`rate`."""
    v, hour = d.view, int(now // H)
    past, _ = d.displacement.past(hour)
    expected = d.priced(now, index)[0]
    room = np.clip(d.fill * d.capacity - ledger, 0, None)
    out = np.zeros((v.clusters, len(index)))
    for k in range(len(index) if len(past) else 0):
        ahead = int(np.clip(np.round(((index[k] + 1) * 900.0 - now) / 900.0), 0, LEAD_SLOTS))
        for s in past:
            demand, unit = s[:2, ahead], s[2:, ahead] * expected[:, k]

            def carbon(free: np.ndarray) -> float:
                left, total = 1.0, 0.0
                for c in np.argsort(unit, kind="stable"):
                    share = min((free[r, c] / demand[r] if demand[r] > 0 else np.inf) for r in range(2))
                    take = min(left, share)
                    total, left = total + take * unit[c], left - take
                return total + left * unit.max()

            for c in range(v.clusters):
                free = room[:, :, k].copy()
                free[:, c] = np.clip(free[:, c] - v.demand[:, job], 0, None)
                out[c, k] += carbon(free) - carbon(room[:, :, k])
    return out / max(min(hour, d.memory), 1) / np.maximum(v.kw[job], 1e-9)[:, None]


@pytest.mark.slow  # a long property run
@settings(max_examples=25, deadline=None)
@given(small_scenarios(), st.integers(1, 5), st.floats(0.0, 1.5), st.integers(0, 100))
def test_vectorised_price_equals_the_plain_loops(sc, hour, fill, seed):
    """On random ledgers up to ``fill`` × capacity, the rate is the rule's plus :func:`plain_displacement`."""
    now, view = hour * H + 1200.0, make_view(sc)
    d = CarbonDefer(protect=False, memory=3)
    d.reset(view)
    for j in np.flatnonzero(sc.arrival <= now).tolist():
        d.displacement.record(j, float(sc.arrival[j]))
    index = np.minimum(np.arange(int(now // 900), int(now // 900) + 40), view.slots - 1)
    d.ledger[:] = np.random.default_rng(seed).uniform(0, fill, d.ledger.shape) * np.where(np.isfinite(d.capacity), d.capacity, 0)
    ledger = d.ledger[:, :, index]
    rule = CarbonAware.rate(d, 0, now, index, ledger)
    assert d.rate(0, now, index, ledger) == pytest.approx(rule + plain_displacement(d, 0, now, index, ledger), rel=1e-9, abs=1e-9)


def test_vectorised_price_is_not_trivially_zero():
    """The hand view of :func:`test_displacement_price_by_hand` through the plain loops gives its 200 g/kWh."""
    d = CarbonDefer(protect=False, price=0, perfect=True)
    d.reset(hand_view(0.5))
    d.displacement.record(0, 0.0)
    assert plain_displacement(d, 1, H, np.array([4, 7]), np.zeros((2, 2, 2))) == pytest.approx(np.array([[0.0, 200.0], [0.0, 0.0]]))
