"""Scarce-GPU power (``pwr_scarce``): linear watts with cheap GPUs priced as scarce, hand-computed."""

from __future__ import annotations

import numpy as np
import pytest
from builders import nodes, pod
from hypothesis import given, settings, strategies as st

from quasched.metrics.typical import TypicalPods
from quasched.model import Cluster
from quasched.model.random import NumpyStream
from quasched.policies import CycleState
from quasched.policies.pwr import added_power_w
from quasched.policies.pwr_scarce import ScarcePower, waste_table

#: sharing 810 m (3 pods) and 470 m (1 pod); whole GPUs (8 pods, 8,000 of 10,900 milli of demand) and
#: CPU-only pods strand nothing
MIX = TypicalPods(shapes=((2000, 810, 1, ""), (2000, 470, 1, ""), (4000, 1000, 1, ""), (1000, 0, 0, "")),
                  counts=(3, 1, 8, 2), freq=np.array([0.2, 0.07, 0.6, 0.13]))
#: T4 (swing 60 W), G2 = A10 (120 W), V100 (270 W); 2 GPUs and 16 vCPU each
THREE = nodes((16_000, 1 << 20, 2, "T4"), (16_000, 1 << 20, 2, "G2"), (16_000, 1 << 20, 2, "V100M16"))
EVERY = np.arange(3)


def test_waste_is_the_free_milli_times_the_share_of_typical_sharing_pods_that_no_longer_fit():
    waste = waste_table(MIX)
    assert waste[190] == 190  # neither 810 nor 470 fits
    assert waste[530] == pytest.approx(530 * 3 / 4)  # only the 470 m pod fits
    assert waste[900] == 0 and waste[0] == 0 and waste[1000] == 0  # all fit / nothing free / an idle device


def scarce(cluster: Cluster, **kw: float) -> ScarcePower:
    plugin = ScarcePower(MIX, **{"horizon": 50.0, "cpu": 0.0, **kw})
    plugin.attach(cluster, NumpyStream(0))
    return plugin


def test_a_pod_that_would_strand_a_cheap_gpu_goes_to_the_next_model_and_a_whole_gpu_takes_it():
    c = Cluster(THREE)
    plugin = scarce(c)
    # nothing allocated, horizon 50 % of 6 GPUs reaches the G2s (cheapest first: T4 2 GPUs, G2 2, V100 2):
    # s_ref = 120 W, λ = 0.9 · (120 − swing) = 54 W on the T4 node, 0 on the others; the whole-GPU
    # demand up to the horizon, 8,000 / 10,900 · 3,000 milli, fills the T4s' 2,000
    got = plugin.score(c, pod(uid=1, cpu=0, k=1, m=810), EVERY, CycleState())
    assert got == pytest.approx([-(114 * 0.81 + 54 * 0.19), -120 * 0.81, -270 * 0.81])  # strands 190 m on the T4
    assert plugin.score(c, pod(uid=2, cpu=0, k=1, m=1000), EVERY, CycleState()) == pytest.approx([-114, -120, -270])
    got = plugin.score(c, pod(uid=3, cpu=0, k=1, m=470), EVERY, CycleState())
    assert got == pytest.approx([-(114 * 0.47 + 54 * 0.530 * 3 / 4), -120 * 0.47, -270 * 0.47])


def test_cheap_gpus_are_not_priced_as_scarce_when_the_whole_gpu_pods_cannot_fill_them():
    few = TypicalPods(shapes=MIX.shapes, counts=(3, 1, 4, 2), freq=MIX.freq)  # 4,000 / 6,900 · 3,000 < 2,000
    c = Cluster(THREE)
    plugin = ScarcePower(few, horizon=50.0, cpu=0.0)
    plugin.attach(c, NumpyStream(0))
    got = plugin.score(c, pod(uid=1, cpu=0, k=1, m=810), EVERY, CycleState())
    assert got == pytest.approx([-60 * 0.81, -120 * 0.81, -270 * 0.81])


def test_filling_a_stranded_sliver_costs_the_plain_swing_and_the_device_that_strands_least_counts():
    c = Cluster(THREE)
    c.place(pod(uid=0, cpu=0, k=1, m=810), 0, (0,))
    plugin = scarce(c)
    # T4 device 0 has 190 m free: a 160 m pod un-strands 190 − 30 m; λ stays 54 W (reach 810 + 50 % of 5,190,
    # whole-GPU demand 8,000 / 10,900 of it ≥ 2,000)
    got = plugin.score(c, pod(uid=1, cpu=0, k=1, m=160), EVERY, CycleState())
    assert got == pytest.approx([-(114 * 0.16 - 54 * 0.16), -120 * 0.16, -270 * 0.16])


def test_cheap_gpus_are_not_scarce_within_a_short_horizon_and_the_cpu_term_counts_working_cores():
    c = Cluster(THREE)
    c.place(pod(uid=0, cpu=1000), 1)  # n1: half a core working → 1 working core
    plugin = scarce(c, horizon=20.0, cpu=0.5)  # reach 1.2 GPUs: the T4s, λ = 0
    # 3 vCPU: 2 working cores on idle n0 and n2, 1 more on n1; 105 W / 16 cores per core, half counted
    got = plugin.score(c, pod(uid=1, cpu=3000, k=1, m=810), EVERY, CycleState())
    core = 0.5 * 105 / 16
    assert got == pytest.approx([-60 * 0.81 - 2 * core, -120 * 0.81 - core, -270 * 0.81 - 2 * core])
    assert plugin.score(c, pod(uid=2, cpu=3000), EVERY, CycleState()) == pytest.approx([-2 * core, -core, -2 * core])


def test_the_term_stops_from_until_percent_allocated():
    c = Cluster(THREE)
    c.place(pod(uid=0, cpu=0, k=2, m=1000), 2, (0, 1))  # 2 of 6 GPUs
    assert scarce(c, until=30.0).score(c, pod(uid=1, k=1, m=1000), EVERY, CycleState()).tolist() == [0, 0, 0]


@settings(max_examples=40, deadline=None)
@given(used=st.lists(st.tuples(st.integers(0, 2), st.sampled_from([160, 470, 810, 1000]), st.integers(0, 6)),
                     max_size=6),
       milli=st.sampled_from([160, 470, 810, 1000]), cpu=st.integers(0, 8))
def test_without_scarcity_the_cost_is_the_linear_watts_the_pod_adds(used, milli, cpu):
    c = Cluster(THREE)
    for uid, (node, m, cores) in enumerate(used):
        p = pod(uid=uid, cpu=cores * 1000, k=1, m=m)
        if (c.gpu_free[node] >= m).any() and c.free[node, 0] >= p.cpu_milli:
            c.place(p, node, (int(np.argmax(c.gpu_free[node] >= m)),))
    new = pod(uid=99, cpu=cpu * 1000, k=1, m=milli)
    fits = np.flatnonzero((c.gpu_free >= milli).any(axis=1) & (c.free[:, 0] >= new.cpu_milli))
    plugin = scarce(c, kappa=0.0, cpu=1.0)
    idle, full = plugin.model.gpu_watts(c.models)
    want = added_power_w(c, new, fits, idle, full, plugin.model, "linear")
    assert plugin.score(c, new, fits, CycleState()) == pytest.approx(-want)
