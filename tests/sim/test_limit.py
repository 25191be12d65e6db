"""The limit: the HiGHS upper bound on GPU allocation and the offline (FFD) packing."""

from __future__ import annotations

import numpy as np
from builders import nodes
from hypothesis import given, settings, strategies as st

from quasched.metrics.typical import TypicalPods
from quasched.model import Cluster, NodeSpec
from quasched.model.random import NumpyStream
from quasched.model.workload import Workload
from quasched.optimize.bound import gpu_bound
from quasched.optimize.patterns import pattern_packing
from quasched.policies import Scheduler, make_policy
from quasched.sim.arrival import ExperimentConfig
from quasched.sim.offline import arrival_prefix, ffd_order, ffd_packing
from quasched.traces.synthetic import synthetic_cluster, synthetic_workload


def pods(*specs: tuple[int, int, int, int] | tuple[int, int, int, int, str]) -> Workload:
    """Workload from ``(cpu_milli, memory_mib, num_gpu, gpu_milli[, spec])`` tuples."""
    n = len(specs)
    return Workload(
        name=np.array([f"p{i}" for i in range(n)], dtype=object),
        cpu_milli=np.array([s[0] for s in specs], dtype=np.int64),
        memory_mib=np.array([s[1] for s in specs], dtype=np.int64),
        num_gpu=np.array([s[2] for s in specs], dtype=np.int64),
        gpu_milli=np.array([s[3] for s in specs], dtype=np.int64),
        gpu_model=np.array([s[4] if len(s) > 4 else "" for s in specs], dtype=object),
    )


def online(cluster_nodes: NodeSpec, workload: Workload, policy: str) -> int:
    """GPU milli ``policy`` places when the pods arrive in workload order (ranks = node order)."""
    cluster = Cluster(cluster_nodes)
    typical = TypicalPods.from_workload(workload)
    scheduler = Scheduler(cluster, make_policy(policy, typical), np.arange(len(cluster_nodes)), NumpyStream(0))
    for i in range(len(workload)):
        scheduler.schedule(workload.pod(i))
    return cluster.used_gpu_milli


TWO_SINGLE_GPU_NODES = nodes((8000, 8192, 1, "T4"), (8000, 8192, 1, "T4"))
SMALL_FIRST = pods((1000, 100, 1, 300), (1000, 100, 1, 300), (1000, 100, 1, 700), (1000, 100, 1, 700))


def test_bound_is_exact_and_strictly_above_an_online_policy():
    # 300+700 per device is the only way to place all four; BestFit stacks both 300s on n0 and fails a 700
    assert gpu_bound(TWO_SINGLE_GPU_NODES, SMALL_FIRST).lp_milli == 2000
    assert online(TWO_SINGLE_GPU_NODES, SMALL_FIRST, "bestfit") == 1300
    assert ffd_packing(TWO_SINGLE_GPU_NODES, SMALL_FIRST) == 2000  # 700s first, then a 300 beside each


def test_device_cut_allows_one_large_sharing_pod_per_device():
    # GPU milli alone would allow 1000 of 1200; two 600 m pods never share one device
    bound = gpu_bound(nodes((8000, 8192, 1, "T4")), pods((1000, 100, 1, 600), (1000, 100, 1, 600)))
    assert bound.lp_milli == bound.milp_milli == 600


def test_node_cut_allows_one_pod_above_half_the_cpu_per_node():
    # CPU alone would allow 1.5 of the 64-core 4-GPU pods on a 96-core node: only one fits
    bound = gpu_bound(nodes((96000, 1 << 20, 8, "G2")), pods((64000, 100, 4, 1000), (64000, 100, 4, 1000)))
    assert bound.lp_milli == 4000 and bound.pct(bound.lp_milli) == 50.0


def test_gpu_model_cpu_only_pods_and_capacity():
    cluster = nodes((8000, 8192, 2, "T4"))
    assert gpu_bound(cluster, pods((1000, 100, 1, 1000, "V100M32"), (1000, 100, 0, 0))).lp_milli == 0
    full = gpu_bound(cluster, pods(*[(1000, 100, 1, 1000)] * 5))
    assert full.lp_milli == full.capacity_milli == 2000 and full.lp_pct == 100.0


def test_ffd_order_puts_large_gpu_pods_first_and_skips_cpu_only():
    workload = pods((1000, 1, 1, 500), (1000, 1, 0, 0), (2000, 1, 2, 1000), (3000, 1, 2, 1000))
    assert ffd_order(workload).tolist() == [3, 2, 0]
    assert ffd_order(workload, "arrival").tolist() == [0, 2, 3]


