"""The collaborators of the service's loop, each alone on a bare :class:`LoopState` (no controller, no cycle):
timers, the change log, the lifecycle, the room-maker, node changes, runs and views."""

from __future__ import annotations

import pytest

from quasched.policies.registry import parse_spec
from quasched.service.domain import (PRIORITY_CLASSES, Event, Job, JobSpec, JobState, NodeRecord, PendingReason,
                                     QueueSpec, Reason)
from quasched.service.loop.changes import Changes
from quasched.service.loop.controller import nodes_of
from quasched.service.loop.lifecycle import Lifecycle
from quasched.service.loop.nodes import NodeChanges
from quasched.service.loop.room import RoomMaker
from quasched.service.loop.runs import Runs
from quasched.service.loop.state import JobTable, LoopOptions, LoopState
from quasched.service.loop.timers import Timer, TimerKind, Timers
from quasched.service.loop.views import Views

A = "A100"


def state(*gpus: int, **options) -> LoopState:
    """A loop state on nodes n0, n1, ... with ``gpus[i]`` A100s each and one queue ``a``."""
    records = [NodeRecord(f"n{i}", 64_000, 256_000, g, A) for i, g in enumerate(gpus)]
    return LoopState(nodes_of(records), [QueueSpec("a")], LoopOptions(policy=parse_spec("bestfit"), grace_s=30, **options))


def spec(gpus: int = 1, priority_class: str = "low", **kw) -> JobSpec:
    return JobSpec(name="j", team="a", cpu_milli=1000, memory_mib=1024, num_gpu=gpus, gpu_milli=1000,
                   priority_class=priority_class, **kw)


def pending(st: LoopState, job_id: int, job_spec: JobSpec) -> Job:
    job = st.jobs[job_id] = Job(job_id, job_spec, PRIORITY_CLASSES[job_spec.priority_class], 0.0, job_id)
    return job


def running(st: LoopState, job_id: int, job_spec: JobSpec, node: int, devices: tuple[int, ...],
            started: float) -> Job:
    """Job ``job_id`` running on node slot ``node`` since ``started``, bound and charged by hand."""
    job = pending(st, job_id, job_spec)
    job.state, job.started_at, job.placement = JobState.RUNNING, started, [(f"n{node}", devices)]
    st.cluster.place(st.pod(job_spec, job_id, 0), node, devices)
    st.quota.charge("a", A, job_spec.gpu_request)
    return job


def parts(st: LoopState) -> tuple[RoomMaker, Lifecycle]:
    room = RoomMaker(st)
    return room, Lifecycle(st, room)


# ---------------------------------------------------------------- timers
def test_timers_come_due_by_time_then_job_then_kind():
    timers = Timers()
    timers.arm(20.0, 1, TimerKind.LIMIT)
    timers.arm(10.0, 2, TimerKind.STOP)
    timers.arm(10.0, 2, TimerKind.FINISH)
    timers.arm(10.0, 1, TimerKind.PREEMPT)
    assert timers.next_at == 10.0 and len(timers) == 4
    assert list(timers.due(15.0)) == [Timer(10.0, 1, TimerKind.PREEMPT), Timer(10.0, 2, TimerKind.FINISH),
                                      Timer(10.0, 2, TimerKind.STOP)]
    assert timers.next_at == 20.0 and list(timers.due(19.9)) == []
    assert [t.kind for t in timers.due(20.0)] == [TimerKind.LIMIT] and timers.next_at is None


def test_a_timer_armed_while_firing_fires_in_the_same_pass_if_due():
    timers = Timers()
    timers.arm(5.0, 1, TimerKind.LIMIT)
    fired = []
    for timer in timers.due(5.0):
        fired.append(timer)
        if timer.kind == TimerKind.LIMIT:
            timers.arm(5.0, 1, TimerKind.STOP)  # a stop with no grace period
            timers.arm(6.0, 1, TimerKind.FINISH)
    assert [t.kind for t in fired] == [TimerKind.LIMIT, TimerKind.STOP] and timers.next_at == 6.0


# ---------------------------------------------------------------- changes
def test_changes_hand_out_each_job_once_and_every_event_once():
    changes, one, two = Changes(), Job(1, spec(), 0, 0.0, 1), Job(2, spec(), 0, 0.0, 2)
    changes.emit(1.0, "submitted", one)
    changes.note(Event(1.5, "node-added", node="n9"))
    changes.touch(two)
    changes.emit(2.0, "started", one, node="n0", devices=[[0]])
    jobs, events = changes.drain()
    assert jobs == [one, two]
    assert [(e.time, e.kind, e.job_id, e.node, e.data) for e in events] == [
        (1.0, "submitted", 1, "", {}), (1.5, "node-added", None, "n9", {}),
        (2.0, "started", 1, "n0", {"devices": [[0]]})]
    assert changes.drain() == ([], [])


