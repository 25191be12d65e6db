"""Node-level EASY with a late-head throttle (``ours-displace-throttle``): the pass test by hand, the gated queue retry
on a hand timeline, and the throttle as a hypothesis property over replays. Run invariants: ``test_federation`` (every
registered dispatcher) and ``test_federation_planner`` (capacity)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quasched.federation.dispatch import View
from quasched.federation.engine import FederationRun, run_federation
from quasched.federation.forecast import HISTORY_H
from quasched.federation.registry import make_dispatcher
from quasched.federation.scenario import Member, Scenario
from quasched.federation.throttle import ThrottleDisplacement
from builders import nodes, pod
from test_federation import T0, H, jobs, zone
from test_federation_shadow import HEAD, hand_cluster

JOB = 1


def guard_on_hand_cluster(head_latest: float, job_until: float, now: float, job=None) -> ThrottleDisplacement:
    """``ours-displace-throttle`` over the one cluster of :func:`~test_federation_shadow.hand_cluster` (no twin: the
    head, 3 GPUs and 60 cores, has shadow time 10 on n0), the head queued with latest start ``head_latest``; job
    ``JOB`` (default 1 A100) would run from ``now`` to ``job_until``."""
    cluster, end = hand_cluster(twin=False)
    pods = {HEAD: pod(cpu=60_000, k=3, m=1000, uid=HEAD), JOB: job or pod(k=1, m=1000, uid=JOB)}
    n = HEAD + 1
    duration, latest = np.zeros(n), np.zeros(n)
    duration[JOB], latest[HEAD] = job_until - now, head_latest
    view = View(capacity=np.array([[8000.0], [128_000.0]]), demand=np.zeros((2, n)), duration=duration,
                latest_start=latest, kw=np.ones((n, 1)), intensity=np.full((1, 4), 100.0),
                history=np.full((1, HISTORY_H), 100.0), placeable=np.ones((n, 1), dtype=bool))
    view.nodes, view.end, view.pod = [cluster], end, pods.__getitem__
    view.enqueue(0, HEAD)
    guard = ThrottleDisplacement()
    guard.reset(view)
    return guard


@pytest.mark.parametrize("head_latest, job, until, allowed", [
    (5.0, pod(k=1, m=1000, uid=JOB), 4.0, True),  # head on time: ends by the shadow time 10
    (3.0, pod(k=1, m=1000, uid=JOB), 50.0, True),  # ... runs past 10 but leaves 3 GPUs of n0 for the head
    (3.0, pod(k=2, m=1000, uid=JOB), 50.0, False),  # ... would leave 2: refused (node-level EASY)
    (3.0, pod(cpu=8_000, uid=JOB), 50.0, False),  # ... 64 - 8 < 60 cores at 10: refused
    (2.0, pod(k=1, m=1000, uid=JOB), 50.0, True),  # latest start = now: still on time
    (1.9, pod(k=1, m=1000, uid=JOB), 4.0, False),  # head late: refused, although it ends by the shadow time
    (1.9, pod(k=1, m=1000, spec="V100", uid=JOB), 4.0, False)])  # ... even off the shadow node
def test_node_level_easy_while_the_head_is_on_time_nothing_once_it_is_late(head_latest, job, until, allowed):
    guard = guard_on_hand_cluster(head_latest, until, 2.0, job)
    among = np.ones(1, dtype=bool)
    assert guard.passable(JOB, 2.0, among).tolist() == [allowed]
    assert guard.queue_gate(0, 2.0)(job) == allowed
    assert guard.queue_gate(0, 2.0)(guard.view.pod(HEAD))  # the head itself always goes
    guard.view.dequeue(0, HEAD)
    assert guard.passable(JOB, 2.0, among).tolist() == [True]  # no queue: nothing to pass


def two_gpu_scenario(head_slack: float) -> Scenario:
    """One cluster, one node of 2 A100s, flat 100 g/kWh. Jobs (GPUs, arrival s, duration s), inflexible but job 2:
    0 = (1, 0, 10), 1 = (1, 0, 100), 2 = (2, 1, 5) with ``head_slack``, 3 = (1, 2, 3)."""
    member = Member("a", nodes((64_000, 1 << 20, 2, "A100")), zone("A", *[100.0] * 4))
    w = jobs([1, 1, 2, 1], [0, 0, 1, 2], [10, 100, 5, 3])
    return Scenario((member,), w, np.array([0.0, 0, 1, 2]), np.array([10.0, 100, 5, 3]),
                    np.array([0.0, 0, head_slack, 0]), T0)


@pytest.mark.parametrize("name, head_slack, placed", [
    ("ours-displace-backfill", 0.0, [0, 0, 100, 10]),  # ungated retry: job 3 takes the GPU job 0 frees at 10
    ("ours-displace-shadow", 0.0, [0, 0, 100, 10]),  # node-level EASY guards passes, not the retry
    ("ours-displace-throttle", 0.0, [0, 0, 100, 105]),  # head (job 2) late since 1: job 3 waits behind it
    ("ours-displace-throttle", 20.0, [0, 0, 100, 10])])  # head on time at 10: job 3 ends at 13, by its shadow time 100
def test_queue_retry_follows_a_late_head_by_hand(name, head_slack, placed):
    """Job 2 (2 GPUs; with 20 s of slack no slot boundary is within reach, so it is released at once) waits for both of
    n0's GPUs (shadow time 100, when job 1 leaves); job 3 queues behind it at 2; job 0 frees one GPU at 10."""
    run = run_federation(two_gpu_scenario(head_slack), make_dispatcher(name))
    assert run.released.tolist() == [0, 0, 1, 2] and run.placed.tolist() == placed