def test_arrival_prefix_is_the_tuned_workload(data_dir):
    from quasched.traces import catalog

    cluster, workload = catalog.load_trace("openb-default", data_dir=data_dir)
    prefix = arrival_prefix(cluster, workload, ExperimentConfig(seed=42, rng="go"))
    assert 1.29 < prefix.gpu_request.sum() / (1000 * cluster.total_gpus) <= 1.3
    assert len(prefix) > len(workload)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n_nodes=st.integers(1, 5), n_pods=st.integers(1, 40))
def test_bound_is_above_every_policy_and_the_offline_packing(seed, n_nodes, n_pods):
    cluster = synthetic_cluster(n_nodes, seed=seed)
    workload = synthetic_workload(n_pods, seed=seed)
    bound = gpu_bound(cluster, workload)
    assert bound.milp_milli <= bound.lp_milli + 1e-6 and bound.lp_milli <= bound.capacity_milli + 1e-6
    placed = [online(cluster, workload, p) for p in ("bestfit", "fgd", "guard", "learned")]
    placed.append(ffd_packing(cluster, workload))
    assert max(placed) <= bound.milp_milli + 1e-6


def test_density_order_puts_most_gpu_per_cpu_first():
    workload = pods((8000, 1, 1, 1000), (1000, 1, 1, 500), (2000, 1, 2, 1000), (1000, 1, 0, 0))
    assert ffd_order(workload, "density").tolist() == [2, 1, 0]  # 1.0, 0.5 (larger request first), 0.125


def test_density_order_packs_more_where_cpu_binds():
    # one 16-core 2-GPU node; a 16-core 1-GPU pod (largest first) blocks the two 4-core 1-GPU pods
    cluster = nodes((16000, 8192, 2, "T4"))
    workload = pods((16000, 1, 1, 1000), (4000, 1, 1, 1000), (4000, 1, 1, 1000))
    assert ffd_packing(cluster, workload, key="size") == 1000
    assert ffd_packing(cluster, workload, key="density") == 2000 == gpu_bound(cluster, workload).lp_milli


def test_patterns_pack_what_online_policies_cannot():
    # 300+700 on each device: the configuration LP finds it from nothing and proves it optimal
    solution, cluster = pattern_packing(TWO_SINGLE_GPU_NODES, SMALL_FIRST)
    assert solution.converged and solution.bound == solution.lp == solution.packing_milli == 2000
    assert cluster.used_gpu_milli == 2000 and len(cluster.placements) == 4


def test_pattern_pricing_respects_devices_and_node_cpu():
    two_600 = pattern_packing(nodes((8000, 8192, 1, "T4")), pods((1000, 100, 1, 600), (1000, 100, 1, 600)))[0]
    assert two_600.converged and two_600.bound == two_600.packing_milli == 600
    half_cpu = pattern_packing(nodes((96000, 1 << 20, 8, "G2")), pods((64000, 100, 4, 1000), (64000, 100, 4, 1000)))[0]
    assert half_cpu.converged and half_cpu.bound == half_cpu.packing_milli == 4000


def test_patterns_are_tighter_than_the_aggregated_rows():
    # two 16-core 2-GPU nodes; 1-GPU pods: three of 7 cores, three of 10. A node holds 7+7 cores, or one pod
    # (7+10, 10+10 > 16): integer optimum 3 pods. Configuration LP: 1.5 nodes of {7, 7} + 0.5 of {10} = 3.5.
    # Pooled CPU (7+7+7+10 = 31 ≤ 32 cores) and the cuts (≤ 1 pod > 8 cores, ≤ 2 > 5.3 per node) allow 4.
    cluster = nodes((16000, 8192, 2, "T4"), (16000, 8192, 2, "T4"))
    workload = pods(*[(7000, 1, 1, 1000)] * 3, *[(10000, 1, 1, 1000)] * 3)
    solution = pattern_packing(cluster, workload)[0]
    assert solution.converged and solution.bound == solution.lp == 3500 and solution.packing_milli == 3000
    assert gpu_bound(cluster, workload).lp_milli == 4000


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), n_nodes=st.integers(1, 4), n_pods=st.integers(1, 25))
def test_pattern_packing_is_feasible_and_between_ffd_and_the_bounds(seed, n_nodes, n_pods):
    cluster = synthetic_cluster(n_nodes, seed=seed)
    workload = synthetic_workload(n_pods, seed=seed)
    start = Cluster(cluster)
    ffd = ffd_packing(cluster, workload, cluster=start)
    solution, packed = pattern_packing(cluster, workload, [start])
    assert packed.used_gpu_milli == solution.packing_milli  # every pattern bound on the real model
    assert ffd <= solution.packing_milli <= solution.bound + 1e-6
    assert solution.packing_milli <= gpu_bound(cluster, workload, None).lp_milli + 1e-6
    if solution.converged:
        assert solution.bound <= gpu_bound(cluster, workload, None).lp_milli + 1e-6