# ---------------------------------------------------------------- lifecycle
def test_end_frees_the_devices_and_quota_and_the_victim_claim():
    st = state(2)
    room, life = parts(st)
    job = running(st, 1, spec(2), 0, (0, 1), started=0.0)
    st.dirty = False
    life.end(1, 3600.0, JobState.SUCCEEDED)
    assert job.state == JobState.SUCCEEDED and job.placement == [] and job.gpu_hours == pytest.approx(2.0)
    assert st.cluster.gpu_alloc[0].sum() == 0 and st.quota.usage.get(("a", A), 0) == 0 and st.dirty
    assert [e.kind for e in st.changes.drain()[1]] == ["succeeded"]
    with pytest.raises(ValueError, match="already succeeded"):
        life.end(1, 3601.0, JobState.FAILED)


def test_requeue_of_a_stopping_job_ends_it_as_its_stop_says():
    st = state(2)
    _, life = parts(st)
    limit = running(st, 1, spec(), 0, (0,), started=0.0)
    cancel = running(st, 2, spec(), 0, (1,), started=0.0)
    for job, code in ((limit, Reason.TIME_LIMIT), (cancel, Reason.CANCELLING)):
        job.state, job.reason = JobState.STOPPING, PendingReason(code, "stopping")
    life.requeue(limit, 5.0, "evicted")
    life.requeue(cancel, 5.0, "evicted")
    assert limit.state == JobState.FAILED and limit.reason.code == Reason.TIME_LIMIT
    assert cancel.state == JobState.CANCELLED and cancel.reason is None and cancel.restarts == 0


def test_requeue_puts_a_running_job_back_fresh():
    st = state(1)
    _, life = parts(st)
    job = running(st, 1, spec(), 0, (0,), started=0.0)
    life.requeue(job, 5.0, "evicted", node="n0")
    assert job.state == JobState.PENDING and job.restarts == 1 and job.started_at is None and 1 in st.fresh
    assert job.reason.code == Reason.QUEUED and job.reason.message == "requeued (evicted)"
    assert [(e.kind, e.node, e.data) for e in st.changes.drain()[1]] == [("evicted", "n0", {})]


def test_arm_sets_the_timers_of_a_job_entering_running():
    st = state(1)
    _, life = parts(st)
    job = running(st, 1, spec(duration_s=100.0, time_limit_s=50.0), 0, (0,), started=10.0)
    job.state, job.preempt_at = JobState.PREEMPTING, 40.0
    life.arm(job)
    assert list(st.timers.due(1e9)) == [Timer(40.0, 1, TimerKind.PREEMPT), Timer(60.0, 1, TimerKind.LIMIT),
                                        Timer(110.0, 1, TimerKind.FINISH)]


def test_a_stale_finish_or_grace_timer_does_nothing():
    st = state(1)
    _, life = parts(st)
    job = running(st, 1, spec(duration_s=100.0), 0, (0,), started=10.0)
    life.finished_by_duration(job, 100.0)  # armed for a run that started at 0
    life.grace_over(job, 100.0)  # not preempting
    assert job.state == JobState.RUNNING
    life.finished_by_duration(job, 110.0)
    assert job.state == JobState.SUCCEEDED


# ---------------------------------------------------------------- room-maker
def test_room_maker_nominates_the_fewest_victims_and_claims_them_once():
    """n0 (2 GPUs) runs low jobs 1 and 2, n1 (1 GPU) low job 3. High job 4 wants 2 GPUs: only n0 can hold
    them, so 1 and 2 are its victims. High job 5 wants 1: 1 and 2 are claimed and the room they leave is job
    4's, so 3 is its victim. High job 6 finds nothing left to claim."""
    st = state(2, 1)
    room, _ = parts(st)
    for job_id, node, device, started in ((1, 0, 0, 0.0), (2, 0, 1, 5.0), (3, 1, 0, 10.0)):
        running(st, job_id, spec(), node, (device,), started)
    four, five, six = (pending(st, i, spec(g, "high")) for i, g in ((4, 2), (5, 1), (6, 1)))
    room.preempt([four, five, six], now=100.0)
    assert room.victims_of(4) == (2, 1) and room.victims_of(5) == (3,) and room.victims_of(6) is None
    assert [st.jobs[i].state for i in (1, 2, 3)] == [JobState.PREEMPTING] * 3
    assert four.reason.code == five.reason.code == Reason.PREEMPTION_PENDING and six.reason is None
    assert four.reason.evidence == {"node": "n0", "victims": [2, 1]}
    assert room.awaiting_victims(four) and not room.awaiting_victims(six)
    assert [(t.at, t.job_id, t.kind) for t in st.timers.due(1e9)] == [(130.0, i, TimerKind.PREEMPT) for i in (1, 2, 3)]
    assert [(e.kind, e.job_id, e.data["by"]) for e in st.changes.drain()[1]] == [
        ("preempting", 2, 4), ("preempting", 1, 4), ("preempting", 3, 5)]
    assert room.nominated_first([six, five, four]) == [five, four, six]
    assert st.cluster.gpu_alloc[:, :2].tolist() == [[1000, 1000], [1000, 0]]  # the search left the cluster as it was