def ahead_waiting(run: FederationRun, job: int, t: float) -> list[int]:
    """Jobs queued on ``job``'s cluster before it and still waiting at ``t``, in queue order. Queue order is the engine's event order:
    by release time; at equal times the deferred jobs' releases first (a release event sorts before an arrival), then
    the arrivals', each by job index."""
    c, v = run.cluster, run.view
    queued = (run.placed > run.released) | (np.isnan(run.placed) & v.placeable[np.arange(len(c)), c])
    order = np.lexsort((np.arange(len(c)), run.released == run.scenario.arrival, run.released))
    rank = np.empty(len(c), dtype=np.int64)
    rank[order] = np.arange(len(c))
    waiting = np.flatnonzero(queued & (c == c[job]) & (run.released < t) & ~(run.placed <= t) & (rank < rank[job]))
    return waiting[np.argsort(rank[waiting])].tolist()  # in queue order: the first is the head


@st.composite
def queueing_scenarios(draw) -> Scenario:
    """1-2 clusters of 1-2 nodes of 2 A100s; up to 16 jobs of 1-2 GPUs within 2 h, slack 0, 30 min or 3 h."""
    n = draw(st.integers(2, 16))
    members = tuple(Member(f"m{c}", nodes(*[(64_000, 1 << 20, 2, "A100")] * draw(st.integers(1, 2))),
                           zone(f"Z{c}", *draw(st.lists(st.sampled_from([50.0, 200.0, 400.0]), min_size=8, max_size=8))))
                    for c in range(draw(st.integers(1, 2))))
    gpus = draw(st.lists(st.integers(1, 2), min_size=n, max_size=n))
    arrival = draw(st.lists(st.integers(0, 2 * 3600), min_size=n, max_size=n))
    duration = draw(st.lists(st.integers(60, 3 * 3600), min_size=n, max_size=n))
    slack = draw(st.lists(st.sampled_from([0.0, 1800.0, 3 * H]), min_size=n, max_size=n))
    return Scenario(members, jobs(gpus, arrival, duration), np.array(arrival, float), np.array(duration, float),
                    np.array(slack), T0)


@settings(max_examples=80, deadline=None)
@given(queueing_scenarios())
def test_no_queued_job_starts_ahead_of_a_late_head(sc):
    """Whenever a job that waited in a queue starts, the first job still waiting ahead of it on its cluster (the head
    it passes) can still meet its deadline: a late head is followed in order."""
    run = run_federation(sc, make_dispatcher("ours-displace-throttle"))
    for j in np.flatnonzero(run.placed > run.released).tolist():
        t = float(run.placed[j])
        ahead = ahead_waiting(run, j, t)
        assert not ahead or run.view.latest_start[ahead[0]] >= t, (j, t, ahead)
