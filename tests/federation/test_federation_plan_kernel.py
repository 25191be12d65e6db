"""The fused kernels of the rule's options (``boundaries``, ``crowded``, ``plan``, ``cheapest``, ``add_run``), of the
displacement price (``leads``, ``busy_slots``, ``with_displaced``) and of the protection price (``protection_terms``,
``protection_charge``) return, bit for bit, what the NumPy code they replaced returned; and a hand
case for each."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from numpy.lib.stride_tricks import sliding_window_view

from quasched.federation.carbon_aware import SLOT_S, occupancy
from quasched.federation.protection import charge
from quasched.federation.slot_kernel import (add_run, boundaries, busy_slots, cheapest, crowded, displaced_each, leads,
                                             least_after, loads_at, over_limit, plan, protection_charge,
                                             protection_terms, with_displaced)
from quasched.metrics.power import SECONDS_PER_HOUR as HOUR
from quasched.model.odds import at_least

INF = np.inf


def numpy_plan(ledger: np.ndarray, demand: np.ndarray, limit: np.ndarray, rate: np.ndarray, share_now: np.ndarray,
               share: np.ndarray, starts: np.ndarray, now: float, kw: np.ndarray, delay: float,
               placeable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``CarbonAware.options`` after the rate, in NumPy (the code the kernel replaced)."""
    full = over_limit(ledger, demand, limit)
    cost = np.empty((rate.shape[0], len(starts)))
    blocked = np.empty((rate.shape[0], len(starts)), dtype=bool)
    cost[:, 0] = rate[:, :len(share_now)] @ share_now
    blocked[:, 0] = full[:, :len(share_now)].any(axis=1)
    if len(starts) > 1:
        windows = slice(1, len(starts) - 1 + len(share))
        cost[:, 1:] = sliding_window_view(rate[:, windows], len(share), axis=1)[:, :len(starts) - 1] @ share
        count = np.cumsum(full[:, windows], axis=1)
        blocked[:, 1] = count[:, len(share) - 1] > 0
        blocked[:, 2:] = count[:, len(share):len(share) + len(starts) - 2] > count[:, :len(starts) - 2]
    blocked[~placeable] = True
    cost *= kw[:, None] * SLOT_S / HOUR * (1 + delay * (starts - now) / HOUR)
    return cost, blocked


