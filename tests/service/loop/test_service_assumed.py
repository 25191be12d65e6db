"""Assumed placements in the service's loop (quasched.service.loop.assumed) on small hand-computed clusters."""

from __future__ import annotations

from quasched.model.workload import Pod
from quasched.policies.registry import parse_spec
from quasched.service.domain import Job, JobSpec, JobState, NodeRecord, QueueSpec, Reason
from quasched.service.loop.controller import Controller, nodes_of
from quasched.service.loop.state import LoopOptions

A = "A100"


def make(*gpus: int, defrag_per_hour: int = 0) -> Controller:
    records = [NodeRecord(f"n{i}", 64_000, 256_000, g, A) for i, g in enumerate(gpus)]
    return Controller(nodes_of(records), [QueueSpec("a")], LoopOptions(policy=parse_spec("bestfit"), defrag_per_hour=defrag_per_hour))


def pod(gpus: int, cpu_milli: int = 1000) -> Pod:
    return Pod(uid=0, name="team-a/pod", cpu_milli=cpu_milli, memory_mib=1024, num_gpu=gpus, gpu_milli=1000, team="a")


def spec(gpus: int, priority_class: str = "normal", name: str = "team-a/pod") -> JobSpec:
    return JobSpec(name, "a", 1000, 1024, num_gpu=gpus, gpu_milli=1000, priority_class=priority_class)


def stored_running(job_id: int, node: str, devices: tuple[int, ...]) -> Job:
    """A pod's job as the store returns it: running on ``node``'s ``devices``, not yet in the loop."""
    job = Job(job_id, spec(len(devices)), 100, 0.0, job_id)
    job.state, job.started_at, job.placement, job.quota_model = JobState.RUNNING, 0.0, [(node, devices)], A
    return job


def used(ctl: Controller, node: int = 0) -> list[int]:
    return ctl.cluster.gpu_alloc[node, :int(ctl.cluster.num_gpus[node])].tolist()


def test_an_assumption_takes_its_devices_and_is_no_job():
    ctl = make(4)
    assert ctl.assume("uid-1", pod(2), "n0", (1, 2), 30.0, 0.0)
    assert used(ctl) == [0, 1000, 1000, 0]
    assert ctl.cluster.free[0, 0] == 63_000  # its CPU too
    assert ctl.quota.usage["a", A] == 2000  # charged to its queue, as a job would be
    assert ctl.jobs == {} and ctl.drain_changes() == ([], [])
    snap = ctl.snapshot()
    assert snap["nodes"][0]["jobs"] == [] and snap["running"] == 0 and snap["nodes"][0]["gpu_used_milli"] == used(ctl)
    # the next decisions see the devices taken
    assert not ctl.assume("uid-2", pod(1), "n0", (2,), 30.0, 0.0)
    assert ctl.assume("uid-2", pod(2), "n0", (0, 3), 30.0, 0.0)
    assert used(ctl) == [1000] * 4
    assert not ctl.assume("uid-3", pod(1), "nowhere", (0,), 30.0, 0.0)


def test_forget_frees_exactly_what_it_took():
    ctl = make(4)
    before = ctl.cluster.snapshot()
    assert ctl.assume("uid-1", pod(3, cpu_milli=7000), "n0", (0, 2, 3), 30.0, 0.0)
    assert ctl.forget("uid-1") and not ctl.forget("uid-1")
    after = ctl.cluster.snapshot()
    assert all((x == y).all() for x, y in zip(before, after))
    assert ctl.quota.usage["a", A] == 0 and ctl.cluster.placements == {}
    # assuming a key again replaces its assumption
    assert ctl.assume("uid-1", pod(1), "n0", (0,), 30.0, 0.0)
    assert ctl.assume("uid-1", pod(1), "n0", (3,), 30.0, 0.0)
    assert used(ctl) == [0, 0, 0, 1000] and len(ctl.cluster.placements) == 1


def test_confirm_gives_the_stored_job_the_assumed_devices_only():
    ctl = make(4)
    assert ctl.assume("uid-1", pod(2), "n0", (1, 2), 30.0, 0.0)
    elsewhere = stored_running(7, "n0", (0, 3))
    assert not ctl.confirm("uid-1", elsewhere)  # other devices: refused, the assumption kept
    assert not ctl.confirm("uid-1", stored_running(7, "n0", (1,)))  # another request: refused
    assert ctl.jobs == {} and ctl.assumed("uid-1") is not None and used(ctl) == [0, 1000, 1000, 0]
    job = stored_running(7, "n0", (1, 2))
    assert ctl.confirm("uid-1", job)
    assert ctl.jobs == {7: job} and ctl.assumed("uid-1") is None
    assert used(ctl) == [0, 1000, 1000, 0] and ctl.quota.usage["a", A] == 2000 and ctl.cluster.free[0, 0] == 63_000
    assert ctl.state.jobs_on(0) == [job] and ctl.snapshot()["nodes"][0]["jobs"] == [7]
    assert not ctl.confirm("uid-1", stored_running(8, "n0", (1, 2)))  # nothing assumed any more
    ctl.finish(7, 5.0)
    assert used(ctl) == [0] * 4 and ctl.quota.usage["a", A] == 0


