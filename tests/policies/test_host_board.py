"""The score boards' host equals scoring every feasible node and selecting, after any sequence of changes."""

from __future__ import annotations

import numpy as np
from builders import change_node, nodes, pod
from hypothesis import given, settings, strategies as st

from quasched.metrics.typical import TypicalPods, TypicalWindow
from quasched.model import Cluster
from quasched.model.random import NumpyStream
from quasched.policies import CycleState, Policy
from quasched.policies.fgd import FGD
from quasched.policies.filter import feasible_nodes
from quasched.policies.framework import Scheduler

TYPICAL = TypicalPods(((1000, 500, 1, ""), (2000, 1000, 1, "")), (3, 1), np.array([0.75, 0.25]))
DEMANDS = [pod(cpu=2000, k=1, m=500), pod(cpu=4000, mem=4096, k=2, m=1000), pod(cpu=1000),
           pod(cpu=1000, k=1, m=300, spec="A100"), pod(cpu=3000, k=1, m=250, app="a", max_per_node=1)]
OPS = ["place", "remove", "cordon", "uncordon", "fail", "heal", "add", "churn"]


def expected_host(cluster: Cluster, typical: TypicalPods, p, rank: np.ndarray) -> int:
    """The host by brute force: a fresh FGD scores every feasible node, highest score, ties to the smallest rank."""
    feasible = feasible_nodes(cluster, p)
    if not len(feasible):
        return -1
    plugin = FGD(typical)
    plugin.attach(cluster, NumpyStream(0))
    scores = plugin.best(cluster, p, feasible, CycleState())
    best = feasible[scores == scores.max()]
    return int(best[np.argmin(rank[best])])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 3), st.integers(0, 3), st.integers(0, 4)),
                min_size=1, max_size=40), st.permutations(range(6)), st.booleans())
def test_board_host_equals_scoring_every_feasible_node(steps, rank, window):
    """Incremental boards (and their rebuilds: churn past the staleness bound, new typical pods from
    a window, nodes joining) pick exactly the node that scoring all feasible nodes picks."""
    cluster = Cluster(nodes(*[(16000, 1 << 14, 4, "T4")] * 3, *[(8000, 1 << 13, 2, "A100")] * 2, (4000, 1 << 12, 0, "")))
    typical = TypicalWindow(window=4, every=3, initial=TYPICAL) if window else TYPICAL
    scheduler = Scheduler(cluster, Policy([(FGD(typical), 1.0)], "best-score"), np.array(rank), NumpyStream(0))
    placed: list[int] = []
    for uid, (op, node, device, which) in enumerate(steps, start=100):
        present = np.flatnonzero(cluster.present)
        target = int(present[node % len(present)])
        demand = DEMANDS[which]
        if op == "place":
            p = pod(uid=uid, cpu=demand.cpu_milli, mem=demand.memory_mib, k=demand.num_gpu, m=demand.gpu_milli,
                    spec=demand.gpu_model, app=demand.app, max_per_node=demand.max_per_node)
            if isinstance(typical, TypicalWindow):
                typical.observe(p)
            if scheduler.schedule(p).placed:
                placed.append(uid)
        elif op == "churn":  # more changes than a board may be stale by
            first, second = ("uncordon", "cordon") if cluster.cordoned[target] else ("cordon", "uncordon")
            for _ in range(40):
                getattr(cluster, first)(target)
                getattr(cluster, second)(target)
        else:
            change_node(cluster, op, target, device, uid, placed)
        current = typical.current if isinstance(typical, TypicalWindow) else typical
        for d in DEMANDS[which:] + DEMANDS[:which]:
            decision = scheduler.decide(d)
            assert decision.node == expected_host(cluster, current, d, scheduler._ranks())
            assert decision.n_feasible == len(feasible_nodes(cluster, d))


def test_ties_go_to_the_smallest_rank_and_a_full_node_leaves_the_board():
    """Three identical empty nodes tie; the board follows the rank, then drops the node that filled up."""
    cluster = Cluster(nodes(*[(4000, 1 << 14, 1, "T4")] * 3))
    scheduler = Scheduler(cluster, Policy([(FGD(TYPICAL), 1.0)], "best-score"), np.array([2, 0, 1]), NumpyStream(0))
    whole = pod(cpu=1000, k=1, m=1000)
    assert scheduler.decide(whole).node == 1  # rank 0
    scheduler.schedule(pod(uid=1, cpu=1000, k=1, m=1000))
    assert scheduler.decide(whole).node == 2  # node 1 is full: rank 1 next
