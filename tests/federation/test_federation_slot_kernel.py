"""The compiled per-slot kernels return, bit for bit, the NumPy expressions they replace (what keeps every
dispatcher's decisions unchanged); and a hand case for each."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from quasched.federation.carbon_aware import SLOT_S, occupancy
from quasched.federation.slot_kernel import displaced_each, least_after, load_share, loads_at, over_limit

INF = np.inf


def numpy_load_share(ledger: np.ndarray, demand: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    gpu, cpu = ledger + demand[:, None, None]
    return np.minimum(np.maximum(gpu / capacity[0, :, None], cpu / capacity[1, :, None]), 1)


def numpy_over_limit(ledger: np.ndarray, demand: np.ndarray, limit: np.ndarray) -> np.ndarray:
    gpu, cpu = ledger + demand[:, None, None] > limit[:, :, None]
    return gpu | cpu


def numpy_least_after(ledger: np.ndarray, demand: np.ndarray, top: np.ndarray) -> np.ndarray:
    after = np.clip(np.clip(top[:, :, None] - ledger, 0, None) - demand[:, None, None], 0, None)
    least = after[:, 0]
    for c in range(1, ledger.shape[1]):
        least = np.minimum(least, after[:, c])
    return least


def numpy_displaced_each(sample: np.ndarray, room: np.ndarray, after: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """The vectorised NumPy water-filling the kernel replaced (the displacement price's NumPy code)."""
    demand, power = sample[:, :2, None], sample[:, 2:]
    unit = power * expected
    order = np.argsort(unit, axis=1, kind="stable")
    unit = np.take_along_axis(unit, order, axis=1)

    def fit_share(r: np.ndarray) -> np.ndarray:
        out = np.full(np.broadcast_shapes(r.shape, demand.shape), np.inf)
        np.divide(r, demand, out=out, where=demand > 0)
        return out.min(axis=1)

    base, held = (np.take_along_axis(fit_share(r), order, axis=1) for r in (room, after))
    variants = np.arange(-1, room.shape[1])[:, None, None]
    left, carbon = np.ones((len(variants), *unit[:, 0].shape)), 0.0
    for i in range(room.shape[1]):
        take = np.minimum(left, np.where(order[:, i] == variants, held[:, i], base[:, i]))
        carbon = carbon + take * unit[:, i]
        left -= take
    carbon = carbon + left * unit[:, -1]
    return carbon[1:] - carbon[0]


def test_by_hand():
    """Two clusters, two slots. Cluster 0 (8 GPU, 64 cores; ledger 4 GPU + 16 cores, then 7 GPU): with a job of 2 GPU
    and 8 cores, use 6/8 then 9/8 → 1; cluster 1 has no GPU (capacity inf: 0) and 32 cores half used: (16 + 8) / 32."""
    ledger = np.array([[[4000.0, 7000.0], [0.0, 0.0]], [[16000.0, 16000.0], [16000.0, 16000.0]]])
    demand = np.array([2000.0, 8000.0])
    capacity = np.array([[8000.0, INF], [64000.0, 32000.0]])
    assert load_share(ledger, demand, capacity).tolist() == [[0.75, 1.0], [0.75, 0.75]]
    assert over_limit(ledger, demand, capacity).tolist() == [[False, True], [False, False]]
    # room after the job per resource: GPU min(2000, inf) then min(0, inf); cores min(40000, 8000)
    assert least_after(ledger, demand, capacity).tolist() == [[2000.0, 0.0], [8000.0, 8000.0]]


def arrays(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    clusters, slots = draw(st.integers(1, 5)), draw(st.integers(1, 40))
    rng = np.random.default_rng(draw(st.integers(0, 10**6)))
    capacity = rng.choice([1000.0, 8000.0, 64000.0, 1e5 / 3, INF], size=(2, clusters))
    finite = np.where(np.isfinite(capacity), capacity, 5e4)[:, :, None]
    ledger = rng.uniform(0, 1.3, (2, clusters, slots)) * finite * (rng.random((2, clusters, slots)) < 0.8)
    demand = rng.choice([0.0, 500.0, 1000.0, 3000.0, 8000.0, 1e4 / 3], size=2)
    return ledger, demand, capacity * draw(st.sampled_from([1.0, 0.9, 1 / 3]))


@settings(max_examples=200, deadline=None)
@given(st.composite(arrays)())
def test_kernels_equal_numpy_bit_for_bit(case: tuple[np.ndarray, np.ndarray, np.ndarray]):
    ledger, demand, capacity = case
    assert np.array_equal(load_share(ledger, demand, capacity), numpy_load_share(ledger, demand, capacity))
    assert np.array_equal(over_limit(ledger, demand, capacity), numpy_over_limit(ledger, demand, capacity))
    assert np.array_equal(least_after(ledger, demand, capacity), numpy_least_after(ledger, demand, capacity))
    window = np.ascontiguousarray(ledger[:, :, ::-1])[:, :, ::-1]  # a strided view: the same values
    assert np.array_equal(least_after(window, demand[::-1][::-1], capacity), numpy_least_after(ledger, demand, capacity))


def test_water_filling_by_hand():
    """One sample of 1 GPU (no CPU) at 2 kW on A (100 g/kWh) and B (300, the dirtier): with 0.5 GPU of room on A, half
    of the load runs on A: 0.5 × 200 + 0.5 × 600 = 400 g/h. The job on A leaves A no room: 600 g/h, +200; the job on B
    changes nothing (the rest goes to B anyway)."""
    sample = np.array([[[1000.0], [0.0], [2.0], [2.0]]])
    room = np.array([[[500.0], [1000.0]], [[INF], [INF]]])
    after = np.array([[[0.0], [0.0]], [[INF], [INF]]])
    out = displaced_each(sample, room, after, np.array([[100.0], [300.0]]))
    assert out[:, 0, 0].tolist() == [200.0, 0.0]


def fills(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    samples, clusters, slots = draw(st.integers(1, 24)), draw(st.integers(1, 5)), draw(st.integers(1, 12))
    rng = np.random.default_rng(draw(st.integers(0, 10**6)))
    sample = rng.uniform(0, 3000, (samples, 2 + clusters, slots)) * (rng.random((samples, 2 + clusters, slots)) < 0.8)
    sample[:, 2:] = np.round(sample[:, 2:], draw(st.sampled_from([0, -3])))  # ties in power, hence in unit
    room = rng.choice([0.0, 250.0, 1000.0, 1e4 / 3, INF], size=(2, clusters, slots))
    after = np.clip(room - rng.choice([0.0, 500.0, 1000.0]), 0, None)
    expected = rng.choice([100.0, 300.0, 1e3 / 7], size=(clusters, slots))
    return sample, room, after, expected


@settings(max_examples=200, deadline=None)
@given(st.composite(fills)())
def test_water_filling_equals_numpy_bit_for_bit(case: tuple[np.ndarray, ...]):
    assert np.array_equal(displaced_each(*case), numpy_displaced_each(*case))


def numpy_occupancy(start: float, duration: float) -> tuple[int, np.ndarray]:
    first = int(start // SLOT_S)
    last = max(first + 1, int(np.ceil((start + duration) / SLOT_S)))
    edges = np.arange(first, last + 1) * SLOT_S
    covered = np.minimum(edges[1:], start + duration) - np.maximum(edges[:-1], start)
    return first, np.clip(covered, 0, None) / SLOT_S


def test_occupancy_by_hand():
    """From 10 min to 40 min: 5 of slot 0's 15 min, all of slot 1, 10 of slot 2's; a run of 0 s still has one entry."""
    first, share = occupancy(600.0, 1800.0)
    assert first == 0 and share.tolist() == [1 / 3, 1.0, 2 / 3]
    assert occupancy(900.0, 0.0)[1].tolist() == [0.0]


@settings(max_examples=300, deadline=None)
@given(st.floats(0, 1e7), st.floats(0, 3e6), st.sampled_from([1.0, 900.0, 1 / 3, 0.1]))
def test_occupancy_equals_numpy_bit_for_bit(start: float, duration: float, grain: float):
    start, duration = start - start % grain, duration - duration % grain  # on and off the slot grid
    first, share = occupancy(start, duration)
    expected = numpy_occupancy(start, duration)
    assert first == expected[0] and np.array_equal(share, expected[1])


def test_loads_at_by_hand():
    """Two samples (1 cluster) at leads 0 and 2 of two slots; room on the fullest 500 GPU milli and 0 CPU: the first
    sample (300 then 400 GPU milli, no CPU) fits everywhere and is dropped, the second (600 GPU milli 2 slots ahead) is kept."""
    past = np.zeros((2, 3, 3))
    past[0, 0] = [300.0, 350.0, 400.0]
    past[1, 0] = [100.0, 200.0, 600.0]
    past[:, 2] = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    out = loads_at(past, np.array([0, 2]), np.array([[500.0, 500.0], [0.0, 0.0]]))
    assert out.tolist() == [[[100.0, 600.0], [0.0, 0.0], [4.0, 6.0]]]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 24), st.integers(1, 5), st.integers(1, 30), st.integers(0, 10**6))
def test_loads_at_equals_numpy(samples: int, clusters: int, slots: int, seed: int):
    rng = np.random.default_rng(seed)
    past = rng.choice([0.0, 100.0, 500.0, 1000.0], size=(samples, 2 + clusters, 9))
    ahead, least = rng.integers(0, 9, slots), rng.choice([0.0, 300.0, 1000.0, INF], size=(2, slots))
    sample = past[:, :, ahead]
    expected = sample[(least < sample[:, :2]).reshape(len(sample), -1).any(axis=1)]
    assert np.array_equal(loads_at(past, ahead, least), expected)