def test_an_assumption_expires_after_its_ttl_unless_being_bound():
    ctl = make(4)
    lost: list[str] = []
    assert ctl.assume("uid-1", pod(1), "n0", (0,), 30.0, 100.0, lost.append)
    assert ctl.assume("uid-2", pod(1), "n0", (1,), 30.0, 100.0, lost.append)
    assert ctl.assumptions.binding("uid-2")  # its bind started: kept until confirmed or forgotten
    assert ctl.expire(129.9) == [] and used(ctl) == [1000, 1000, 0, 0]
    ctl.cycle(130.0)  # the loop's cycle expires them too
    assert lost == ["uid-1"] and ctl.assumed("uid-1") is None and used(ctl) == [0, 1000, 0, 0]
    assert ctl.expire(10_000.0) == [] and ctl.assumed("uid-2") is not None


def test_node_removal_and_device_failure_lose_the_assumptions_there_without_requeueing():
    ctl = make(4, 4)
    lost: list[str] = []
    assert ctl.assume("on-n1", pod(2), "n1", (0, 1), 30.0, 0.0, lost.append)
    assert ctl.assume("on-0-1", pod(2), "n0", (0, 1), 30.0, 0.0, lost.append)
    assert ctl.assume("on-3", pod(1), "n0", (3,), 30.0, 0.0, lost.append)
    ctl.set_device_health("n0", 1, False, 1.0)
    assert lost == ["on-0-1"] and used(ctl) == [0, 0, 0, 1000]
    ctl.remove_node("n1", 2.0)
    assert lost == ["on-0-1", "on-n1"] and ctl.assumed("on-n1") is None and ctl.assumed("on-3") is not None
    jobs, events = ctl.drain_changes()
    assert jobs == [] and [e.kind for e in events] == ["device-unhealthy", "node-removed"]
    assert ctl.quota.usage["a", A] == 1000


def test_preemption_never_picks_an_assumed_placement():
    """An urgent job blocked by an assumption: nothing is preempted. A hold that was an in-memory job (restored
    running, priority normal) was chosen as its victim and its change handed to the store."""
    ctl = make(4)
    assert ctl.assume("uid-1", pod(4), "n0", (0, 1, 2, 3), 30.0, 0.0)
    ctl.submit(1, spec(4, "high", "urgent"), 1.0)
    ctl.cycle(1.0)
    urgent = ctl.jobs[1]
    assert urgent.state == JobState.PENDING and urgent.reason is not None
    assert urgent.reason.code != Reason.PREEMPTION_PENDING
    assert used(ctl) == [1000] * 4 and ctl.assumed("uid-1") is not None
    jobs, events = ctl.drain_changes()
    assert [j.id for j in jobs] == [1] and [e.kind for e in events] == ["submitted"]


def test_preemption_stops_the_job_beside_an_assumption_never_the_assumption():
    """Node of 4 GPUs: an assumption on 0-1, a low-priority job on 2-3. An urgent job of 4 GPUs cannot get room (the
    assumption stays): no victim at all. An urgent job of 2 GPUs gets the low job's devices."""
    ctl = make(4)
    assert ctl.assume("uid-1", pod(2), "n0", (0, 1), 100.0, 0.0)
    ctl.submit(1, spec(2, "low", "low"), 0.0)
    ctl.cycle(0.0)
    assert ctl.jobs[1].placement == [("n0", (2, 3))]
    ctl.submit(2, spec(4, "high", "whole"), 1.0)
    ctl.cycle(1.0)
    assert ctl.jobs[1].state == JobState.RUNNING and ctl.jobs[2].state == JobState.PENDING
    ctl.cancel(2, 1.5)
    ctl.submit(3, spec(2, "high", "half"), 2.0)
    ctl.cycle(2.0)
    assert ctl.jobs[1].state == JobState.PREEMPTING
    assert ctl.jobs[3].reason is not None and ctl.jobs[3].reason.evidence["victims"] == [1]
    ctl.cycle(2.0 + ctl.options.grace_s)
    assert ctl.jobs[3].placement == [("n0", (2, 3))] and ctl.assumed("uid-1") is not None


def test_defragmentation_never_moves_an_assumed_placement():
    """Two nodes of 2 GPUs, an assumption on each (one GPU): a 2-GPU job is fragmented and nothing is movable."""
    ctl = make(2, 2, defrag_per_hour=10)
    assert ctl.assume("uid-1", pod(1), "n0", (0,), 30.0, 0.0)
    assert ctl.assume("uid-2", pod(1), "n1", (0,), 30.0, 0.0)
    ctl.submit(1, spec(2, name="pair"), 1.0)
    ctl.cycle(1.0)
    assert ctl.jobs[1].state == JobState.PENDING and ctl.jobs[1].reason is not None
    assert ctl.jobs[1].reason.code == Reason.FRAGMENTED
    assert [e.kind for e in ctl.drain_changes()[1]] == ["submitted"]
    assert used(ctl, 0) == used(ctl, 1) == [1000, 0]
