"""Backfilling (``carbon-aware-backfill``, ``ours-displace-backfill``): an inflexible job takes the cheaper cluster
a queue alone ruled out, with the rule's pick as its reroute. Run invariants: ``test_federation`` (every registered
dispatcher) and ``test_federation_planner`` (capacity)."""

from __future__ import annotations

import numpy as np
import pytest

from quasched.federation.dispatch import Decision, Dispatcher, View
from quasched.federation.engine import run_federation
from quasched.federation.metrics import times_passed
from quasched.federation.scenario import Scenario
from quasched.federation.forecast import HISTORY_H
from quasched.federation.registry import make_dispatcher
from test_federation import H, T0, jobs, one_gpu_member, zone


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


def headed_view(*latest: float) -> View:
    """:func:`queued_view`, but A's queue holds jobs 2, 3, ... (front first; 1 GPU in all, 1 h each) whose latest starts
    are ``latest``."""
    base, n = queued_view(0.0), len(latest)
    demand = np.hstack([base.demand, np.repeat([[1000.0 / n], [0.0]], n, axis=1)])
    view = View(capacity=base.capacity, demand=demand, duration=np.full(2 + n, H),
                latest_start=np.array([0.0, 2 * H, *latest]), kw=np.ones((2 + n, 2)), intensity=base.intensity,
                history=base.history, placeable=np.ones((2 + n, 2), dtype=bool))
    for job in range(2, 2 + n):
        view.enqueue(0, job)
    return view


@pytest.mark.parametrize("guard", ["easy", "conservative"])
@pytest.mark.parametrize("rule", ["carbon-aware", "ours-displace"])
@pytest.mark.parametrize("latest, now, easy, conservative", [
    ((H,), 0.0, True, True), ((2 * H,), 0.0, True, True),  # job 0 (1 h) ends by the head's latest start
    ((H - 1.0,), 0.0, False, False), ((0.0,), 0.0, False, False),  # it would not: refused
    ((2 * H, H / 2), 0.0, True, False),  # the head has time, the job behind it not: only EASY passes it
    ((0.0,), 10.0, False, True),  # the head is late for good: EASY blocks, nothing to protect for conservative
    ((0.0, 2 * H), 10.0, False, True), ((0.0, H), 10.0, False, False)])  # ... unless a job behind it has time
def test_guard_backfills_only_runs_ending_by_the_protected_latest_starts(guard, rule, latest, now, easy, conservative):
    """Job 0 (1 GPU, 1 h, inflexible) arrives at ``now``; A (100 g/kWh) has 1 GPU free in aggregate behind its queue,
    B (300) is empty. Unguarded it passes A's queue (B as reroute); guarded only if it ends (``now`` + 1 h) by the
    latest start of the head (EASY) or of every queued job that can still start in time (conservative); else it takes
    the rule's B, no reroute. With an empty queue A is the rule's own pick under every guard."""
    backfills = easy if guard == "easy" else conservative
    ours, unguarded = make_dispatcher(f"{rule}-{guard}"), make_dispatcher(f"{rule}-backfill")
    ours.reset(headed_view(*latest))
    unguarded.reset(headed_view(*latest))
    assert unguarded.dispatch(0, now) == Decision(0, now)
    pick = ours.dispatch(0, now)
    assert pick == Decision(0 if backfills else 1, now)
    assert ours.release(0, now, pick.cluster) == pick and list(ours.reroute(0, now, pick.cluster)) == ([1] if backfills else [])
    empty = headed_view(*latest)
    for job in range(2, 2 + len(latest)):
        empty.dequeue(0, job)
    ours.reset(empty)
    assert ours.dispatch(0, now) == Decision(0, now) and list(ours.reroute(0, now, 0)) == []


class HeadRecorder(Dispatcher):
    """Sends every job to cluster 0 at once and records its queue head and earliest due latest start at each arrival."""

    name = "head-recorder"

    def reset(self, view: View) -> None:
        super().reset(view)
        self.seen: list[tuple[int, float]] = []

    def dispatch(self, job: int, now: float) -> Decision:
        self.seen.append((int(self.view.head[0]), float(self.view.earliest_due(now)[0])))
        return Decision(0, now)


def test_engine_keeps_the_queue_head_in_the_view():
    """One 1-GPU cluster, 1-GPU jobs of 1 h arriving at 0, 0, 10 s, 1 h + 10 s, 3 h + 10 s, only job 1 with slack (2 h):
    job 0 runs, jobs 1 and 2 queue (head 1, due at 2 h), job 1 starts at 1 h (head 2, late: nothing due), job 2 at
    2 h; job 3 queues behind job 2 at 1 h + 10 s and starts at 3 h, so job 4 finds an empty queue."""
    arrival = [0.0, 0.0, 10.0, H + 10, 3 * H + 10]
    sc = Scenario((one_gpu_member("a", zone("A", *[100] * 8)),), jobs([1] * 5, arrival, [H] * 5), np.array(arrival),
                  np.full(5, H), np.array([0, 2 * H, 0, 0, 0]), T0)
    recorder = HeadRecorder()
    run = run_federation(sc, recorder)
    assert run.placed.tolist() == [0.0, H, 2 * H, 3 * H, 4 * H]
    inf = float("inf")
    assert recorder.seen == [(-1, inf), (-1, inf), (1, 2 * H), (2, inf), (-1, inf)] and run.view.head.tolist() == [-1]


def test_times_passed_by_hand():
    """Cluster 0: job 0 waits 0-10 s, job 1 starts at its release at 5 s (passes jobs 0 and 3), job 2 at 10 s (job 0
    was placed at 10 s first: passes job 3 only), job 3 waits from 3 s and never runs; job 4 starts at 5 s on
    cluster 1 and passes nobody on cluster 0; job 5 waits on cluster 1 from 5 s (job 4's time: not passed) to 9 s."""
    cluster = np.array([0, 0, 0, 0, 1, 1])
    released = np.array([0.0, 5.0, 10.0, 3.0, 5.0, 5.0])
    placed = np.array([10.0, 5.0, 10.0, np.nan, 5.0, 9.0])
    assert times_passed(cluster, released, placed).tolist() == [1, 0, 0, 2, 0, 0]