def kernel_plan(ledger: np.ndarray, demand: np.ndarray, limit: np.ndarray, rate: np.ndarray, share_now: np.ndarray,
                share: np.ndarray, starts: np.ndarray, now: float, kw: np.ndarray, delay: float,
                placeable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``CarbonAware.options`` after the rate, now."""
    cost = np.empty((rate.shape[0], len(starts)))
    cost[:, 0] = rate[:, :len(share_now)] @ share_now
    if len(starts) == 2:
        cost[:, 1:] = rate[:, None, 1:1 + len(share)] @ share
    blocked = plan(ledger, demand, limit, rate, len(share_now), share, starts, now, kw, delay, placeable, cost)
    return cost, blocked


def test_plan_by_hand():
    """One cluster, a run of 2 slots (halves of slots 0 and 2 now; slot-aligned later: shares 1, 1) with 3 later
    starts; slot 3 is full. Costs at 1 kW: slots × rate / 4 per slot, × (1 + 0.36 × h waited)."""
    ledger = np.zeros((2, 1, 5))
    ledger[0, 0, 3] = 900.0
    rate = np.array([[4.0, 8.0, 12.0, 16.0, 20.0]])
    starts = np.array([1800.0, 3600.0, 4500.0, 5400.0])  # now 0.5 h: slots 1, 2 then 3 (from 1 h, 1.25 h, 1.5 h)
    cost, blocked = kernel_plan(ledger, np.array([200.0, 0.0]), np.array([[1000.0], [INF]]), rate,
                                np.array([0.5, 1.0, 0.5]), np.array([1.0, 1.0]), starts, 1800.0, np.array([1.0]), 0.36,
                                np.array([True]))
    # now: (2 + 8 + 6) / 4; later: (8 + 12) / 4 × 1.18, (12 + 16) / 4 × 1.27, (16 + 20) / 4 × 1.36
    assert np.allclose(cost, [[4.0, 5.0 * 1.18, 7.0 * 1.27, 9.0 * 1.36]])
    assert blocked.tolist() == [[False, False, True, True]]  # the runs through slot 3 (1100 > 1000)
    assert plan(ledger, np.zeros(2), np.array([[1000.0], [INF]]), rate, 3, np.ones(2), starts, 1800.0,
                np.ones(1), 0.0, np.array([False]), cost).all()  # never placeable


def plans(draw: st.DrawFn) -> tuple:
    clusters, later, width, now_slots = (draw(st.integers(1, 5)), draw(st.integers(0, 12)), draw(st.integers(1, 30)),
                                         draw(st.integers(1, 31)))
    slots = max(now_slots, later + width) + 1
    rng = np.random.default_rng(draw(st.integers(0, 10**6)))
    ledger = rng.uniform(0, 1.2, (2, clusters, slots)) * 8000 * (rng.random((2, clusters, slots)) < 0.8)
    rate = rng.uniform(0, 900, (clusters, slots)) * draw(st.sampled_from([1.0, 1 / 3]))
    now = draw(st.floats(0, 1e6))
    first = np.floor(now / SLOT_S) + 1
    starts = np.concatenate([[now], (first + np.arange(later)) * SLOT_S])
    return (ledger, rng.choice([0.0, 500.0, 8000.0 / 3], 2), rng.choice([8000.0, 6000.0, INF], (2, clusters)), rate,
            rng.random(now_slots), rng.random(width), starts, now, rng.uniform(0, 5, clusters),
            draw(st.sampled_from([0.0, 0.002, 0.1])), rng.random(clusters) < 0.8)


@pytest.mark.slow  # a long property run
@settings(max_examples=300, deadline=None)
@given(st.composite(plans)())
def test_plan_equals_numpy_bit_for_bit(case: tuple):
    expected, got = numpy_plan(*case), kernel_plan(*case)
    assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])


def numpy_cheapest(cost: np.ndarray, blocked: np.ndarray) -> tuple[int, int]:
    s, c = np.unravel_index(np.argmin(np.where(blocked, np.inf, cost).T), (cost.shape[1], cost.shape[0]))
    return int(c), int(s)


def test_cheapest_by_hand():
    """Ties go to the earliest start, then the first cluster; a blocked cheaper one is skipped."""
    cost = np.array([[3.0, 1.0, 1.0], [1.0, 1.0, 0.5]])
    assert cheapest(cost, np.zeros((2, 3), dtype=bool)) == (1, 2)
    blocked = np.array([[False, False, False], [True, False, True]])
    assert cheapest(cost, blocked) == (0, 1)  # (0, 1) and (1, 1) tie at 1: the first cluster


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5), st.integers(1, 20), st.integers(0, 10**6))
def test_cheapest_equals_numpy(clusters: int, starts: int, seed: int):
    rng = np.random.default_rng(seed)
    cost = rng.choice([1.0, 2.0, 2.5, INF, np.nan], size=(clusters, starts), p=[0.3, 0.3, 0.3, 0.07, 0.03])
    blocked = rng.random((clusters, starts)) < rng.choice([0.0, 0.5, 1.0])
    assert cheapest(cost, blocked) == numpy_cheapest(cost, blocked)


def numpy_add_run(ledger: np.ndarray, cluster: int, start: float, duration: float, demand: np.ndarray,
                  sign: float) -> None:
    slots = ledger.shape[2]
    slot, used = occupancy(start, duration)
    stop = min(slot + len(used), slots)
    if slot < slots:
        ledger[:, cluster, slot:stop] += sign * demand[:, None] * used[:stop - slot]


def test_add_run_by_hand():
    """From 10 to 40 min, 3 GPUs and 1 core on cluster 1: a third, all, then two thirds of slots 0-2; removed, 0."""
    ledger = np.zeros((2, 2, 4))
    add_run(ledger, 1, 0, 3, 600.0, 2400.0, np.array([3000.0, 1000.0]), 1.0)
    assert np.allclose(ledger[:, 1], [[1000.0, 3000.0, 2000.0, 0.0], [1000 / 3, 1000.0, 2000 / 3, 0.0]])
    add_run(ledger, 1, 0, 3, 600.0, 2400.0, np.array([3000.0, 1000.0]), -1.0)
    assert not ledger.any()


@settings(max_examples=300, deadline=None)
@given(st.floats(0, 4e4), st.floats(0, 4e4), st.sampled_from([1.0, 900.0, 1 / 3]), st.sampled_from([1.0, -1.0, 0.5]),
       st.integers(0, 10**6))
def test_add_run_equals_numpy_bit_for_bit(start: float, duration: float, grain: float, sign: float, seed: int):
    start, duration = start - start % grain, duration - duration % grain
    rng = np.random.default_rng(seed)
    ledger = rng.uniform(0, 8000, (2, 3, 30))
    demand = rng.choice([0.0, 500.0, 1e4 / 3], 2)
    expected = ledger.copy()
    numpy_add_run(expected, 1, start, duration, demand, sign)
    first, share = occupancy(start, duration)
    add_run(ledger, 1, first, min(first + len(share), 30), start, start + duration, demand, sign)
    assert np.array_equal(ledger, expected)


def numpy_displacement(ledger: np.ndarray, demand: np.ndarray, top: np.ndarray, most: np.ndarray, index: np.ndarray,
                       now: float, expected: np.ndarray, past: np.ndarray, rate: np.ndarray, hours: int,
                       kw: np.ndarray) -> np.ndarray:
    """The displacement term added to the rule's rate, in NumPy (the code the kernels replaced)."""
    ahead = np.clip(np.round(((index + 1) * SLOT_S - now) / SLOT_S).astype(np.int64), 0, most.shape[1] - 1)
    least = least_after(ledger, demand, top[:, :, 0])
    busy = np.flatnonzero((least < most[:, ahead]).any(axis=0))
    if not len(busy):
        return rate
    room = np.clip(top - ledger[:, :, busy], 0, None)
    key = np.vstack([ahead[busy], room.reshape(-1, len(busy)), expected[:, busy]])
    new = np.ones(len(busy), dtype=bool)
    new[1:] = (key[:, 1:] != key[:, :-1]).any(axis=0)
    pick, alike, room = busy[new], np.cumsum(new) - 1, room[:, :, new]
    sample = loads_at(past, ahead[pick], least[:, pick])
    displaced = np.zeros(rate.shape)
    after = np.clip(room - demand[:, None, None], 0, None)
    displaced[:, busy] = displaced_each(sample, room, after, expected[:, pick]).sum(axis=1)[:, alike]
    return rate + displaced / hours / np.maximum(kw, 1e-9)[:, None]


def kernel_displacement(ledger: np.ndarray, demand: np.ndarray, top: np.ndarray, most: np.ndarray, index: np.ndarray,
                        now: float, expected: np.ndarray, past: np.ndarray, rate: np.ndarray, hours: int,
                        kw: np.ndarray) -> np.ndarray:
    """The same, now."""
    busy, alike, room, after, sample, priced = busy_slots(ledger, demand, top[:, :, 0], most,
                                                          leads(index, now, most.shape[1] - 1), expected, past)
    if not len(busy):
        return rate
    return with_displaced(rate, displaced_each(sample, room, after, priced).sum(axis=1), busy, alike, hours, kw)


def test_leads_by_hand():
    """Slots 0-2 from 300 s: their ends are 600, 1500, 2400 s ahead, 0.67, 1.67, 2.67 slots: 1, 2, 3, capped at 2;
    450 s is half a slot: rounded to even (0)."""
    assert leads(np.array([0, 1, 2]), 300.0, 2).tolist() == [1, 2, 2]
    assert leads(np.array([0]), 450.0, 4).tolist() == [0]
    assert leads(np.array([5]), 9000.0, 4).tolist() == [0]  # a slot already over


def test_busy_slots_by_hand():
    """One cluster of 8 GPUs; a job of 2 GPUs; slots 0-3 with 0, 0, 6, 6 GPUs planned. One past sample of 4 GPUs at
    every time ahead: room after the job 6, 6, 0, 0, so slots 2 and 3 are busy, alike (same time ahead, room, intensity): one run."""
    ledger = np.zeros((2, 1, 4))
    ledger[0, 0, 2:] = 6000.0
    past = np.zeros((1, 3, 3))
    past[0, 0] = 4000.0
    past[0, 2] = 1.0
    top = np.array([[8000.0], [INF]])
    busy, alike, room, after, sample, priced = busy_slots(ledger, np.array([2000.0, 0.0]), top, past[0, :2],
                                                          np.array([1, 2, 2, 2]), np.full((1, 4), 100.0), past)
    assert busy.tolist() == [2, 3] and alike.tolist() == [0, 0]
    assert room[:, 0, 0].tolist() == [2000.0, INF] and after[:, 0, 0].tolist() == [0.0, INF]
    assert sample.tolist() == [[[4000.0], [0.0], [1.0]]] and priced.tolist() == [[100.0]]
    rate = np.ones((1, 4))
    assert with_displaced(rate, np.array([[6.0]]), busy, alike, 3, np.array([0.5])).tolist() == [[1, 1, 5, 5]]


def displacements(draw: st.DrawFn) -> tuple:
    clusters, slots, samples = draw(st.integers(1, 4)), draw(st.integers(1, 30)), draw(st.integers(1, 6))
    rng = np.random.default_rng(draw(st.integers(0, 10**6)))
    top = rng.choice([8000.0, 6000.0, INF], (2, clusters, 1))
    ledger = rng.choice([0.0, 2000.0, 6000.0, 9000.0, 1e4 / 3], (2, clusters, slots))
    if draw(st.booleans()):  # runs of equal slots
        ledger = np.repeat(ledger[:, :, :1], slots, axis=2)
    past = rng.choice([0.0, 1000.0, 4000.0, 1e4 / 7], (samples, 2 + clusters, 9))
    now = draw(st.floats(0, 1e5))
    index = np.floor(now / SLOT_S).astype(np.int64) + np.arange(slots)
    expected = rng.choice([100.0, 300.0], (clusters, slots))
    return (ledger, rng.choice([0.0, 2000.0], 2), top, past[:, :2].max(axis=0), index, now, expected, past,
            rng.uniform(0, 500, (clusters, slots)), draw(st.integers(1, 24)), rng.choice([0.0, 0.5, 3.0], clusters))


@pytest.mark.slow  # a long property run
@settings(max_examples=300, deadline=None)
@given(st.composite(displacements)())
def test_displacement_equals_numpy_bit_for_bit(case: tuple):
    assert np.array_equal(kernel_displacement(*case), numpy_displacement(*case))


def numpy_candidate_starts(now: float, latest: float, slot_s: float) -> np.ndarray:
    slots = np.arange(np.floor(now / slot_s) + 1, np.floor(max(now, latest) / slot_s) + 1)
    return np.concatenate([[now], slots[slots * slot_s <= latest] * slot_s])


def test_boundaries_by_hand():
    """From 100 s to 2000 s: now, then 900 and 1800; a latest start before now: now alone."""
    assert boundaries(100.0, 2000.0, 900.0).tolist() == [100.0, 900.0, 1800.0]
    assert boundaries(100.0, 50.0, 900.0).tolist() == [100.0]
    assert boundaries(900.0, 900.0, 900.0).tolist() == [900.0]


@pytest.mark.slow  # a long property run
@settings(max_examples=300, deadline=None)
@given(st.floats(0, 4e7), st.floats(-1e4, 2e5), st.sampled_from([900.0, 3600.0, 1 / 3, 7.5]))
def test_boundaries_equal_numpy_bit_for_bit(now: float, slack: float, slot_s: float):
    assert np.array_equal(boundaries(now, now + slack, slot_s), numpy_candidate_starts(now, now + slack, slot_s))


def test_crowded_by_hand():
    """100 g/kWh, a gap of 50 at a price of 2 and a share of 0.5 ** 8: 100 + 100 / 256."""
    assert crowded(np.array([[100.0]]), np.array([[50.0]]), np.array([[0.5 ** 8]]), 2.0).tolist() == [[100.390625]]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5), st.integers(1, 40), st.sampled_from([2.0, 0.0, 1 / 3]), st.integers(0, 10**6))
