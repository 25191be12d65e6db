"""The compiled per-slot kernels return, bit for bit, the NumPy expressions they replace (what keeps every
dispatcher's decisions unchanged); and a hand case for each."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from quasched.federation.slot_kernel import least_after, load_share, over_limit

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
