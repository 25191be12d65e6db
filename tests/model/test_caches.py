"""Caches keyed by node state stay bounded and correct across node changes."""

from __future__ import annotations

import numpy as np
from builders import change_node, nodes, pod
from hypothesis import given, settings, strategies as st

from quasched.metrics.fragmentation import NodeStates, StateTable
from quasched.metrics.typical import TypicalPods
from quasched.model import Cluster
from quasched.model.random import NumpyStream
from quasched.policies import CycleState, make_policy
from quasched.policies.fgd import FGD
from quasched.policies.filter import Feasibility, feasible_nodes

TYPICAL = TypicalPods(((1000, 500, 1, ""), (2000, 1000, 1, "")), (3, 1), np.array([0.75, 0.25]))


def states_match(states: NodeStates) -> None:
    ids, c = states.ids(), states.cluster
    for node in np.flatnonzero(c.present):
        s = ids[node]
        assert (states.model_id[s], states.cpu[s]) == (c.model_id[node], c.cpu_free[node])
        assert states.gpu[s].tolist() == sorted(c.gpu_free[node].tolist())


def test_state_table_starts_over_past_its_bound_and_stays_correct():
    cluster = Cluster(nodes((64000, 1 << 20, 4, "T4")))
    states = NodeStates(cluster, max_states=3)
    first = states.generation
    for uid in range(6):  # six different node states
        cluster.place(pod(uid=uid, k=1, m=100), 0, (uid % 4,))
        states_match(states)
    assert states.generation > first and len(states) <= 4


def test_fgd_scores_survive_nodes_joining_with_more_devices_and_new_models():
    cluster = Cluster(nodes((64000, 1 << 20, 2, "T4"), (64000, 1 << 20, 2, "T4")))
    plugin = FGD(TYPICAL)
    plugin.attach(cluster, NumpyStream(0))
    p = pod(k=1, m=500)
    plugin.score(cluster, p, np.array([0, 1]), CycleState())
    cluster.place(pod(uid=1, k=1, m=300), 0, (1,))
    cluster.add_node("big", {"cpu": 96000, "memory": 1 << 20}, num_gpus=8, gpu_model="A100")
    cluster.remove_node(1)
    live = np.flatnonzero(cluster.present)
    fresh = FGD(TYPICAL)
    fresh.attach(cluster, NumpyStream(0))
    got = plugin.score(cluster, p, live, CycleState())
    np.testing.assert_array_equal(got, fresh.score(cluster, p, live, CycleState()))
    assert got.shape == (2, 8)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.sampled_from([100, 250, 500, 1000]),
                          st.booleans()), min_size=1, max_size=40), st.integers(1, 7))
def test_incremental_fragmentation_total_equals_a_full_recomputation(steps, block):
    """The block-wise refold is bit-identical to folding every node's vector in slot order, whatever changed."""
    cluster = Cluster(nodes(*[(64000, 1 << 20, 4, "T4")] * 3, *[(32000, 1 << 20, 2, "A100")] * 3))
    table = StateTable(cluster, TYPICAL, fold_block=block)
    placed: list[int] = []
    for uid, (node, device, milli, remove) in enumerate(steps):
        if remove and placed:
            cluster.remove(placed.pop(0))
        elif device < cluster.num_gpus[node] and cluster.gpu_free[node, device] >= milli:
            cluster.place(pod(uid=uid, k=1, m=milli), node, (device,))
            placed.append(uid)
        totals = table.category_totals()
        assert totals.tobytes() == np.add.reduce(table.vectors[table.ids()], axis=0).tobytes()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.booleans(), st.booleans()), min_size=1, max_size=60),
       st.integers(0, 600))
