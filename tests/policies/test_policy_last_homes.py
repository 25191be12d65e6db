"""Last homes (Littlewood's rule): hand-computed odds against scipy.stats' Poisson tail."""

from __future__ import annotations

import numpy as np
import pytest
from builders import nodes, pod
from hypothesis import event, given, settings, strategies as st
from scipy.stats import poisson
from test_cluster_dynamic import NODE_ROWS, OPS, PROBES, make_pod, presized, workload_of
from test_policy_headroom import scores
from test_policy_home_headroom import MIX, TWO

from quasched.metrics.typical import TypicalPods
from quasched.model import Cluster
from quasched.model.odds import at_least
from quasched.model.random import NumpyStream
from quasched.policies import CycleState, Policy, Scheduler
from quasched.policies.last_homes import LastHomesScore


def tail(r: int, lam: float) -> float:
    """P(Poisson(lam) ≥ r), computed apart from the plugin."""
    return float(poisson.sf(r - 1, lam))


def test_breaking_the_only_home_of_a_shape_costs_its_odds_of_being_needed():
    # MIX: 4 × (12 cores, 1 GPU), 1 × (120 cores, 8 GPUs): Σ count·g·k = 12000; free F = 16000 milli
    # → λ = 16000·4/12000 = 16/3 and 16000/12000 = 4/3. Copies R: 12-core 8 + 8 = 16; 120-core 0 + 1 = 1.
    # A 40-core 1-GPU pod on the 96-core node leaves 7 GPUs, 56 cores: 12-core copies 8 → 4 (4 lost);
    # on the 128-core node 7 GPUs, 88 cores: 8 → 7 (1 lost) and the 120-core copy is gone.
    p = pod(cpu=40000, k=1, m=1000)
    lam1, lam2 = 16 / 3, 4 / 3
    e96 = 1000 * sum(tail(16 - j, lam1) for j in range(4))
    e128 = 1000 * tail(16, lam1) + 8000 * tail(1, lam2)
    got = scores(Policy([(LastHomesScore(MIX), 1.0)]), Cluster(TWO), p)
    assert np.allclose(got, [50 - e96 / 160, 50 - e128 / 160])
    assert got[0] > 49.9 > 20 > got[1]  # the 120-core pod's one home is kept for it


def test_the_term_sleeps_while_every_shape_has_far_more_homes_than_demand():
    # 200 128-core nodes: λ = 1.6e6 · 1/12000 ≈ 133 120-core pods against 200 homes, P(D ≥ 200) ≈ 1e-7
    big = nodes(*[(128000, 1 << 20, 8, "G3")] * 200)
    assert scores(Policy([(LastHomesScore(MIX), 1.0)]), Cluster(big), pod(cpu=40000, k=1, m=1000)) == [50.0] * 200


def test_the_cost_follows_the_homes_already_taken():
    # a 20-core 1-GPU pod already broke the 128-core node's 120-core copy: 108 cores, 7 GPUs left there,
    # F = 15000, λ = 15000·4/12000 = 5, 12-core copies R = 8 + min(7, 9) = 15. The 40-core pod now loses
    # 8 → 4 copies on the 96-core node and 7 → min(6, 68 // 12) = 5 on the 128-core one; no 120-core copy is left.
    cluster = Cluster(TWO)
    cluster.place(pod(cpu=20000, k=1, m=1000, uid=9), 1, (0,))
    got = scores(Policy([(LastHomesScore(MIX), 1.0)]), cluster, pod(cpu=40000, k=1, m=1000))
    assert np.allclose(got, [50 - 1000 * sum(tail(15 - j, 5) for j in range(4)) / 160,
                             50 - 1000 * sum(tail(15 - j, 5) for j in range(2)) / 160])


def test_a_cordoned_node_holds_no_homes_and_adds_no_free_gpus():
    # the 96-core node cordoned: F = 8000 → λ = 8000·4/12000 = 8/3 and 2/3; R: 12-core 8, 120-core 1, all on
    # the 128-core node. The pod there loses one 12-core copy (R = 8) and the 120-core one (R = 1).
    cluster = Cluster(TWO)
    cluster.cordon(0)
    got = scores(Policy([(LastHomesScore(MIX), 1.0)]), cluster, pod(cpu=40000, k=1, m=1000))
    assert np.allclose(got, [50.0, 50 - (1000 * tail(8, 8 / 3) + 8000 * tail(1, 2 / 3)) / 160])


