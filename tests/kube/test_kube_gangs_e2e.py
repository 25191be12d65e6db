"""End to end, pod groups: a real kube-apiserver + kube-scheduler v1.20.2 with quasched serve as its extender,
the PodGroup CRD of ``deploy/podgroup-crd.yaml``, five fake nodes of 8 A100s (40 GPUs).

A group of 4 workers x 8 GPUs binds whole, one node each; of two groups of 3 x 8 that each fit alone but not
together, one binds whole and the other waits whole with quasched's reason, then binds when the first ends; a group
whose members arrive one by one binds when the last exists; a group one of whose members kube-scheduler's own
filters keep off every node never binds a member and holds nothing past its timeout. No device is ever
over-committed. Skipped, with the reason, without the binaries (as tests/kube/test_kube_e2e.py)."""

from __future__ import annotations

import collections
import time
from typing import Any, Iterator

import pytest
import yaml
from kube_cluster import DEVICES, GPU, KubeCluster, NodeShape, Quasched, pod_manifest, wait_for
from repo import REPO
from test_kube_e2e import REASON, kc_node_names

from quasched.kube.gangs import GROUP_LABEL

pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

NODES = [NodeShape(f"a100-{i}", 64_000, 512 * 1024, 8, "A100") for i in range(5)]
PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeCluster, Quasched]]:
    base = tmp_path_factory.mktemp("kube-gangs")
    q = Quasched(base / "quasched", None)
    with KubeCluster(base / "k8s", q.verbs_url) as kc:
        q.attach(kc)
        crd = yaml.safe_load((REPO / "deploy" / "podgroup-crd.yaml").read_text())
        kc.check(kc.api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd))
        wait_for("the PodGroup CRD is served", lambda: kc.api.get(PODGROUPS).status_code == 200, 60)
        kc.add_gpu_nodes(NODES)
        q.start()
        try:
            q.ensure_queue("default")
            wait_for("quasched sees the nodes", lambda: len({n["name"] for n in q.nodes()} & set(kc_node_names(kc)))
                     == len(NODES), 60, q.proc, q.log)
            yield kc, q
        finally:
            q.stop()


def group(kc: KubeCluster, name: str, min_member: int, timeout_s: int = 60) -> None:
    kc.check(kc.api.post(PODGROUPS, json={"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                                          "metadata": {"name": name},
                                          "spec": {"minMember": min_member, "scheduleTimeoutSeconds": timeout_s}}))


def worker(kc: KubeCluster, group_name: str, name: str, gpus: int = 8, **spec: Any) -> str:
    manifest = pod_manifest(name, gpus=gpus, cpu_milli=4000, memory_mib=16 * 1024)
    manifest["metadata"]["labels"] = {GROUP_LABEL: group_name}
    manifest["spec"].update(spec)
    kc.create_pod(manifest)
    return name


def bound(kc: KubeCluster, names: list[str]) -> dict[str, str]:
    pods = kc.pods()
    return {n: pods[n]["spec"]["nodeName"] for n in names if (pods.get(n, {}).get("spec") or {}).get("nodeName")}


def held_gpus(q: Quasched) -> int:
    """GPU milli quasched counts in use (jobs and holds) over every node."""
    return sum(sum(n["gpu_used_milli"]) for n in q.nodes())


def no_overcommit(kc: KubeCluster) -> None:
    use: collections.Counter[tuple[str, int]] = collections.Counter()
    for pod in kc.pods().values():
        node = pod["spec"].get("nodeName")
        text = (pod["metadata"].get("annotations") or {}).get(DEVICES, "")
        for d in (int(x) for x in text.split(",") if x.strip()):
            use[node, d] += 1
    assert not [k for k, n in use.items() if n > 1], use


def clean(kc: KubeCluster, q: Quasched, names: list[str]) -> None:
    for n in names:
        kc.delete_pod(n)
    wait_for("the pods gone and their GPUs free", lambda: not set(names) & set(kc.pods()) and held_gpus(q) == 0, 60)