def test_change_log_lists_exactly_the_nodes_whose_version_changed(steps, churn):
    """``changes_since(mark)`` == the nodes whose version moved since the mark, or None once the
    log was trimmed past it (``churn`` place/remove pairs push it past its bound)."""
    cluster = Cluster(nodes(*[(64000, 1 << 20, 4, "T4")] * 3))
    marks = [(cluster.change_mark, cluster.version.copy())]
    placed: list[int] = []
    for uid, (node, device, remove, mark) in enumerate(steps):
        if remove and placed:
            cluster.remove(placed.pop())
        elif cluster.gpu_free[node, device] >= 100:
            cluster.place(pod(uid=uid, k=1, m=100), node, (device,))
            placed.append(uid)
        else:
            cluster.cordon(node)
        if mark:
            marks.append((cluster.change_mark, cluster.version.copy()))
    for uid in range(1000, 1000 + churn):
        cluster.place(pod(uid=uid), 0)
        cluster.remove(uid)
    for mark, version in marks:
        changed = cluster.changes_since(mark)
        expected = np.flatnonzero(cluster.version != version).tolist()
        assert changed == expected or (changed is None and churn > 0)
    assert cluster.changes_since(cluster.change_mark) == [] and cluster.changes_since(-1) is None


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["place", "remove", "cordon", "uncordon", "fail", "heal", "add"]),
                          st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=50))
def test_incremental_feasibility_equals_filtering_from_scratch(steps):
    """After any sequence of changes, the per-demand masks give exactly the Filter's answer."""
    cluster = Cluster(nodes(*[(16000, 1 << 14, 4, "T4")] * 2, (8000, 1 << 13, 2, "A100"), (4000, 1 << 12, 0, "")))
    feasibility = Feasibility(cluster)
    demands = [pod(cpu=2000, k=1, m=500), pod(cpu=4000, mem=4096, k=2, m=1000), pod(cpu=1000),
               pod(cpu=1000, k=1, m=300, spec="A100"), pod(cpu=3000, k=1, m=1000, app="a", max_per_node=1)]
    placed: list[int] = []
    for uid, (op, node, device, which) in enumerate(steps, start=100):
        present = np.flatnonzero(cluster.present)
        target = int(present[node % len(present)])
        if op == "place":
            candidates = Feasibility(cluster).nodes(demands[which])
            if len(candidates):
                p = pod(uid=uid, cpu=demands[which].cpu_milli, mem=demands[which].memory_mib,
                        k=demands[which].num_gpu, m=demands[which].gpu_milli, app=demands[which].app)
                n = int(candidates[node % len(candidates)])
                free = np.flatnonzero(cluster.gpu_free[n] >= p.gpu_milli)[: p.num_gpu] if p.is_gpu else []
                cluster.place(p, n, tuple(free.tolist()) if p.is_gpu else ())
                placed.append(uid)
        else:
            change_node(cluster, op, target, device, uid, placed)
        for d in demands[which:] + demands[:which]:
            assert feasibility.nodes(d).tolist() == feasible_nodes(cluster, d).tolist()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.sampled_from([100, 250, 500, 1000])),
                min_size=1, max_size=30), st.sampled_from([100, 300, 500, 1000]))
def test_best_columns_from_the_memo_equal_the_maximum_of_the_device_columns(steps, milli):
    """A lone plugin's per-node best (memoised per state) == the row maximum of its device columns."""
    cluster = Cluster(nodes(*[(64000, 1 << 20, 4, "T4")] * 3, *[(32000, 1 << 20, 2, "A100")] * 3))
    policy = make_policy("fgd", TYPICAL)
    policy.attach(cluster, NumpyStream(0))
    plugin = policy.plugins[0][0]
    for uid, (node, device, m) in enumerate(steps):
        if device < cluster.num_gpus[node] and cluster.gpu_free[node, device] >= m:
            cluster.place(pod(uid=uid, k=1, m=m), node, (device,))
        p, live = pod(uid=-1, k=1, m=milli), np.flatnonzero(cluster.gpu_free_max >= milli)
        if len(live):  # either memo table filled first
            best = policy.score(cluster, p, live, CycleState()) if uid % 2 else None
            columns = plugin.score(cluster, p, live, CycleState())
            best = policy.score(cluster, p, live, CycleState()) if best is None else best
            assert best.tobytes() == (columns.max(axis=1) if columns.ndim == 2 else columns).tobytes()
