"""Rate health (:mod:`quasched.policies.health_rate`): hand-computed scores and a replay that remembers an old error."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from builders import nodes
from quasched.model import Cluster
from quasched.policies.base import CycleState
from quasched.policies.health_rate import RateHealthScore
from quasched.sim.failures import DeviceFailure, FailureConfig
from quasched.sim.replay import ReplayConfig, replay
from test_replay import TYPICAL, workload

HOUR = 3600.0


def scores(plugin: RateHealthScore, cluster: Cluster, nodes_: list[int]) -> np.ndarray:
    return plugin.score(cluster, None, np.array(nodes_), CycleState())  # type: ignore[arg-type]


def test_rate_health_by_hand():
    # nodes of 1, 1 and 2 GPUs; the first score at t = 0 starts the clock
    cluster = Cluster(nodes((8000, 8192, 1, "A"), (8000, 8192, 1, "A"), (8000, 8192, 2, "A")))
    plugin = RateHealthScore(prior=1.0)
    plugin.attach(cluster, None)  # type: ignore[arg-type]
    assert scores(plugin, cluster, [0, 1, 2]) == pytest.approx([100, 100, 100])
    for t, node in ((HOUR, 0), (2 * HOUR, 1), (2 * HOUR, 1)):
        cluster.errors.record(t, node, 0)
    cluster.errors.now = 10 * HOUR
    # r̄ = (3 + 1) / (4 GPUs · 10 h + 1 / 2e-5) = 4 / 50,040; r = (1 + n) / (50,040 / 4 + G · 10)
    mean = 4 / 50_040
    rate = np.array([2 / (1 / mean + 10), 3 / (1 / mean + 10), 1 / (1 / mean + 20)])
    assert scores(plugin, cluster, [0, 1, 2]) == pytest.approx(100 * rate.min() / rate)
    assert scores(plugin, cluster, [0, 1]) == pytest.approx([100, 100 * 2 / 3], rel=1e-9)  # equal sizes: (1+1)/(1+2)
    cluster.errors.now = 1e6 * HOUR  # nothing forgotten: only the counts matter now
    assert scores(plugin, cluster, [0, 1]) == pytest.approx([100, 100 * 2 / 3], rel=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=20), st.floats(0.01, 10))
def test_more_errors_never_score_more(errors, prior):
    cluster = Cluster(nodes(*[(8000, 8192, 2, "A")] * 4))
    plugin = RateHealthScore(prior)
    plugin.attach(cluster, None)  # type: ignore[arg-type]
    scores(plugin, cluster, [0])
    for i, node in enumerate(errors):
        cluster.errors.record(float(i + 1), node, 0)
    got = scores(plugin, cluster, [0, 1, 2, 3])
    counts = np.bincount(errors, minlength=4)
    assert got.max() == pytest.approx(100) and np.all(got > 0)
    for a in range(4):
        for b in range(4):
            if counts[a] > counts[b]:
                assert got[a] < got[b]


@pytest.mark.parametrize("seed", range(3))  # seeds on which FGD alone takes node 0
def test_replay_keeps_pods_off_a_node_that_failed_weeks_ago(seed):
    cluster = nodes(*[(8000, 8192, 1, "A")] * 2)
    arrive = 4 * 168 * HOUR
    pods = workload([(1000, 1024, 1, 1000, arrive, arrive + 10)])
    failures = [DeviceFailure(1.0, 0, 0, False, 60.0)]  # node 0, transient, 4 weeks before the pod
    placed = {policy: replay(cluster, pods, ReplayConfig(policy=policy, seed=seed, failures=FailureConfig()),
                             typical=TYPICAL, failures=failures).pods.node[0] for policy in ("fgd", "healthrate")}
    assert placed == {"fgd": 0, "healthrate": 1}
