"""``ours-protect-redecide``: a released job that no node of its cluster holds is decided again while it has slack
(module docstring of :mod:`quasched.federation.redecide`). Run invariants: ``test_federation`` (every registered
dispatcher) and ``test_federation_planner`` (capacity)."""

from __future__ import annotations

import numpy as np
import pytest

from quasched.federation.dispatch import SLOT_S, Decision, View
from quasched.federation.forecast import HISTORY_H
from quasched.federation.redecide import ReleaseRedecided
from quasched.model import Cluster
from builders import nodes, pod

JOB = 0


def split_view(clean_w: float, dirty_w: float, latest: float, free_node: bool) -> View:
    """Cluster 0 (``clean_w`` g/kWh) of two 2-GPU nodes, one GPU taken on each unless ``free_node`` (then n1 is empty):
    2 GPUs free in sum, on one node only if ``free_node``; cluster 1 (``dirty_w``) of one empty 2-GPU node. Job 0:
    2 GPUs, 1 h, latest start ``latest``."""
    clean, dirty = Cluster(nodes(*[(64_000, 1 << 20, 2, "A100")] * 2)), Cluster(nodes((64_000, 1 << 20, 2, "A100")))
    for uid, node in [(10, 0), (11, 1)][:2 - free_node]:
        clean.place(pod(k=1, m=1000, uid=uid), node, (0,))
    intensity = np.array([[clean_w] * 4, [dirty_w] * 4])
    view = View(capacity=np.array([[4000.0, 2000.0], [128_000.0, 64_000.0]]), demand=np.array([[2000.0], [1000.0]]),
                duration=np.array([3600.0]), latest_start=np.array([latest]), kw=np.ones((1, 2)), intensity=intensity,
                history=np.repeat(intensity[:, :1], HISTORY_H, axis=1), placeable=np.ones((1, 2), dtype=bool))
    view.nodes, view.pod = [clean, dirty], {JOB: pod(k=2, m=1000, uid=JOB)}.__getitem__
    view.used[0] = [(2 - free_node) * 1000.0, 0.0]
    return view


def released(clean_w: float, dirty_w: float, latest: float, free_node: bool) -> tuple[ReleaseRedecided, tuple]:
    """Job 0 of :func:`split_view` was booked on cluster 0 at 0 and is released there at 0: the decision of
    :meth:`release`."""
    d = ReleaseRedecided(price=0, delay=0, perfect=True)
    d.reset(split_view(clean_w, dirty_w, latest, free_node))
    d.book(JOB, Decision(0, 0.0))
    return d, tuple(d.release(JOB, 0.0, 0))


@pytest.mark.parametrize("clean_w, dirty_w, latest, free_node, decision", [
    (100.0, 300.0, 2 * 3600.0, True, (0, 0.0)),  # a node holds it: released where it was booked
    (100.0, 300.0, 2 * 3600.0, False, (0, SLOT_S)),  # no node holds it: wait a slot for clean room, not the queue
    (300.0, 100.0, 2 * 3600.0, False, (1, 0.0)),  # ... or start now where a node holds it, if that is cheaper
    (100.0, 300.0, 0.0, False, (0, 0.0)),  # slack spent: released as before (it will queue)
])
def test_a_job_no_node_holds_is_decided_again_while_it_has_slack(clean_w, dirty_w, latest, free_node, decision):
    d, got = released(clean_w, dirty_w, latest, free_node)
    assert got == decision
    booked = d.ledger[0].sum(axis=1) * SLOT_S / 3600  # GPU milli-hours booked per cluster
    assert booked.tolist() == ([2000.0, 0.0] if decision[0] == 0 else [0.0, 2000.0])  # the stale booking left


def test_the_kept_fit_follows_placements_and_removals():
    """The fit per cluster and pod shape is kept between releases: after a 1-GPU pod takes a GPU of the free node no node
    holds the 2-GPU job (it is decided again: a slot later); after that pod leaves, one does (released where booked)."""
    d, got = released(100.0, 300.0, 2 * 3600.0, True)
    assert got == (0, 0.0)
    clean = d.view.nodes[0]
    clean.place(pod(k=1, m=1000, uid=12), 1, (0,))
    assert tuple(d.release(JOB, 0.0, 0)) == (0, SLOT_S)
    clean.remove(12)
    assert tuple(d.release(JOB, SLOT_S, 0)) == (0, SLOT_S)


def test_the_kept_demand_key_follows_the_pod_asked():
    """The node check keeps the last pod's demand key: a 2-GPU pod (no node of cluster 0 holds it), then a 1-GPU pod
    (each node does), then the 2-GPU pod again; each answer is the pod's own."""
    d, _ = released(100.0, 300.0, 2 * 3600.0, False)
    two, one = pod(k=2, m=1000, uid=20), pod(k=1, m=1000, uid=21)
    assert [d.holds(0, p) for p in (two, one, two, one)] == [False, True, False, True]
