"""The working-core term (``pwr_cores``): hand-computed, and checked against the linear power model itself."""

from __future__ import annotations

import numpy as np
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


def test_a_pod_goes_where_its_fraction_of_a_core_fits_in_a_working_core_and_each_gpu_model_keeps_its_best():
    c = Cluster(SPEC)
    c.place(pod(uid=1, cpu=3000), 0, ())  # 1.5 cores: 2 working, residue 0.5
    c.place(pod(uid=2, cpu=2000), 1, ())  # 1 core: 1 working, residue 0
    # a 1-vCPU pod (0.5 core): on n0 it sets no new core working (+0 W), on n1 and n2 one (+6.56 W);
    # the G3 is the only node of its model, so its best: the term leaves the choice between models alone
    assert scored(c, pod(uid=3, cpu=1000)).tolist() == [100, 0, 0, 100]
    # a 1.2-vCPU pod (0.6 core) no longer fits n0's residue: one more core everywhere, every node alike
    assert scored(c, pod(uid=3, cpu=1200)).tolist() == [100, 100, 100, 100]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3000)), max_size=10), st.integers(1, 2000))  # never over 32 vCPU
def test_a_top_scored_node_adds_the_least_linear_power_of_its_gpu_model_and_every_model_has_one(placed, cpu):
    c = Cluster(SPEC)
    for uid, (node, milli) in enumerate(placed):
        c.place(pod(uid=uid, cpu=milli), node, ())
    new = pod(uid=99, cpu=cpu)
    got = scored(c, new)
    before = cluster_power_w(c, mode="linear")
    added = []
    for node in EVERY:
        c.place(new, int(node), ())
        added.append(cluster_power_w(c, mode="linear") - before)
        c.remove(new.uid)
    added_w = np.array(added)
    for model in set(SPEC.gpu_model):
        mine = np.asarray(SPEC.gpu_model) == model
        assert (got[mine] == 100).any()
        assert np.allclose(added_w[mine & (got == 100)], added_w[mine].min())


def test_pwrbalance3_is_pwrbalance2_plus_the_working_core_term():
    two, three = make_policy("pwrbalance2", MIX), make_policy("pwrbalance3", MIX)
    assert [repr(p) for p, _ in three.plugins[:-1]] == [repr(p) for p, _ in two.plugins]
    assert isinstance(three.plugins[-1][0], WorkingCores) and three.plugins[-1][1] > 0
