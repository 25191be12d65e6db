"""Ours (scarce headroom): hand-computed scarcity weights and their refresh."""

from __future__ import annotations

import numpy as np
import pytest

from builders import nodes, pod
from quasched.metrics.fragmentation import TypicalPods
from quasched.model import Cluster
from quasched.model.random import NumpyStream
from quasched.policies import CycleState
from quasched.policies.scarcity import ScarceHeadroom

#: 1-GPU 4-core pods and 2-GPU 60-core pods; only n0 (64 cores) takes a 60-core pod
CLUSTER = nodes((64000, 1 << 20, 2, "T4"), (32000, 1 << 20, 2, "T4"))


def attached(counts: tuple[int, int], every: int = 128) -> tuple[ScarceHeadroom, Cluster]:
    typical = TypicalPods(((4000, 1000, 1, ""), (60000, 1000, 2, "")), counts, np.array(counts) / sum(counts))
    plugin = ScarceHeadroom(typical, learn=False, every=every)
    cluster = Cluster(CLUSTER)
    plugin.attach(cluster, NumpyStream(0))
    return plugin, cluster


def test_weights_are_size_times_expected_demand_over_supply():
    # copies S = (2 + 2, 1 + 0); mean GPU per pod (3·1000 + 1·2000)/4 = 1250 → R = 4000/1250 = 3.2 pods
    # D = (3/4·3.2, 1/4·3.2) = (2.4, 0.8) → w = (1000·2.4/4, 2000·min(1, 0.8/1)) = (600, 1600)
    plugin, _ = attached((3, 1))
    assert plugin.model.w == pytest.approx([600.0, 1600.0])


def test_a_shape_whose_demand_exceeds_its_supply_keeps_its_full_size():
    # mean (1000 + 3·2000)/4 = 1750 → R = 16/7; D = (4/7, 12/7); the 60-core shape has one copy: w = 2000
    plugin, _ = attached((1, 3))
    assert plugin.model.w == pytest.approx([1000 * (4 / 7) / 4, 2000.0])


def test_weights_follow_the_cluster_every_n_pods():
    plugin, cluster = attached((3, 1), every=2)
    cluster.place(pod(cpu=4000, k=1, m=1000, uid=1), 1, (0,))
    cluster.place(pod(cpu=4000, k=1, m=1000, uid=2), 1, (1,))
    before = plugin.model.w.copy()
    for uid in (3, 4):  # the second scored pod triggers the refresh
        plugin.score(cluster, pod(cpu=4000, k=1, m=1000, uid=uid), np.array([0]), CycleState())
    # seen 2 pods of 1000 m: R = 2000/1000 = 2; S = (2, 1); D = (1.5, 0.5) → w = (750, 1000)
    assert before == pytest.approx([600.0, 1600.0])
    assert plugin.model.w == pytest.approx([750.0, 1000.0])
