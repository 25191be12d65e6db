"""Scarce-GPU power with a smooth price (``pwr_fill``): λ scaled by the whole-GPU pods' expected fill, hand-computed."""

from __future__ import annotations

import numpy as np
import pytest
from builders import pod
from hypothesis import given, settings, strategies as st
from test_policy_pwr_scarce import EVERY, MIX, THREE

from quasched.metrics.typical import TypicalPods
from quasched.model import Cluster
from quasched.model.random import NumpyStream
from quasched.policies import CycleState, make_policy
from quasched.policies.pwr_fill import FillPower
from quasched.policies.pwr_scarce import ScarcePower

#: whole GPUs 4,000 of 6,900 milli of demand (D = 0.58): below pwr_scarce's switch on THREE at horizon 50 %
FEW = TypicalPods(shapes=MIX.shapes, counts=(3, 1, 4, 2), freq=MIX.freq)


def attached(plugin: ScarcePower, cluster: Cluster) -> ScarcePower:
    plugin.attach(cluster, NumpyStream(0))
    return plugin


def test_the_price_is_scaled_by_the_share_of_the_cheap_idle_gpus_the_whole_gpu_pods_fill():
    c = Cluster(THREE)
    # W = 4,000 / 6,900 · 50 % · 6 GPUs = 1.74 whole GPUs for the T4s' 2 idle ones: φ = 0.87; s_ref = 120 W (G2)
    lam = 0.9 * (120 - 60) * (4000 / 6900 * 0.5 * 6) / 2
    got = attached(FillPower(FEW, horizon=50.0, cpu=0.0), c).score(c, pod(uid=1, cpu=0, k=1, m=810), EVERY, CycleState())
    assert got == pytest.approx([-((60 + lam) * 0.81 + lam * 0.19), -120 * 0.81, -270 * 0.81])
    switch = attached(ScarcePower(FEW, horizon=50.0, cpu=0.0), c)  # pwr_scarce: off altogether
    assert switch.score(c, pod(uid=1, cpu=0, k=1, m=810), EVERY, CycleState()) == pytest.approx([-48.6, -97.2, -218.7])


def test_one_idle_cheap_gpu_left_is_priced_fully_and_none_left_too():
    c = Cluster(THREE)
    c.place(pod(uid=0, cpu=0, k=1, m=1000), 0, (0,))  # W = 0.58 · 50 % · 5 = 1.45 ≥ the 1 idle T4
    plugin = attached(FillPower(FEW, horizon=50.0, cpu=0.0), c)
    assert plugin.score(c, pod(uid=1, cpu=0, k=1, m=1000), EVERY, CycleState()) == pytest.approx([-114, -120, -270])
    c.place(pod(uid=2, cpu=0, k=1, m=810), 0, (1,))  # no idle T4, W > 0: φ = 1; a 160 m pod un-strands 160 m
    got = plugin.score(c, pod(uid=3, cpu=0, k=1, m=160), EVERY, CycleState())
    assert got == pytest.approx([-(114 * 0.16 - 54 * 0.16), -120 * 0.16, -270 * 0.16])


def test_without_whole_gpu_pods_nothing_is_scarce_and_power_composes_the_term():
    sharing = TypicalPods(shapes=MIX.shapes[:2], counts=(3, 1), freq=np.array([0.75, 0.25]))
    c = Cluster(THREE)
    got = attached(FillPower(sharing, horizon=50.0, cpu=0.0), c).score(c, pod(uid=1, cpu=0, k=1, m=810), EVERY,
                                                                        CycleState())
    assert got == pytest.approx([-48.6, -97.2, -218.7])
    policy = make_policy("power:scarce=4", MIX)
    assert [(p.name, w) for p, w in policy.plugins][3:] == [("pwr-fill", 4.0), ("pwr", 1.0), ("pwr", 0.001)]


@settings(max_examples=40, deadline=None)
@given(used=st.lists(st.tuples(st.integers(0, 2), st.sampled_from([160, 470, 810, 1000])), max_size=6),
       milli=st.sampled_from([160, 470, 810, 1000]), whole=st.integers(0, 8), horizon=st.sampled_from([20.0, 50.0]))
def test_the_smooth_price_lies_between_no_price_and_the_full_price(used, milli, whole, horizon):
    c = Cluster(THREE)
    for uid, (node, m) in enumerate(used):
        if (c.gpu_free[node] >= m).any():
            c.place(pod(uid=uid, cpu=0, k=1, m=m), node, (int(np.argmax(c.gpu_free[node] >= m)),))
    mix = TypicalPods(shapes=MIX.shapes, counts=(3, 1, whole, 2), freq=MIX.freq)
    new = pod(uid=99, cpu=0, k=1, m=milli)
    fits = np.flatnonzero((c.gpu_free >= milli).any(axis=1))
    plain, full = (attached(ScarcePower(mix, horizon, kappa, cpu=0.0), c) for kappa in (0.0, 0.9))
    full.whole = np.inf  # every model's switch on
    got = attached(FillPower(mix, horizon, cpu=0.0), c).score(c, new, fits, CycleState())
    lo, hi = full.score(c, new, fits, CycleState()), plain.score(c, new, fits, CycleState())
    assert np.all(lo - 1e-9 <= got) and np.all(got <= hi + 1e-9)
