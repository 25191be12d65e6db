"""Backfilling (``carbon-aware-backfill``, ``ours-displace-backfill``): an inflexible job takes the cheaper cluster
a queue alone ruled out, with the rule's pick as its reroute. Run invariants: ``test_federation`` (every registered
dispatcher) and ``test_federation_planner`` (capacity)."""

from __future__ import annotations

import numpy as np
import pytest

from quasched.federation.dispatch import Decision, View
from quasched.federation.forecast import HISTORY_H
from quasched.federation.registry import make_dispatcher
from test_federation import H


def queued_view(waiting_gpu: float) -> View:
    """Clusters A (100 g/kWh) and B (300) of 2 GPUs, both empty but for a job of ``waiting_gpu`` milli-GPU in A's
    queue; job 0 (1 GPU, 1 h, inflexible) and job 1 (the same with 2 h of slack) arrive at 0."""
    intensity = np.array([[100.0] * 4, [300.0] * 4])
    view = View(capacity=np.array([[2000.0, 2000.0], [8000.0, 8000.0]]), demand=np.array([[1000.0, 1000.0], [0.0, 0.0]]),
                duration=np.array([H, H]), latest_start=np.array([0.0, 2 * H]), kw=np.ones((2, 2)),
                intensity=intensity, history=np.repeat(intensity[:, :1], HISTORY_H, axis=1),
                placeable=np.ones((2, 2), dtype=bool))
    view.queued[0], view.waiting[0, 0] = 1, waiting_gpu
    return view


@pytest.mark.parametrize("name", ["carbon-aware-backfill", "ours-displace-backfill"])
def test_inflexible_job_backfills_the_clean_cluster_past_its_queue(name):
    """A's queue holds 1 GPU of its 2: job 0 (1 GPU) still fits A's free capacity, so it goes to A (cost 100 vs 300
    g/kWh) with B, the rule's pick, as its reroute; the rule alone sends it to B."""
    rule, ours = make_dispatcher("carbon-aware"), make_dispatcher(name)
    rule.reset(queued_view(1000.0))
    ours.reset(queued_view(1000.0))
    assert rule.dispatch(0, 0.0) == Decision(1, 0.0)
    assert ours.dispatch(0, 0.0) == Decision(0, 0.0)
    assert ours.release(0, 0.0, 0) == Decision(0, 0.0) and list(ours.reroute(0, 0.0, 0)) == [1]
    assert ours.ledger[0, 0, :4] == pytest.approx([1000.0] * 4) and not ours.ledger[:, 1].any()


@pytest.mark.parametrize("name", ["carbon-aware-backfill", "ours-displace-backfill"])
def test_no_backfill_without_room_nor_for_a_flexible_job(name):
    """A's queue holds 1.5 GPU: job 0 no longer fits A's free capacity and takes the rule's B, no reroute. Job 1
    (flexible) keeps the rule's choice either way: A from the next slot (a queue rules out only a start now)."""
    ours = make_dispatcher(name)
    ours.reset(queued_view(1500.0))
    assert ours.dispatch(0, 0.0) == Decision(1, 0.0)
    assert ours.release(0, 0.0, 1) == Decision(1, 0.0) and list(ours.reroute(0, 0.0, 1)) == []
    for waiting in (1000.0, 1500.0):
        rule, ours = make_dispatcher("carbon-aware"), make_dispatcher(name)
        rule.reset(queued_view(waiting))
        ours.reset(queued_view(waiting))
        assert ours.dispatch(1, 0.0) == rule.dispatch(1, 0.0) == Decision(0, 900.0)
