"""CPU balance: CPU-starved GPU milli S = max(0, free GPU − free CPU / ρ), hand-computed."""

from __future__ import annotations

import numpy as np
import pytest
from builders import nodes, pod
from hypothesis import given, settings, strategies as st
from test_policy_headroom import scores

from quasched.metrics.typical import TypicalPods
from quasched.model import Cluster, Pod
from quasched.policies import Policy
from quasched.policies.cpu_balance import CpuBalanceScore
from quasched.policies.device_balance import DeviceBalanceScore

#: 3 × (8 cores, 1 GPU), 1 × (48 cores, 4 GPUs), CPU-only ignored: ρ = (3·8000 + 48000) / (3·1000 + 4000) = 72/7
MIX = TypicalPods(shapes=((8000, 1000, 1, ""), (48000, 1000, 4, ""), (64000, 0, 0, "")), counts=(3, 1, 9),
                  freq=np.array([0.25, 0.05, 0.7]))
#: a 16-core and a 64-core 2-GPU node
TWO = nodes((16000, 1 << 20, 2, "T4"), (64000, 1 << 20, 2, "T4"))


def test_rho_is_the_demand_weighted_cpu_per_gpu_milli_of_the_gpu_shapes():
    assert CpuBalanceScore(MIX).rho == pytest.approx((3 * 8000 + 48000) / (3 * 1000 + 4000))  # 72/7


@pytest.mark.parametrize("cpu, expected", [
    # 16-core node: S = max(0, 2000 − 16000·7/72) = 444.4; after 12 cores + 1 GPU: max(0, 1000 − 4000·7/72) = 611.1
    # 64-core node: S = 0 before and after
    (12000, [50 - (1000 - 4000 * 7 / 72 - (2000 - 16000 * 7 / 72)) / 160, 50.0]),
    # 4 cores + 1 GPU: 16-core node keeps 12 cores for 1 GPU, S = 0: 50 + 444.4 / 160
    (4000, [50 + (2000 - 16000 * 7 / 72) / 160, 50.0]),
])
def test_a_cpu_heavy_gpu_pod_scores_worse_on_the_cpu_short_node(cpu, expected):
    assert scores(Policy([(CpuBalanceScore(MIX), 1.0)]), Cluster(TWO), pod(cpu=cpu, k=1, m=1000)) == \
        pytest.approx(expected)


@pytest.mark.parametrize("term", [CpuBalanceScore, DeviceBalanceScore])
def test_without_a_typical_gpu_pod_the_term_is_neutral(term):
    cpu_only = TypicalPods(shapes=((4000, 0, 0, ""),), counts=(1,), freq=np.array([1.0]))
    assert scores(Policy([(term(cpu_only), 1.0)]), Cluster(TWO), pod(cpu=12000, k=1, m=500)) == [50.0, 50.0]


def loaded(cpu: int, k: int, used: int) -> tuple[Cluster, Pod]:
    """:data:`TWO` with ``used`` cores taken on the 64-core node, and a pod of ``cpu`` cores and ``k`` GPUs."""
    cluster = Cluster(TWO)
    cluster.place(pod(cpu=used * 1000, uid=1), 1)
    return cluster, pod(cpu=cpu * 1000, k=k, m=1000 if k else 0)


LOADED = dict(cpu=st.integers(0, 64), k=st.integers(0, 2), used=st.integers(0, 60))


@settings(max_examples=60, deadline=None)
@given(**LOADED)
def test_a_pod_below_rho_never_starves_and_a_cpu_only_pod_never_feeds(cpu, k, used):
    cluster, p = loaded(cpu, k, used)
    got = scores(Policy([(CpuBalanceScore(MIX), 1.0)]), cluster, p)
    term = CpuBalanceScore(MIX)
    if p.cpu_milli <= term.rho * p.gpu_request:
        assert min(got) >= 50
    if k == 0:
        assert max(got) <= 50