def test_a_failed_device_leaves_the_free_gpus_and_the_homes():
    # device 0 of the 128-core node failed: F = 15000 → λ = 5 and 5/4; 12-core copies R = 8 + 7 = 15, the
    # 120-core shape has no home left (R = 0) but could have one (most = 1): its term is awake and loses nothing.
    # 40-core 1-GPU pod: 8 → 4 copies on the 96-core node (R = 15 .. 12), 7 → 6 on the 128-core one (R = 15).
    cluster = Cluster(TWO)
    cluster.set_device_health(1, 0, False)
    got = scores(Policy([(LastHomesScore(MIX), 1.0)]), cluster, pod(cpu=40000, k=1, m=1000))
    assert np.allclose(got, [50 - 1000 * sum(tail(15 - j, 5) for j in range(4)) / 160, 50 - 1000 * tail(15, 5) / 160])


def test_without_gpu_shapes_the_term_is_50_everywhere():
    # typical pods all CPU-only: no shape has homes to protect (a memo of width 0 used to raise IndexError)
    cpu_only = TypicalPods(shapes=((12000, 0, 0, ""),), counts=(3,), freq=np.array([1.0]))
    for p in (pod(cpu=40000, k=1, m=1000), pod(cpu=40000, k=0, m=0)):
        assert scores(Policy([(LastHomesScore(cpu_only), 1.0)]), Cluster(TWO), p) == [50.0, 50.0]


@settings(max_examples=60, deadline=None)
@given(st.integers(-3, 40), st.floats(0, 30))
def test_at_least_is_the_poisson_tail(r, lam):  # also ours-protect's odds (quasched.federation.protection)
    assert at_least(np.array([r]), np.array([lam]))[0] == pytest.approx(1.0 if r <= 0 else tail(r, lam), abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(NODE_ROWS, min_size=1, max_size=4), OPS, st.integers(0, 2**16))
def test_homes_counted_incrementally_equal_a_fresh_count_and_any_candidate_subset_while_the_cluster_changes(rows, ops, seed):
    cluster, typical = presized(rows), TypicalPods.from_workload(workload_of(PROBES))
    term = LastHomesScore(typical)
    scheduler = Scheduler(cluster, Policy([(term, 1.0)]), np.arange(cluster.n_nodes), NumpyStream(seed))
    for uid, (kind, pick, pod_row, node_row) in enumerate(ops):
        present = np.flatnonzero(cluster.present)
        if kind in ("arrive", "retry"):
            scheduler.schedule(make_pod(pod_row, uid))
        elif kind == "remove" and cluster.placements:
            cluster.remove(sorted(cluster.placements)[pick % len(cluster.placements)])
        elif kind == "add_node" and not cluster.present.all():
            cpu, mem, gpus, model = node_row
            cluster.add_node(f"added-{uid}", {"cpu": cpu, "memory": mem}, num_gpus=gpus, gpu_model=model)
        elif kind in ("recover", "fail") and cluster.num_gpus[present].sum():
            node = int(present[pick % len(present)])
            if cluster.num_gpus[node]:
                cluster.set_device_health(node, pick % cluster.num_gpus[node], kind == "recover")
        elif kind == "cordon" and len(present) > 1:  # an idle node leaves; a busy one is cordoned
            node = int(present[pick % len(present)])
            busy = any(p.node == node for p in cluster.placements.values())
            cluster.cordon(node) if busy else cluster.remove_node(node)
        probe = PROBES[pick % len(PROBES)]
        fresh = LastHomesScore(typical)
        fresh.attach(cluster, NumpyStream(0))
        got = term.score(cluster, probe, present, CycleState()).tolist()
        event("term awake" if min(got) < 50 else "term asleep")
        assert got == fresh.score(cluster, probe, present, CycleState()).tolist()
        start = pick % len(present)  # any subset of the candidates, in any order, gets each node's bits unchanged
        assert term.score(cluster, probe, present[start:][::-1], CycleState()).tolist() == got[start:][::-1]