def test_four_workers_of_eight_gpus_bind_whole(stack: tuple[KubeCluster, Quasched]) -> None:
    kc, q = stack
    group(kc, "train", 4)
    names = [worker(kc, "train", f"train-{k}") for k in range(4)]
    pods = kc.wait_bound(names, timeout_s=120)
    nodes = {pods[n]["spec"]["nodeName"] for n in names}
    assert len(nodes) == 4  # 8 GPUs each: one node each, every device of it
    assert all(pods[n]["metadata"]["annotations"][DEVICES] == "0,1,2,3,4,5,6,7" for n in names)
    running = {j["name"]: j["placement"][0]["node"] for j in q.jobs(state="running")}
    assert running == {f"default/{n}": pods[n]["spec"]["nodeName"] for n in names}
    no_overcommit(kc)
    clean(kc, q, names)


def test_two_gangs_that_do_not_fit_together_one_binds_the_other_waits_whole(stack) -> None:
    kc, q = stack
    group(kc, "first", 3)
    group(kc, "second", 3)
    first = [worker(kc, "first", f"first-{k}") for k in range(3)]
    second = [worker(kc, "second", f"second-{k}") for k in range(3)]
    wait_for("one gang bound whole", lambda: len(bound(kc, first)) == 3 or len(bound(kc, second)) == 3, 120)
    winner, loser = (first, second) if len(bound(kc, first)) == 3 else (second, first)
    says = "its 3 pods (24 GPUs) do not fit together now"  # (a try before all its pods existed says so first)
    wait_for(f"a FailedScheduling event: {says}", lambda: any(
        says in e.get("message", "") for n in loser for e in kc.events(n) if e.get("reason") == "FailedScheduling"), 60)
    time.sleep(5)  # kube-scheduler retries the waiting gang meanwhile: still no member of it bound
    assert bound(kc, loser) == {} and len(bound(kc, winner)) == 3
    no_overcommit(kc)
    for n in winner:  # the first gang ends: the other binds whole
        kc.delete_pod(n)
    kc.wait_bound(loser, timeout_s=120)
    no_overcommit(kc)
    clean(kc, q, loser)


def test_members_arriving_over_time_bind_when_the_last_exists(stack) -> None:
    kc, q = stack
    group(kc, "late", 3)
    names = [worker(kc, "late", f"late-{k}") for k in range(2)]
    says = "pod group default/late waits for its members: 2 of minMember 3 exist"  # (a first try may have seen 1)
    wait_for(f"a FailedScheduling event: {says}", lambda: any(
        says in e.get("message", "") for n in names for e in kc.events(n) if e.get("reason") == "FailedScheduling"), 60)
    time.sleep(5)
    assert bound(kc, names) == {} and held_gpus(q) == 0  # nothing bound, nothing held meanwhile
    names.append(worker(kc, "late", "late-2"))
    kc.wait_bound(names, timeout_s=120)
    no_overcommit(kc)
    clean(kc, q, names)


def test_a_gang_that_cannot_bind_whole_binds_nothing_and_holds_nothing_past_its_timeout(stack) -> None:
    kc, q = stack
    group(kc, "stuck", 2, timeout_s=5)
    ok = worker(kc, "stuck", "stuck-0", gpus=4)
    kept_off = worker(kc, "stuck", "stuck-1", gpus=4, nodeSelector={"no-such-label": "x"})  # kube-scheduler's own filters
    time.sleep(20)  # several holds and timeouts: stuck-0 reaches bind, stuck-1 never does
    assert bound(kc, [ok, kept_off]) == {}
    assert not [j for j in q.jobs() if j["name"].startswith("default/stuck-")]
    kc.delete_pod(kept_off)
    wait_for("nothing held once the group cannot be complete", lambda: held_gpus(q) == 0, 60)
    clean(kc, q, [ok])
