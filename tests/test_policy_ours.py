"""Ours: FGD on its sigmoid scale + 8 × the headroom term, on the hand-computed Headroom examples."""

from __future__ import annotations

import numpy as np

from builders import cluster_with_free, nodes, pod
from quasched.model import Cluster
from quasched.model.random import NumpyStream
from quasched.policies import CycleState, Scheduler, make_policy
from test_policy_headroom import TOY, scores


def ours():
    return make_policy("ours:learn=false", TOY)


def test_sharing_pod_fgd_sigmoid_plus_unchanged_headroom():
    # §7.2 node (T4, 6 cores, [300, 1000]): ΔF = 200 on device 0 → trunc(100 σ(0.2)) = 54, 100 on device 1
    # → 52; headroom unchanged → 8 · 50
    cluster = cluster_with_free([[300, 1000]], cpu=6000)
    p, policy = pod(cpu=2000, k=1, m=200), ours()
    assert scores(policy, cluster, p) == [54 + 400]
    assert policy.reserve(cluster, p, 0, CycleState()) == (0,)


def test_whole_gpu_pod_pays_for_the_headroom_it_destroys():
    # ΔF = 500 → trunc(100 σ(0.5)) = 62; ΔH / N = −2500 / 10 → 8 · (50 − 250/160) = 387.5
    cluster = cluster_with_free([[300, 1000]], cpu=6000)
    assert scores(ours(), cluster, pod(cpu=3000, k=1, m=1000)) == [62 + 387.5]


def test_fgd_ties_are_broken_by_the_headroom_destroyed():
    # CPU-only 4-core pod: FGD 50 on both nodes; on the 16-core node it destroys ΔH = −5500 (N = 10)
    cluster = Cluster(nodes((16000, 1 << 20, 2, "T4"), (40000, 1 << 20, 2, "T4")))
    p = pod(cpu=4000)
    assert scores(ours(), cluster, p) == [50 + 8 * (50 - 550 / 160), 450]
    assert Scheduler(cluster, ours(), np.array([0, 1]), NumpyStream(0)).decide(p).node == 1
