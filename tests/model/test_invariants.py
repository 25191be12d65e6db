"""Property tests: no over-commitment, each pod placed at most once, exact remove, determinism."""

from __future__ import annotations

import numpy as np
from builders import assert_consistent, nodes
from hypothesis import given, settings, strategies as st

from quasched.metrics.typical import TypicalPods, TypicalWindow
from quasched.model import Cluster, NodeSpec, PlacementError, Workload
from quasched.model.random import NumpyStream
from quasched.policies import Scheduler, make_policy, policy_names
from quasched.sim.arrival import ExperimentConfig, run_experiment

MODELS = ("T4", "V100M16", "")

node_st = st.tuples(
    st.sampled_from([4000, 8000, 32000, 96000]),
    st.sampled_from([2048, 16384, 262144]),
    st.sampled_from([0, 1, 2, 4, 8]),
    st.sampled_from(MODELS[:2]),
).map(lambda t: (t[0], t[1], t[2], t[3] if t[2] else ""))

pod_st = st.one_of(
    st.tuples(st.integers(500, 16000), st.integers(0, 8192), st.just(0), st.just(0)),
    st.tuples(st.integers(500, 16000), st.integers(0, 8192), st.just(1), st.integers(1, 999)),
    st.tuples(st.integers(500, 16000), st.integers(0, 8192), st.sampled_from([1, 2, 4, 8]), st.just(1000)),
)


def workload_of(rows, specs) -> Workload:
    return Workload(
        name=np.array([f"p{i:03d}" for i in range(len(rows))], dtype=object),
        cpu_milli=np.array([r[0] for r in rows], dtype=np.int64),
        memory_mib=np.array([r[1] for r in rows], dtype=np.int64),
        num_gpu=np.array([r[2] for r in rows], dtype=np.int64),
        gpu_milli=np.array([r[3] for r in rows], dtype=np.int64),
        gpu_model=np.array([s if r[2] else "" for r, s in zip(rows, specs)], dtype=object),
    )


problems = st.integers(1, 40).flatmap(
    lambda n: st.tuples(
        st.lists(node_st, min_size=1, max_size=6),
        st.lists(pod_st, min_size=n, max_size=n),
        st.lists(st.sampled_from(["", "", "T4", "V100M16|T4", "A10"]), min_size=n, max_size=n),
    )
)


@settings(max_examples=60, deadline=None)
@given(problems, st.sampled_from(policy_names()), st.integers(0, 2**16))
def test_no_overcommit_and_exact_remove(problem, policy_name, seed):
    node_rows, pod_rows, specs = problem
    cluster = Cluster(nodes(*node_rows))
    workload = workload_of(pod_rows, specs)
    policy = make_policy(policy_name, TypicalPods.from_workload(workload))
    rank = np.random.default_rng(seed).permutation(cluster.n_nodes)
    scheduler = Scheduler(cluster, policy, rank, NumpyStream(seed))
    history = []
    for pod in workload.pods():
        before = cluster.snapshot()
        decision = scheduler.schedule(pod)
        if decision.placed:
            history.append((pod, before))
            try:
                cluster.place(pod, decision.node, decision.devices)
                raise AssertionError("a pod was placed twice")
            except PlacementError:
                pass
        else:
            assert all(np.array_equal(a, b) for a, b in zip(before, cluster.snapshot()))
        assert_consistent(cluster)
    for pod, before in reversed(history):
        cluster.remove(pod)
        assert all(np.array_equal(a, b) for a, b in zip(before, cluster.snapshot()))
    assert not cluster.placements


@settings(max_examples=15, deadline=None)
@given(problems, st.sampled_from(policy_names()), st.integers(0, 1000))
def test_arrival_experiment_is_deterministic(problem, policy_name, seed):
    node_rows, pod_rows, specs = problem
    spec: NodeSpec = nodes(*node_rows)
    if spec.total_gpus == 0:
        spec = nodes(*node_rows, (8000, 16384, 1, "T4"))
    workload = workload_of(pod_rows, specs)
    config = ExperimentConfig(policy=policy_name, seed=seed, rng="native", tune_ratio=1.1 if workload.gpu_request.any() else 0)
    a = run_experiment(spec, workload, config)
    b = run_experiment(spec, workload, config)
    assert a.events.pod.tolist() == b.events.pod.tolist()
    assert np.array_equal(a.events.node, b.events.node)
    assert np.array_equal(a.events.frag_milli, b.events.frag_milli)
    assert_consistent(a.cluster)


@settings(max_examples=30, deadline=None)
@given(problems, st.sampled_from(["guard", "power", "fgd"]), st.integers(1, 6), st.integers(1, 8),
       st.sampled_from([0.05, 0.2, 1.0]))
def test_typical_pods_learned_online_stay_close_and_never_overcommit(problem, policy_name, length, every, drift):
    """As in a service, the policy follows typical pods learned from the arrivals: its mix never lags the window's
    by ``drift`` or more, and nothing is over-committed as its terms are rebuilt."""
    node_rows, pod_rows, specs = problem
    cluster = Cluster(nodes(*node_rows))
    learned = TypicalWindow(length, every, drift=drift)
    scheduler = Scheduler(cluster, make_policy(policy_name, learned), np.arange(cluster.n_nodes), NumpyStream(0))
    for pod in workload_of(pod_rows, specs).pods():
        learned.observe(pod)
        assert learned.distance() < drift + 1e-9
        scheduler.schedule(pod)
        assert_consistent(cluster)
