"""End to end, preemption and quota reclaim: a real kube-apiserver + kube-scheduler v1.20.2 with quasched serve as
its extender, two fake nodes of 8 A100s (16 GPUs), the PodGroup CRD; no kubelet, no controller manager.

Queues ``borrow`` and ``lend`` of one cohort, 8 A100s nominal each (Kueue's semantics): ``borrow`` runs pods on all
16 GPUs, 8 of them borrowed from ``lend``. A pod of ``lend`` within its quota, of the same priority, then reclaims:
quasched evicts exactly the one pod of ``borrow`` whose devices it is given, it binds there, the other pods of
``borrow`` are untouched, nothing is over-committed. A pod group of ``borrow`` one member of which is the victim
stops whole. A PodDisruptionBudget refuses the plan's dry run: nothing is evicted. A victim that never goes (no
kubelet here finishes its deletion: it stays Terminating) keeps its GPUs; after its grace period and a minute the
preemptor's FailedScheduling names it, and once it is gone the preemptor binds at once.

No kubelet: a pod of grace 0 is deleted by its eviction at once (the API server does, as for
``gracePeriodSeconds=0``); a pod of a longer grace stays Terminating until the test deletes it. Skipped, with the
reason, without the binaries (as tests/kube/test_kube_e2e.py)."""

from __future__ import annotations

import time
from typing import Any, Iterator

import pytest
import yaml
from kube_cluster import DEVICES, KubeCluster, NodeShape, Quasched, pod_manifest, wait_for
from repo import REPO
from test_kube_e2e import REASON, kc_node_names
from test_kube_gangs_e2e import PODGROUPS, bound, group, held_gpus, no_overcommit

from quasched.kube.convention import QUEUE_ANNOTATION
from quasched.kube.gangs import GROUP_LABEL
from quasched.kube.preemption import NOMINATION_SLACK_S, PREEMPTING, STUCK

pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

NODES = [NodeShape(f"a100-{i}", 64_000, 512 * 1024, 8, "A100") for i in range(2)]
PDBS = "/apis/policy/v1beta1/namespaces/default/poddisruptionbudgets"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeCluster, Quasched]]:
    base = tmp_path_factory.mktemp("kube-preemption")
    q = Quasched(base / "quasched", None)
    with KubeCluster(base / "k8s", q.verbs_url) as kc:
        q.attach(kc)
        crd = yaml.safe_load((REPO / "deploy" / "podgroup-crd.yaml").read_text())
        kc.check(kc.api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd))
        wait_for("the PodGroup CRD is served", lambda: kc.api.get(PODGROUPS).status_code == 200, 60)
        kc.add_gpu_nodes(NODES)
        for value, name in ((0, "batch-low"), (1000, "urgent-high")):
            r = kc.api.post("/apis/scheduling.k8s.io/v1/priorityclasses", json={
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value})
            assert r.status_code in (201, 409), r.text
        q.start()
        try:
            q.ensure_queue("default")
            for name in ("borrow", "lend"):  # 8 A100s nominal each, one cohort: either may borrow the other's
                r = q.client.put(f"/api/v1/queues/{name}", json={"quota": {"A100": 8}, "cohort": "lab"})
                assert r.status_code == 200, r.text
            wait_for("quasched sees the nodes", lambda: len({n["name"] for n in q.nodes()} & set(kc_node_names(kc)))
                     == len(NODES), 60, q.proc, q.log)
            yield kc, q
        finally:
            q.stop()


def gpu_pod(kc: KubeCluster, name: str, gpus: int, queue: str = "default", grace: int = 0,
            **spec: Any) -> str:
    manifest = pod_manifest(name, gpus=gpus, cpu_milli=2000, memory_mib=8 * 1024,
                            extra_annotations={QUEUE_ANNOTATION: queue})
    manifest["spec"].update(terminationGracePeriodSeconds=grace, **spec)
    kc.create_pod(manifest)
    return name


def placed(kc: KubeCluster, names: list[str]) -> dict[str, tuple[str, str, str]]:
    """Per bound pod: (uid, node, devices annotation)."""
    pods = kc.pods()
    return {n: (pods[n]["metadata"]["uid"], pods[n]["spec"]["nodeName"], pods[n]["metadata"]["annotations"][DEVICES])
            for n in names if n in pods and pods[n]["spec"].get("nodeName")}


