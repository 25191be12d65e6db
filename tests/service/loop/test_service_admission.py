"""Admission in the service's loop: jobs that can never run, quotas per GPU model, preemption that waits for
evictions under way, CPU-only placement, queue positions and preemption reasons (hand-computed clusters)."""

from __future__ import annotations

import pytest
from test_service_controller import A, B, cluster, job, make, submit

from quasched.service.domain import JobState, NodeRecord, QueueSpec, Reason
from quasched.service.loop.state import SpecError


def test_reclaim_counts_the_evictions_under_way():
    # vision borrows all 24 GPUs (quota 0): an 8-GPU job v-b on n1 and a 2 x 8 gang on n2+n0. nlp (quota 24) wants
    # two 6-GPU jobs: the gang's eviction alone frees 16, so the second must wait for it instead of evicting v-b
    queues = [QueueSpec("vision", {"*": 0}, cohort="c"), QueueSpec("nlp", {"*": 24}, cohort="c")]
    ctl = make(cluster((8, A), (8, A), (8, A)), queues, grace_s=30)
    v_b = submit(ctl, 1, job("vision", 8))
    gang = submit(ctl, 2, job("vision", 8, pods=2))
    assert gang.state == v_b.state == JobState.RUNNING
    first = submit(ctl, 3, job("nlp", 6), now=1)
    assert first.reason.code == Reason.PREEMPTION_PENDING and first.reason.evidence["victims"] == [2]
    second = submit(ctl, 4, job("nlp", 6), now=2)
    assert second.reason.code == Reason.PREEMPTION_PENDING and second.reason.evidence["victims"] == [2]
    assert v_b.state == JobState.RUNNING
    ctl.cycle(31)
    assert first.state == second.state == JobState.RUNNING
    assert v_b.state == JobState.RUNNING and gang.state == JobState.PENDING


def test_a_third_job_beyond_the_room_under_way_still_preempts():
    queues = [QueueSpec("vision", {"*": 0}, cohort="c"), QueueSpec("nlp", {"*": 24}, cohort="c")]
    ctl = make(cluster((8, A), (8, A), (8, A)), queues, grace_s=30)
    submit(ctl, 1, job("vision", 8))
    submit(ctl, 2, job("vision", 8, pods=2))
    for i, now in ((3, 1), (4, 2)):
        submit(ctl, i, job("nlp", 8), now=now)
    third = submit(ctl, 5, job("nlp", 8), now=3)  # the gang frees 16 for jobs 3 and 4: job 5 needs v-b
    assert third.reason.code == Reason.PREEMPTION_PENDING and third.reason.evidence["victims"] == [1]


@pytest.mark.parametrize("records, spec, field, words", [
    (cluster((8, A), (8, A), (8, A), (8, A)), job("a", 8, pods=5), "pods", "at most 4"),  # 5 x 8 on 32 GPUs
    (cluster(*[(8, A)] * 7), job("a", 0.5, pods=1024), "pods", "at most 112"),  # 1,024 x 0.5 on 56 GPUs
    (cluster((2, A), cpu=4000), job("a", 0, pods=5, cpu_milli=1000), "pods", "at most 4"),  # CPU bound
])
def test_a_gang_bigger_than_the_cluster_is_refused(records, spec, field, words):
    ctl = make(records)
    with pytest.raises(SpecError) as err:
        ctl.validate(spec)
    assert err.value.field == field and words in err.value.message


def test_a_job_beyond_quota_and_what_the_cohort_could_lend_is_refused():
    queues = [QueueSpec("a", {A: 2}, cohort="c", borrowing_limit=3), QueueSpec("b", {A: 4}, cohort="c"),
              QueueSpec("solo", {A: 2})]
    ctl = make(cluster((8, A), (8, A)), queues)
    ctl.validate(job("a", 5))  # 2 nominal + 3 borrowed
    with pytest.raises(SpecError, match="at most 5 A100"):
        ctl.validate(job("a", 6))
    with pytest.raises(SpecError, match="at most 2 A100"):
        ctl.validate(job("solo", 3))  # no cohort: never borrows
    ctl.validate(job("b", 6))  # 4 + a's 2, b has no borrowing limit


def test_removing_nodes_makes_a_waiting_gang_unschedulable_and_adding_them_back_does_not():
    ctl = make(cluster((8, A), (8, A), (8, A)))
    submit(ctl, 1, job("a", 8, pods=2))
    waiting = submit(ctl, 2, job("b", 8, pods=3), now=1)
    assert waiting.reason.code == Reason.INSUFFICIENT
    ctl.remove_node("n2", now=2)  # job 1 may be requeued, if it ran there
    ctl.cycle(2)
    assert waiting.reason.code == Reason.UNSCHEDULABLE and "at most 2" in waiting.reason.message
    ctl.add_node(cluster((8, A))[0].__class__("n9", 64_000, 256_000, 8, A), now=3)
    ctl.cycle(3)
    assert waiting.reason.code != Reason.UNSCHEDULABLE