def test_crowded_equals_numpy_bit_for_bit(clusters: int, slots: int, price: float, seed: int):
    rng = np.random.default_rng(seed)
    expected, gap = rng.uniform(0, 900, (2, clusters, slots)) * (rng.random((2, clusters, slots)) < 0.8)
    scale = np.power(rng.random((clusters, slots)), 8.0)
    assert np.array_equal(crowded(expected, gap, scale, price), expected + price * gap * scale)


def numpy_protection(top: np.ndarray, q: float, mu: np.ndarray, load: np.ndarray, intensity: np.ndarray,
                     used: np.ndarray) -> np.ndarray:
    """The protection charge in NumPy, the code the kernels replaced (``top``: ``(2, clusters, 1)``)."""
    g = np.divide(load, mu, out=np.zeros_like(load), where=mu > 0)
    live = g > 0
    if not live.any():
        return np.zeros(intensity.shape)
    g = np.where(live, g, 1.0)
    free = np.clip(top[0] - used, 0, None)
    free = np.where(np.isfinite(free), free, 0.0)
    order = np.argsort(intensity, axis=0, kind="stable")
    room = np.floor(np.cumsum(np.take_along_axis(free, order, axis=0), axis=0) / g)
    ranked = np.take_along_axis(intensity, order, axis=0)
    gap = np.diff(ranked, axis=0, append=ranked[-1:])
    units = int(np.ceil(q / g[live].min()))
    steps = np.arange(units)[:, None, None]
    needed = np.ceil(q / g)
    odds = np.where(steps < needed, at_least(room - steps, mu), 0.0).sum(axis=0)
    charge = np.empty_like(ranked)
    np.put_along_axis(charge, order, odds * gap * g / q, axis=0)
    return np.where(live, charge, 0.0)


