"""The protection price of ``carbon-defer``: Littlewood protection levels for inflexible demand (module docstring of
:mod:`quasched.federation.protection`)."""

from __future__ import annotations

import numpy as np
import pytest
from builders import nodes, pod
from scipy.stats import poisson
from test_federation import H

from quasched.federation.carbon_defer import CarbonDefer
from quasched.federation.dispatch import View
from quasched.federation.forecast import HISTORY_H
from quasched.federation.registry import make_dispatcher
from quasched.model import Cluster
from quasched.model.odds import at_least


def protect(tau_h: float, cpu_jobs: int = 0, on: bool = True) -> CarbonDefer:
    """Clusters A (100 g/kWh in the first hour, 120 after) and B (300) of 2 GPUs. Job 0 (1 GPU, 1 h, inflexible) arrives at 0 and takes A for
    the first hour; job 1 (1 GPU, 1 h, 1 kW, slack 2 h) arrives at 0 too; then ``cpu_jobs`` inflexible 1 h jobs without GPUs.
    Each cluster is one empty node of 2 GPUs (the pods are not placed: every start now finds a node)."""
    n = 2 + cpu_jobs
    intensity = np.array([[100.0] + [120.0] * 5, [300.0] * 6])
    gpu = np.r_[1000.0, 1000.0, np.zeros(cpu_jobs)]
    view = View(capacity=np.array([[2000.0, 2000.0], [8000.0, 8000.0]]), demand=np.vstack([gpu, np.full(n, 1000.0)]),
                duration=np.full(n, H), latest_start=np.r_[0.0, 2 * H, np.zeros(cpu_jobs)], kw=np.ones((n, 2)),
                intensity=intensity, history=np.repeat(intensity[:, :1], HISTORY_H, axis=1),
                placeable=np.ones((n, 2), dtype=bool))
    view.nodes = [Cluster(nodes((8000, 1 << 20, 2, "A100"))) for _ in range(2)]
    view.pod = lambda j: pod(k=1 if gpu[j] else 0, m=int(gpu[j]), uid=j)
    d = CarbonDefer(tau=tau_h, price=0, delay=0, perfect=True, protect=on)
    d.reset(view)
    assert d.dispatch(0, 0.0) == (0, 0.0)
    for job in range(2, n):
        d.dispatch(job, 0.0)
    return d


@pytest.mark.parametrize("cpu_jobs", [0, 3])
def test_protection_by_hand(cpu_jobs):
    """After job 0: mu(L) = min(1 h, L) / tau, g = 1000. Job 1 on A in slot 0 (15 min ahead, A's room 1 GPU): R = 1,
    charge 200 × P(D ≥ 1); in slot 4 (1 h 15 ahead, A empty again): R = 2, charge (300 − 120) × P(D ≥ 2) with mu = 1 h / tau.
    On B (the dirtiest) nothing. Inflexible jobs without GPUs take no GPU room: they change neither mu nor g."""
    d = protect(2.0, cpu_jobs)
    index = np.array([0, 4])
    rate = d.rate(1, 0.0, index, d.ledger[:, :, index])
    mu = np.array([0.25, 1.0]) / 2.0
    assert rate[0] == pytest.approx([100 + 200 * poisson.sf(0, mu[0]), 120 + 180 * poisson.sf(1, mu[1])])
    assert rate[1] == pytest.approx([300.0, 300.0])


@pytest.mark.parametrize("tau_h, waits", [(0.5, True), (1.0, True), (2.0, True), (8.0, False), (100.0, False)])
def test_deferred_exactly_when_the_displaced_carbon_exceeds_the_saving(tau_h, waits):
    """Job 1 on A in slot k pays I_A + (300 − I_A) P(D ≥ R − 0), R = 1 while job 0 runs (slots 0-3), else 2, mu =
    min(1 h, ahead) / tau; on B 300. It starts at the cheapest slot boundary (hand costs below); it waits for A's
    second GPU at 1 h, paying 120 instead of 100, exactly when the displaced carbon now exceeds that 20."""
    d = protect(tau_h)
    slots = np.arange(12)
    ahead = np.minimum((slots + 1) * 0.25, 1.0)
    price = np.where(slots < 4, 100.0, 120.0)
    rate = price + (300 - price) * poisson.sf(np.where(slots < 4, 0, 1), ahead / tau_h)
    cost = [rate[s:s + 4].mean() for s in range(9)]  # starts 0, 15 min, ..., 2 h
    pick = d.dispatch(1, 0.0)
    assert pick == (0, 0.25 * H * int(np.argmin(cost)))
    assert (pick.start > 0) == waits == (cost[0] > cost[4])
    unprotected = make_dispatcher("carbon-defer:price=0,delay=0,perfect=true,protect=false")
    unprotected.reset(d.view)
    unprotected.dispatch(0, 0.0)
    assert unprotected.dispatch(1, 0.0) == (0, 0.0)  # without the protection: A at once
    assert protect(tau_h, on=False).dispatch(1, 0.0) == (0, 0.0)  # protect=False: the same


def test_inflexible_jobs_pay_no_protection():
    d = protect(0.5)
    index = np.arange(4)
    assert d.rate(0, 0.0, index, d.ledger[:, :, index])[0] == pytest.approx(100.0)


def test_bad_tau_is_named():
    with pytest.raises(ValueError, match="tau='0': must be above 0"):
        make_dispatcher("carbon-defer:tau=0")


def test_the_odds_of_needing_the_last_unit_of_room_are_poisson_tails():
    """No room left: the next arrival is turned away for sure; room 2 under a load of 1: ``P(Poisson(1) ≥ 2) = 1 − 2/e``."""
    assert at_least(np.array([0, 2]), np.array([1.0, 1.0])) == pytest.approx([1.0, 1 - 2 * np.exp(-1)])