def test_the_answer_for_a_shape_follows_nodes_leaving_devices_failing_and_nodes_joining():
    # a gang of 2-GPU pods asked again and again (the answer per shape is remembered): 2 + 2 + 4 GPUs host 4 pods
    ctl = make(cluster((2, A), (2, A), (4, A)))
    gang = job("a", 2, pods=4)
    ctl.validate(gang)
    ctl.remove_node("n0", now=1)  # 2 + 4: 3 pods
    with pytest.raises(SpecError, match="at most 3 such"):
        ctl.validate(gang)
    ctl.set_device_health("n2", 0, False, now=2)  # 2 + 3 healthy: 1 + 1 pods
    with pytest.raises(SpecError, match="at most 2 such"):
        ctl.validate(gang)
    ctl.cordon("n1", now=3)  # a cordon passes: the node could still host its pod
    with pytest.raises(SpecError, match="at most 2 such"):
        ctl.validate(gang)
    ctl.add_node(NodeRecord("n9", 64_000, 256_000, 4, A), now=4)  # + 2 pods
    ctl.validate(gang)
    ctl.set_device_health("n9", 3, False, now=5)  # 2 + 3 + 3 healthy: 3 pods
    with pytest.raises(SpecError, match="at most 3 such"):
        ctl.validate(gang)
    ctl.set_device_health("n2", 0, True, now=6)  # 2 + 4 + 3: 4 pods
    ctl.validate(gang)


def test_shrinking_a_quota_makes_a_waiting_job_unschedulable_not_waiting_for_quota():
    ctl = make(cluster((8, A)), [QueueSpec("a", {A: 8})])
    submit(ctl, 1, job("a", 8))
    waiting = submit(ctl, 2, job("a", 4), now=1)
    assert waiting.reason.code == Reason.WAITING_FOR_QUOTA
    ctl.put_queue(QueueSpec("a", {A: 2}))
    ctl.cycle(2)
    assert waiting.reason.code == Reason.UNSCHEDULABLE and "at most 2 A100" in waiting.reason.message


def test_quota_on_a_model_no_node_has_is_refused():
    ctl = make(cluster((8, A)))
    with pytest.raises(SpecError) as err:
        ctl.validate_queue(QueueSpec("a", {"Z999": 4}))
    assert err.value.field == "quota" and "Z999" in err.value.message
    ctl.validate_queue(QueueSpec("a", {A: 4, "*": 1}))


def test_a_model_the_quota_does_not_name_is_not_admissible():
    ctl = make(cluster((2, A), (2, B)), [QueueSpec("a", {A: 2}), QueueSpec("b")])
    on_a = submit(ctl, 1, job("a", 1))
    assert on_a.placement[0][0] == "n0"  # only A100 is admissible for queue a
    with pytest.raises(SpecError, match="names none of the GPU models"):
        ctl.validate(job("a", 1, gpu_model=B))
    submit(ctl, 2, job("a", 1))
    third = submit(ctl, 3, job("a", 1))
    assert third.reason.code == Reason.WAITING_FOR_QUOTA and third.state == JobState.PENDING  # n1 (V100) is free
    assert "A100: uses 2 of 2" in third.reason.message
    assert submit(ctl, 4, job("b", 2, gpu_model=B)).state == JobState.RUNNING  # a queue without quota: any model


def test_queue_positions_are_one_based_and_dense():
    ctl = make(cluster((1, A)))
    submit(ctl, 1, job("a", 1))
    for i in range(2, 6):
        submit(ctl, i, job("a", 1), now=i)
    assert {i: ctl.position[i] for i in range(2, 6)} == {2: 1, 3: 2, 4: 3, 5: 4}
    ctl.cancel(3, 6.0)
    ctl.cycle(6.0)  # a pass that tries nothing new still closes the gap
    assert {i: ctl.position[i] for i in (2, 4, 5)} == {2: 1, 4: 2, 5: 3}
    ctl.finish(1, 7.0)
    ctl.cycle(7.0)  # job 2 starts: the others move up
    assert 2 not in ctl.position and {i: ctl.position[i] for i in (4, 5)} == {4: 1, 5: 2}


def test_a_preempted_jobs_reason_says_by_whom_and_when():
    queues = [QueueSpec("a", {"*": 2}, cohort="c"), QueueSpec("b", {"*": 2}, cohort="c")]
    ctl = make(cluster((4, A)), queues, grace_s=30)
    submit(ctl, 1, job("a", 2))
    victim = submit(ctl, 2, job("a", 2), now=1)
    submit(ctl, 3, job("b", 2), now=2)
    assert victim.state == JobState.PREEMPTING and victim.reason.code == Reason.PREEMPTED
    assert victim.reason.message == ("preempted by job 3 (b, normal) at 1970-01-01 00:00:02 UTC; "
                                     "stops within 30 s")
    ctl.cycle(32)
    assert victim.state == JobState.PENDING and victim.reason.code == Reason.WAITING_FOR_QUOTA
    assert victim.reason.message.endswith("(preempted by job 3 at 1970-01-01 00:00:02 UTC)")
    assert victim.reason.evidence["preempted_by"] == 3 and victim.reason.evidence["preempted_at"] == 2
    ctl.finish(1, 40.0)
    ctl.cycle(40.0)
    assert victim.state == JobState.RUNNING and victim.reason is None


@pytest.mark.parametrize("policy", ["fgd", "firstfit", "dotprod"])
def test_cpu_only_jobs_go_to_nodes_without_gpus_while_one_fits(policy):
    records = [NodeRecord("n0", 8000, 256_000, 2, A), NodeRecord("n1", 16_000, 256_000, 0, "")]
    without = make(records, policy=policy, cpu_pods_off_gpu_nodes=False)  # what the simulators keep doing
    assert submit(without, 1, job("a", 0, cpu_milli=7000)).placement[0][0] == "n0"
    ctl = make(records, policy=policy)
    assert submit(ctl, 1, job("a", 0, cpu_milli=7000)).placement[0][0] == "n1"
    assert submit(ctl, 2, job("a", 0, cpu_milli=8000)).placement[0][0] == "n1"
    assert submit(ctl, 3, job("a", 1, cpu_milli=1000)).placement[0][0] == "n0"
    assert submit(ctl, 4, job("a", 0, cpu_milli=7000)).placement[0][0] == "n0"  # n1 is full: a GPU node will do
