"""The headroom term (of ``guard``, ``power`` and ``learned``): hand-computed headroom, scores with FGD, device
choice, a run against FGD."""

from __future__ import annotations

import numpy as np
import pytest
from builders import cluster_with_free, nodes, pod

from quasched.metrics.typical import TypicalPods
from quasched.model import Cluster
from quasched.model.random import NumpyStream
from quasched.policies import CycleState, Policy, Scheduler
from quasched.policies.fgd import FGD
from quasched.policies.headroom import HeadroomModel, HeadroomScore
from quasched.sim.arrival import ExperimentConfig, run_experiment
from quasched.traces.synthetic import synthetic_cluster, synthetic_workload

#: the specification's toy typical pods (§7.2) as counts 5 / 3 / 2 → f = 0.5 / 0.3 / 0.2
TOY = TypicalPods(
    shapes=((4000, 500, 1, ""), (8000, 1000, 1, ""), (2000, 0, 0, "")),
    counts=(5, 3, 2),
    freq=np.array([0.5, 0.3, 0.2]),
)


def headroom(model: HeadroomModel, cpu: int, gpu: list[int], mem: int = 0, model_id: int = 0) -> int:
    return int(model.value(np.array([cpu]), np.array([mem]), np.array([gpu]), np.array([model_id]))[0])


def test_headroom_counts_copies_limited_by_devices_cpu_and_memory():
    # t1 = 500 m / 4 cores ×5, t2 = 1000 m / 8 cores ×3, t3 = 2 × 1000 m / 10 cores ×1, CPU-only dropped
    shapes = [(4000, 0, 500, 1, ""), (8000, 0, 1000, 1, ""), (10000, 0, 1000, 2, ""), (2000, 0, 0, 0, "")]
    model = HeadroomModel(shapes, [5, 3, 1, 2], ("T4",))
    # [300, 1000], 6 cores: t1 min(2 slots, 1 by CPU) = 1 → 5·1·500; t2 0 by CPU; t3 no 2 devices
    assert headroom(model, 6000, [300, 1000]) == 2500
    # 20 cores: t1 min(2, 5) = 2 → 5000; t2 min(1, 2) = 1 → 3000
    assert headroom(model, 20000, [300, 1000]) == 8000
    # [1000, 1000], 20 cores: t1 min(4, 5) → 10000; t2 min(2, 2) → 6000; t3 min(1, 2) → 1·2000
    assert headroom(model, 20000, [1000, 1000]) == 18000
    # memory binds: one copy of a 1000 MiB shape in 1500 MiB
    mem_model = HeadroomModel([(1000, 1000, 500, 1, "")], [1], ("T4",))
    assert headroom(mem_model, 64000, [1000, 1000], mem=1500) == 500
    # GPU-model constraint: a V100M32-only shape never fits a T4 node
    spec_model = HeadroomModel([(1000, 0, 500, 1, "V100M32")], [1], ("T4", "V100M32"))
    assert headroom(spec_model, 64000, [1000], model_id=0) == 0
    assert headroom(spec_model, 64000, [1000], model_id=1) == 1000


def test_multi_gpu_slots_need_distinct_devices():
    model = HeadroomModel([(0, 0, 400, 2, "")], [1], ("T4",))
    # devices hold 2, 2, 0 copies of 400 m → two 2-device pods (each on devices 0 and 1)
    assert headroom(model, 64000, [800, 900, 300]) == 2 * 800
    # 2, 0, 0 copies: one device only → no 2-device pod
    assert headroom(model, 64000, [1000, 300, 0]) == 0


def scores(policy, cluster, p):
    policy.attach(cluster, NumpyStream(0))
    return policy.score(cluster, p, np.arange(cluster.n_nodes), CycleState()).tolist()


def headroom_policy(typical=TOY) -> Policy:
    """FGD (linear scale) + 2 × headroom term, with the typical pods fixed (``learned``'s starting weights)."""
    return Policy([(FGD(typical, "linear"), 1.0), (HeadroomScore(typical, learn=False), 2.0)], "best-score-tightest")