def test_protection_terms_by_hand():
    """Clusters A (300 g/kWh, 3 GPUs free) and B (100, 1 free), one slot, 2 expected jobs of 2 GPUs: B ranks first,
    room floor(1000 / 2000) = 0 then floor(4000 / 2000) = 2; gaps 200, then 0."""
    g, live, order, room, gap = protection_terms(np.array([4000.0]), np.array([2.0]), np.array([8000.0, 2000.0]),
                                                 np.array([[5000.0], [1000.0]]), np.array([[300.0], [100.0]]))
    assert g.tolist() == [2000.0] and live.tolist() == [True] and order[:, 0].tolist() == [1, 0]
    assert room[:, 0].tolist() == [0.0, 2.0] and gap[:, 0].tolist() == [200.0, 0.0]
    charge = protection_charge(np.array([[0.5], [0.25]]), gap, g, 1000.0, order, live)
    assert charge[:, 0].tolist() == [0.0, 200.0]  # B: 0.5 × 200 × 2000 / 1000; A, the dirtiest: 0


def protections(draw: st.DrawFn) -> tuple:
    clusters, slots = draw(st.integers(1, 5)), draw(st.integers(1, 30))
    rng = np.random.default_rng(draw(st.integers(0, 10**6)))
    mu = rng.choice([0.0, 0.3, 2.0, 7.5], slots)
    load = mu * rng.choice([0.0, 100.0, 1000.0, 8000.0 / 3], slots)
    top = rng.choice([8000.0, 6000.0, INF], (2, clusters, 1))
    used = rng.choice([0.0, 2000.0, 7000.0, 9000.0, 1e4 / 3], (clusters, slots))
    intensity = rng.choice([100.0, 300.0, 1e3 / 7], (clusters, slots))
    return top, draw(st.sampled_from([500.0, 1000.0, 8000.0])), mu, load, intensity, used


@pytest.mark.slow  # a long property run
@settings(max_examples=300, deadline=None)
@given(st.composite(protections)())
def test_protection_equals_numpy_bit_for_bit(case: tuple):
    top, *rest = case
    assert np.array_equal(charge(top[0, :, 0], *rest), numpy_protection(top, *rest))
