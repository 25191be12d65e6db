"""Device balance: each device's free milli priced by the CPU per milli-GPU of the typical pods fitting in it."""

from __future__ import annotations

import numpy as np
import pytest
from builders import nodes, pod
from hypothesis import given, settings
from test_policy_cpu_balance import LOADED, MIX, loaded
from test_policy_headroom import scores

from quasched.metrics.typical import TypicalPods
from quasched.model import Cluster
from quasched.model.random import NumpyStream
from quasched.policies import CycleState, Policy
from quasched.policies.cpu_balance import CpuBalanceScore
from quasched.policies.device_balance import DeviceBalanceScore

#: 3 × 810 m at 3152 CPU, 1 × 160 m at 4000 CPU: ρ(f ≥ 810) = (3·3152 + 4000) / (3·810 + 160), ρ(160..809) = 25
SHARE = TypicalPods(shapes=((3152, 810, 1, ""), (4000, 160, 1, ""), (2000, 0, 0, "")), counts=(3, 1, 5),
                    freq=np.array([0.3, 0.1, 0.6]))
RHO = (3 * 3152 + 4000) / (3 * 810 + 160)


def test_ratio_per_free_milli_counts_only_the_shapes_that_fit():
    ratio = DeviceBalanceScore(SHARE).ratio
    assert ratio[[0, 159, 160, 809, 810, 1000]] == pytest.approx([0, 0, 25, 25, RHO, RHO])
    assert DeviceBalanceScore(SHARE).rho == pytest.approx(RHO)


def test_a_small_pod_scores_better_in_the_sliver_an_810_m_pod_left():
    """8-core 2-GPU node with an 810 m pod (3152 CPU) on device 0: free [190, 1000], 4848 CPU.
    S = max(0, Σ f ρ(f) − c) / ρ; the 160 m, 4000-CPU pod goes to the 190 m or the 1000 m device."""
    cluster = Cluster(nodes((8000, 1 << 20, 2, "T4")))
    cluster.place(pod(cpu=3152, k=1, m=810, uid=1), 0, (0,))
    before = (190 * 25 + 1000 * RHO - 4848) / RHO
    in_sliver = (30 * 0 + 1000 * RHO - 848) / RHO  # 30 m left: nothing fits
    in_whole = (190 * 25 + 840 * RHO - 848) / RHO
    plugin = DeviceBalanceScore(SHARE)
    plugin.attach(cluster, NumpyStream(0))
    got = plugin.score(cluster, pod(cpu=4000, k=1, m=160), np.array([0]), CycleState())
    assert got[0] == pytest.approx([50 + (before - in_sliver) / 160, 50 - (in_whole - before) / 160])


@settings(max_examples=60, deadline=None)
@given(**LOADED)
def test_on_whole_devices_it_is_the_cpu_balance_term(cpu, k, used):
    cluster, p = loaded(cpu, k, used)
    assert scores(Policy([(DeviceBalanceScore(MIX), 1.0)]), cluster, p) == \
        pytest.approx(scores(Policy([(CpuBalanceScore(MIX), 1.0)]), cluster, p))


def test_memoised_scores_follow_place_and_remove():
    """The per-state memo gives what a fresh plugin computes after every change of the node."""
    cluster = Cluster(nodes((8000, 1 << 20, 2, "T4"), (16000, 1 << 20, 2, "T4")))
    memoised = DeviceBalanceScore(SHARE)
    memoised.attach(cluster, NumpyStream(0))
    small, big = pod(cpu=4000, k=1, m=160), pod(cpu=3152, k=1, m=810, uid=1)
    every = np.arange(2)

    def agrees() -> None:
        fresh = DeviceBalanceScore(SHARE)
        fresh.attach(cluster, NumpyStream(0))
        for p in (small, big):
            np.testing.assert_array_equal(memoised.score(cluster, p, every, CycleState()),
                                          fresh.score(cluster, p, every, CycleState()))

    agrees()
    cluster.place(big, 0, (0,))
    agrees()
    cluster.remove(big.uid)
    agrees()