def test_room_maker_forgets_a_nominee_that_ran_and_a_victim_that_freed():
    st = state(1)
    room, life = parts(st)
    running(st, 1, spec(), 0, (0,), started=0.0)
    waiting = pending(st, 2, spec(1, "high"))
    room.preempt([waiting], now=1.0)
    assert room.awaiting_victims(waiting)
    life.requeue(st.jobs[1], 31.0, "preempted")
    assert not room.awaiting_victims(waiting) and room.victims_of(2) == (1,)
    room.done(2)
    assert room.victims_of(2) is None


# ---------------------------------------------------------------- node changes
def test_a_failed_device_requeues_only_its_job_and_the_quota_capacity_follows_nodes():
    st = state(2)
    _, life = parts(st)
    nodes = NodeChanges(st, life)
    on_0, on_1 = running(st, 1, spec(), 0, (0,), 0.0), running(st, 2, spec(), 0, (1,), 0.0)
    nodes.set_device_health("n0", 1, False, 5.0)
    assert on_0.state == JobState.RUNNING and on_1.state == JobState.PENDING and on_1.restarts == 1
    nodes.add_node(NodeRecord("n1", 64_000, 256_000, 4, A, cordoned=True), 6.0)
    assert st.quota.capacity_milli == 6000 and not st.cluster.schedulable[1]
    assert [(e.kind, e.job_id, e.node, e.data) for e in st.changes.drain()[1]] == [
        ("device-unhealthy", None, "n0", {"device": 1}), ("evicted", 2, "n0", {"device": 1}),
        ("node-added", None, "n1", {})]


def test_restore_binds_where_the_store_says_or_requeues():
    st = state(1)
    _, life = parts(st)
    nodes = NodeChanges(st, life)
    here = Job(1, spec(duration_s=60.0), 0, 0.0, 1, JobState.RUNNING, started_at=10.0, placement=[("n0", (0,))])
    gone = Job(2, spec(), 0, 0.0, 2, JobState.RUNNING, started_at=10.0, placement=[("n7", (0,))])
    nodes.restore([gone, here])
    assert here.state == JobState.RUNNING and st.cluster.gpu_alloc[0, 0] == 1000
    assert gone.state == JobState.PENDING and gone.placement == [] and 2 in st.fresh
    assert st.timers.next_at == 70.0 and st.full and st.dirty


# ---------------------------------------------------------------- runs
def test_a_time_limit_stops_a_local_command_and_fails_any_other_job():
    st = state(2, local_node="n0")
    _, life = parts(st)
    runs = Runs(st, life)
    local = running(st, 1, spec(command=("sleep", "9"), time_limit_s=50.0), 0, (0,), started=0.0)
    elsewhere = running(st, 2, spec(time_limit_s=50.0), 0, (1,), started=0.0)
    assert runs.runs_here(local) and not runs.runs_here(elsewhere)
    runs.over_limit(local, 49.0)  # a stale timer: not its limit
    assert local.state == JobState.RUNNING
    runs.over_limit(local, 50.0)
    runs.over_limit(elsewhere, 50.0)
    assert local.state == JobState.STOPPING and local.reason.code == Reason.TIME_LIMIT
    assert elsewhere.state == JobState.FAILED and elsewhere.reason.code == Reason.TIME_LIMIT
    assert list(st.timers.due(1e9)) == [Timer(80.0, 1, TimerKind.STOP)]
    runs.stopped(local, 80.0)
    assert local.state == JobState.FAILED and st.cluster.gpu_alloc[0].sum() == 0


# ---------------------------------------------------------------- views
def test_views_sample_at_most_every_sample_s():
    st = state(2, 2, sample_s=10.0)
    views = Views(st)
    running(st, 1, spec(), 0, (0,), 0.0)
    pending(st, 2, spec())
    assert views.gpu_allocation() == 25.0 and views.fragmentation() == 0.0
    for now in (0.0, 5.0, 10.0):
        views.sample(now)
    assert [(t, alloc, waiting) for t, alloc, _, waiting in views.samples] == [(0.0, 25.0, 1), (10.0, 25.0, 1)]


def test_the_job_table_counts_each_team_s_jobs_through_every_change():
    """Set, replace (another team), pop (with and without a default) and delete keep the per-team counts exact."""
    table = JobTable()
    a, b = JobSpec(name="x", team="a", cpu_milli=1, memory_mib=1), JobSpec(name="y", team="b", cpu_milli=1, memory_mib=1)
    table[1], table[2], table[3] = Job(1, a, 100, 0.0, 1), Job(2, a, 100, 0.0, 2), Job(3, b, 100, 0.0, 3)
    assert (table.per_team["a"], table.per_team["b"]) == (2, 1)
    table[2] = Job(2, b, 100, 0.0, 2)  # the same id, now team b's
    assert (table.per_team["a"], table.per_team["b"]) == (1, 2)
    assert table.pop(9, None) is None and (table.per_team["a"], table.per_team["b"]) == (1, 2)
    assert table.pop(1).id == 1 and table.per_team["a"] == 0
    del table[3]
    assert table.per_team["b"] == 1 and list(table) == [2]
    with pytest.raises(KeyError):
        table.pop(1)