def test_sharing_pod_matches_fgd_worked_example_when_headroom_is_unchanged():
    # §7.2 example node: T4, 6 cores, [300, 1000]. FGD Δ = 200 (device 0), 100 (device 1);
    # headroom before/after is 2500 either way (one 500 m copy, CPU-bound) → 50 + Δ/160 + 2·50
    cluster = cluster_with_free([[300, 1000]], cpu=6000)
    policy = headroom_policy()
    p = pod(cpu=2000, k=1, m=200)
    assert scores(policy, cluster, p) == [150 + 200 / 160]
    assert policy.reserve(cluster, p, 0, CycleState()) == (0,)


def test_whole_gpu_pod_pays_for_the_headroom_it_destroys():
    # same node, pod 3 cores / 1 GPU: FGD Δ = 500; headroom 2500 → 0, β·ΔH/N = 2·(−2500)/10 = −500
    # → 50 (1 + β) + (500 − 500)/160 = 150
    cluster = cluster_with_free([[300, 1000]], cpu=6000)
    assert scores(headroom_policy(), cluster, pod(cpu=3000, k=1, m=1000)) == [150]


def test_cpu_only_pod_goes_to_the_cpu_rich_node_where_fgd_ties():
    # node 0: 16 cores, node 1: 40 cores, both [1000, 1000]. A 4-core CPU-only pod changes no FGD
    # category on either node (ΔF = 0, FGD 50 = 50), but on node 0 it costs one 500 m copy
    # (min(4, 4) → 3) and one 1000 m copy (2 → 1): ΔH = −(5·500 + 3·1000) = −5500 → 150 + 2·(−550)/160
    cluster = Cluster(nodes((16000, 1 << 20, 2, "T4"), (40000, 1 << 20, 2, "T4")))
    p = pod(cpu=4000)
    assert scores(FGD(TOY), cluster, p) == [50, 50]
    assert scores(headroom_policy(), cluster, p) == [150 - 1100 / 160, 150]
    decision = Scheduler(cluster, headroom_policy(), np.array([0, 1]), NumpyStream(0)).decide(p)
    assert decision.node == 1


def test_sharing_device_ties_go_to_the_tightest_device():
    # CPU-only typical pods only: H = 0 and ΔF is the same on every device → tie → tightest fit
    typical = TypicalPods(((1000, 0, 0, ""),), (1,), np.array([1.0]))
    cluster = cluster_with_free([[1000, 600, 700]])
    policy = headroom_policy(typical)
    p = pod(cpu=1000, k=1, m=500)
    policy.attach(cluster, NumpyStream(0))
    assert policy.reserve(cluster, p, 0, CycleState()) == (1,)


def test_learned_shapes_cover_pods_and_gpu_demand():
    policy = HeadroomScore(TOY, cover=90.0, first_refresh=1 << 30)
    policy.attach(cluster_with_free([[1000]]), NumpyStream(0))
    for uid in range(18):
        policy._observe(pod(cpu=1000, mem=10, k=1, m=100, uid=uid))
    policy._observe(pod(cpu=1000, mem=10, k=1, m=200, uid=18))
    policy._observe(pod(cpu=9000, mem=99, k=8, m=1000, uid=19))
    shapes, counts = policy.learned_shapes()
    # by pods: 18/20 = 90 % → only the 100 m shape; by GPU demand (1800, 200, 8000 milli) the
    # 8-GPU shape alone is 80 %, with the 100 m shape 98 % → both kept, the 200 m shape dropped
    assert dict(zip(shapes, counts)) == {(1000, 10, 100, 1, ""): 18, (9000, 99, 1000, 8, ""): 1}


@pytest.mark.parametrize("policy", ["guard", "power"])
def test_not_worse_than_fgd_by_much_on_a_small_synthetic_trace(policy):
    """Smoke check of the claim's direction, not of its size (small trace, one seed)."""
    spec, workload = synthetic_cluster(n_nodes=60, seed=5), synthetic_workload(n_pods=900, seed=5)
    kept = run_experiment(spec, workload, ExperimentConfig(policy=policy, seed=1, rng="native"))
    fgd = run_experiment(spec, workload, ExperimentConfig(policy="fgd", seed=1, rng="native"))
    assert kept.events.used_gpu_milli[-1] >= 0.97 * fgd.events.used_gpu_milli[-1]
