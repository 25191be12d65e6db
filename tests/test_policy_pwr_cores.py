"""The working-core term (``pwr_cores``): hand-computed, and checked against the linear power model itself."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import nodes, pod
from quasched.metrics.power import cluster_power_w
from quasched.model import Cluster
from quasched.model.random import NumpyStream
from quasched.policies import CycleState, make_policy
from quasched.policies.pwr_cores import WorkingCores
from test_policy_pwr_scarce import MIX

#: three T4 nodes and a G3 node, 32 vCPU (16 cores, one socket) each
SPEC = nodes((32_000, 1 << 20, 2, "T4"), (32_000, 1 << 20, 2, "T4"), (32_000, 1 << 20, 2, "T4"), (32_000, 1 << 20, 1, "G3"))
EVERY = np.arange(4)


def scored(c: Cluster, p) -> np.ndarray:
    plugin = WorkingCores()
    plugin.attach(c, NumpyStream(0))
    return plugin.score(c, p, EVERY, CycleState())


def test_a_pod_takes_the_best_fit_of_its_cores_among_nodes_that_add_the_same_step_watts():
    c = Cluster(SPEC)
    c.place(pod(uid=1, cpu=3000), 0, ())  # 1.5 cores: 2 working, residue 0.5
    c.place(pod(uid=2, cpu=2600), 1, ())  # 1.3 cores: 2 working, residue 0.7
    # n0 and n1 have an active socket (+0 W step), the empty n2 does not (+105 W): n2 and the G3 are each
    # alone in their group, so their group's best (100); the term ranks only n0 against n1.
    # a 1-vCPU pod (0.5 core): cost ΔW + r'/2 = 0 + 0/2 on n0 (fills its last core), 0 + 0.2/2 on n1
    assert scored(c, pod(uid=3, cpu=1000)) == pytest.approx([100, 90, 100, 100])
    # a 1.2-vCPU pod (0.6 core) fits only n1's residue: 0 + 0.1/2 there, 1 + 0.9/2 on n0
    assert scored(c, pod(uid=3, cpu=1200)) == pytest.approx([0, 100, 100, 100])
    # a 3.8-vCPU pod (1.9 cores) fits neither: 2 + 0.6/2 on n0, 2 + 0.8/2 on n1
    assert scored(c, pod(uid=3, cpu=3800)) == pytest.approx([100, 90, 100, 100])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3000)), max_size=10), st.integers(1, 2000))  # never over 32 vCPU
def test_in_every_group_of_equal_model_and_step_watts_a_top_node_adds_the_least_linear_power(placed, cpu):
    c = Cluster(SPEC)
    for uid, (node, milli) in enumerate(placed):
        c.place(pod(uid=uid, cpu=milli), node, ())
    new = pod(uid=99, cpu=cpu)
    got = scored(c, new)
    before = {mode: cluster_power_w(c, mode=mode) for mode in ("linear", "step")}
    added = []
    for node in EVERY:
        c.place(new, int(node), ())
        added.append({mode: cluster_power_w(c, mode=mode) - before[mode] for mode in before})
        c.remove(new.uid)
    linear = np.array([a["linear"] for a in added])
    groups = {(m, round(a["step"], 6)) for m, a in zip(SPEC.gpu_model, added)}
    for model, step in groups:
        mine = np.array([m == model and round(a["step"], 6) == step for m, a in zip(SPEC.gpu_model, added)])
        assert (got[mine] == 100).any()
        assert np.allclose(linear[mine & (got == 100)], linear[mine].min())


def test_pwrbalance3_is_pwrbalance2_plus_the_working_core_term():
    two, three = make_policy("pwrbalance2", MIX), make_policy("pwrbalance3", MIX)
    assert [repr(p) for p, _ in three.plugins[:-1]] == [repr(p) for p, _ in two.plugins]
    assert isinstance(three.plugins[-1][0], WorkingCores) and three.plugins[-1][1] > 0