def queue(q: Quasched, name: str) -> dict[str, Any]:
    return next(x for x in q.client.get("/api/v1/queues").json() if x["name"] == name)


def failed_scheduling(kc: KubeCluster, pod: str) -> list[str]:
    return [e.get("message", "") for e in kc.events(pod) if e.get("reason") == "FailedScheduling"]


def clean(kc: KubeCluster, q: Quasched) -> None:
    names = list(kc.pods())
    for n in names:
        kc.delete_pod(n)
    wait_for("every pod gone and every GPU free", lambda: not kc.pods() and held_gpus(q) == 0, 60)


def test_a_queue_within_its_quota_reclaims_exactly_what_it_needs_from_a_borrowing_queue(stack) -> None:
    kc, q = stack
    borrowers = []
    for k in range(4):  # one by one: their start order is the victim order's last key
        borrowers.append(gpu_pod(kc, f"borrow-{k}", 4, queue="borrow"))
        kc.wait_bound(borrowers, timeout_s=60)
    before = placed(kc, borrowers)
    assert queue(q, "borrow")["borrowed_gpus"] == 8 and queue(q, "borrow")["used_gpus"] == 16  # the whole cluster
    started = time.monotonic()
    back = gpu_pod(kc, "lend-0", 4, queue="lend")  # within lend's 8; the same priority: reclaim, not preemption
    pods = kc.wait_bound([back], timeout_s=60)
    took = time.monotonic() - started
    after = placed(kc, borrowers)
    victims = sorted(set(before) - set(after))
    assert len(victims) == 1, (before, after)  # exactly enough: 4 GPUs of the 8 borrowed
    [victim] = victims
    assert victim not in kc.pods()  # evicted (grace 0: deleted at once)
    _, node, devices = before[victim]
    assert (pods[back]["spec"]["nodeName"], pods[back]["metadata"]["annotations"][DEVICES]) == (node, devices)
    assert after == {n: before[n] for n in borrowers if n != victim}  # the others untouched: same pods, same devices
    no_overcommit(kc)
    messages = failed_scheduling(kc, back)
    assert messages and all(PREEMPTING in m for m in messages), messages  # quasched's reason while it waited
    jobs = {j["name"]: j for j in q.jobs()}
    assert jobs[f"default/{victim}"]["state"] == "cancelled"
    assert jobs[f"default/{victim}"]["reason"]["code"] == "Preempted"
    assert jobs[f"default/{victim}"]["reason"]["evidence"]["preempted_by"] == f"pod default/{back}"
    assert jobs[f"default/{back}"]["state"] == "running"
    assert queue(q, "borrow")["borrowed_gpus"] == 4 and queue(q, "lend")["used_gpus"] == 4
    # its room was held for it and kube-scheduler told to try it at once: no wait for a back-off or a flush
    assert took < 20, took
    clean(kc, q)


def test_a_pod_group_one_member_of_which_is_reclaimed_from_stops_whole(stack) -> None:
    kc, q = stack
    group(kc, "train", 2)
    members = []
    for k in range(2):
        manifest = pod_manifest(f"train-{k}", gpus=8, cpu_milli=2000, memory_mib=8 * 1024,
                                extra_annotations={QUEUE_ANNOTATION: "borrow"})
        manifest["metadata"]["labels"] = {GROUP_LABEL: "train"}
        kc.create_pod(manifest)
        members.append(f"train-{k}")
    kc.wait_bound(members, timeout_s=120)  # one node each: 16 GPUs, 8 borrowed
    back = gpu_pod(kc, "lend-1", 4, queue="lend")
    pods = kc.wait_bound([back], timeout_s=60)
    wait_for("both members evicted", lambda: not set(members) & set(kc.pods()), 30)
    no_overcommit(kc)
    jobs = {j["name"]: j for j in q.jobs()}
    for m in members:  # the one chosen and the one its group brought
        assert jobs[f"default/{m}"]["state"] == "cancelled" and jobs[f"default/{m}"]["reason"]["code"] == "Preempted"
    assert pods[back]["spec"]["nodeName"] in kc_node_names(kc)
    assert queue(q, "borrow")["used_gpus"] == 0
    clean(kc, q)


def test_a_disruption_budget_refuses_the_dry_run_and_nothing_is_evicted(stack) -> None:
    kc, q = stack
    borrowers = []
    for k in range(2):
        manifest = pod_manifest(f"kept-{k}", gpus=8, cpu_milli=2000, memory_mib=8 * 1024,
                                extra_annotations={QUEUE_ANNOTATION: "borrow"})
        manifest["metadata"]["labels"] = {"app": "kept"}
        kc.create_pod(manifest)
        borrowers.append(f"kept-{k}")
    kc.wait_bound(borrowers, timeout_s=60)
    for n in borrowers:  # (what their kubelet would report: a Pending pod is evicted without asking its budget)
        kc.set_pod_phase(n, "Running")
    before = placed(kc, borrowers)
    # no controller manager here computes the budget's status, so the API server refuses every eviction of a running
    # pod it covers (429, "still being processed"): the refusal a budget that allows no disruption gives
    kc.check(kc.api.post(PDBS, json={"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
                                     "metadata": {"name": "kept"},
                                     "spec": {"minAvailable": 0, "selector": {"matchLabels": {"app": "kept"}}}}))
    back = gpu_pod(kc, "lend-2", 4, queue="lend")
    wait_for("the plan cancelled by the budget", lambda: "cancelled, nothing evicted" in q.log.read_text(), 60)
    time.sleep(3)
    assert placed(kc, borrowers) == before  # nothing evicted, not even one pod of a refused plan
    assert not [p for p in kc.pods().values() if p["metadata"].get("deletionTimestamp")]
    assert back not in placed(kc, [back])
    kc.check(kc.api.delete(f"{PDBS}/kept"))
    clean(kc, q)


def test_a_victim_stuck_terminating_keeps_its_gpus_is_named_and_the_preemptor_binds_once_it_is_gone(stack) -> None:
    kc, q = stack
    low = [gpu_pod(kc, f"low-{k}", 8, grace=1, priorityClassName="batch-low") for k in range(2)]
    kc.wait_bound(low, timeout_s=60)
    urgent = gpu_pod(kc, "urgent", 8, priorityClassName="urgent-high")
    wait_for("a victim evicted", lambda: [n for n, p in kc.pods().items()
                                          if n in low and p["metadata"].get("deletionTimestamp")], 60)
    [victim] = [n for n, p in kc.pods().items() if n in low and p["metadata"].get("deletionTimestamp")]
    evicted = time.monotonic()
    time.sleep(3)
    assert victim in kc.pods() and not placed(kc, [urgent])  # Terminating (no kubelet): its GPUs stay booked
    jobs = {j["name"]: j for j in q.jobs()}
    assert jobs[f"default/{victim}"]["state"] == "preempting"
    # past its grace (1 s) and the slack: the next try of urgent names it (a label is an update: tried at once)
    time.sleep(max(0.0, evicted + 1 + NOMINATION_SLACK_S + 2 - time.monotonic()))
    kc.check(kc.api.patch("/api/v1/namespaces/default/pods/urgent", json={"metadata": {"labels": {"try": "again"}}},
                          headers={"Content-Type": "application/merge-patch+json"}))
    says = f"{STUCK}: default/{victim}"
    wait_for(f"FailedScheduling: {says}", lambda: any(says in m for m in failed_scheduling(kc, urgent)), 60)
    assert not placed(kc, [urgent])
    assert [n for n, p in kc.pods().items() if p["metadata"].get("deletionTimestamp")] == [victim]  # no other victim
    no_overcommit(kc)
    started = time.monotonic()
    kc.delete_pod(victim)  # what the kubelet does at last (or a removed finalizer)
    pods = kc.wait_bound([urgent], timeout_s=60)
    assert time.monotonic() - started < 20
    assert pods[urgent]["spec"]["nodeName"] == placed(kc, [urgent])[urgent][1]
    no_overcommit(kc)
    # kube-scheduler's own preemption is off (deploy/): 1.20.2 would have crashed on two candidates without victims
    assert kc.procs["kube-scheduler"].poll() is None
    clean(kc, q)
