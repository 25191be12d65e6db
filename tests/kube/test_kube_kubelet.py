"""End to end on a real node: kube-apiserver + kube-scheduler + kubelet v1.20.2, containerd and runc, quasched
serve as the extender and ``quasched device-plugin`` advertising 4 fake GPUs (tests/kube_node.py).

Whole-GPU and shared-GPU pods go through kube-scheduler and quasched; the kubelet admits every one (its count of
``quasched.io/gpu-shares`` agrees with quasched's), each container starts and writes the ``NVIDIA_VISIBLE_DEVICES``
and ``CUDA_VISIBLE_DEVICES`` it was given to its termination message, and those are exactly the UUIDs of the
devices quasched booked for that pod. A pod placed on the node without quasched's bind is refused at admission
with the device plugin's reason. A pod of higher priority preempts: quasched evicts the pod holding the GPUs, whose
container gets SIGTERM and ends by its own handler within its grace period, and the preemptor's container then sees
exactly its booked GPUs. Skipped, with the reason, when the binaries, containerd, runc, busybox-static
or root are missing; under ``QUASCHED_K8S_E2E=require`` (CI) that is an error instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import kube_cluster
import kube_node
import pytest
from kube_cluster import DEVICES, GPU, KubeCluster, Quasched, pod_manifest, wait_for

MODE = os.environ.get("QUASCHED_K8S_E2E", "auto")
REASON = "QUASCHED_K8S_E2E=off" if MODE == "off" else (kube_cluster.missing() or kube_node.missing())
if REASON and MODE == "require":
    raise RuntimeError(f"QUASCHED_K8S_E2E=require but {REASON}")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=REASON or "")]  # a real kubelet

NODE, GPUS, MODEL = "kubelet-gpu-0", 4, "T4"
#: (name, gpu-shares): three whole GPUs first, then two shares of the fourth
WHOLE = [("whole-two", 200), ("whole-one", 100)]
SHARED = [("half", 50), ("quarter", 25)]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeCluster, Quasched, kube_node.KubeletNode]]:
    base = tmp_path_factory.mktemp("kubelet-e2e")
    q = Quasched(base / "quasched", None)
    with KubeCluster(base / "k8s", q.verbs_url) as kc:
        q.attach(kc)
        with kube_node.KubeletNode(kc, base / "node", NODE, GPUS, MODEL) as kn:
            q.start()
            try:
                q.ensure_queue("default")
                wait_for("quasched sees the kubelet's node with its GPUs", lambda: any(
                    n["name"] == NODE and n["num_gpus"] == GPUS for n in q.nodes()), 60, q.proc, q.log)
                yield kc, q, kn
            finally:
                q.stop()


def container_pod(name: str, shares: int) -> dict[str, Any]:
    """A host-network busybox pod that writes the devices it sees to its termination message."""
    manifest = pod_manifest(name, fraction=shares / 100, cpu_milli=50, memory_mib=16)
    manifest["spec"].update(hostNetwork=True, restartPolicy="Never")
    manifest["spec"]["containers"][0].update(
        image=kube_node.IMAGE, imagePullPolicy="Never",
        command=["/bin/sh", "-c", 'echo "$NVIDIA_VISIBLE_DEVICES;$CUDA_VISIBLE_DEVICES" > /dev/termination-log'])
    return manifest


def finished(kc: KubeCluster, names: list[str], kn: kube_node.KubeletNode) -> dict[str, dict[str, Any]]:
    def done() -> dict[str, dict[str, Any]] | None:
        pods = kc.pods()
        ended = {n: pods[n] for n in names if (pods[n].get("status") or {}).get("phase") in ("Succeeded", "Failed")}
        return ended if len(ended) == len(names) else None
    try:
        return dict(wait_for("pods finished", done, 120, interval_s=0.5))
    except TimeoutError as err:
        raise TimeoutError(f"{err}{kn.log_tail('kubelet')}{kn.log_tail('device-plugin')}") from None


def booked_by_quasched(q: Quasched) -> dict[str, tuple[str, list[int]]]:
    """Job name -> (node, devices) of quasched's ``started`` events (the pods have ended since)."""
    names = {j["id"]: j["name"] for j in q.jobs()}
    r = q.client.get("/api/v1/events", params={"limit": 1000})
    r.raise_for_status()
    return {names[e["job_id"]]: (e["node"], [d for ds in e["data"]["devices"] for d in ds])
            for e in r.json() if e["kind"] == "started" and e["job_id"] in names}


def seen(pod: dict[str, Any]) -> str:
    [status] = pod["status"]["containerStatuses"]
    return str(status["state"]["terminated"].get("message") or "").strip()


def test_containers_see_exactly_the_devices_quasched_booked(node) -> None:
    kc, q, kn = node
    uuids = kn.gpu_uuids()
    for batch in (WHOLE, SHARED):  # whole GPUs first: the shares then go to the one device left
        for name, shares in batch:
            kc.create_pod(container_pod(name, shares))
        kc.wait_bound([n for n, _ in batch], timeout_s=60)
    names = [n for n, _ in WHOLE + SHARED]
    pods = finished(kc, names, kn)
    rejected = {n: (p["status"].get("reason"), p["status"].get("message")) for n, p in pods.items()
                if p["status"]["phase"] != "Succeeded"}
    assert rejected == {}, f"{rejected}{kn.log_tail('device-plugin')}"
    booked = booked_by_quasched(q)
    for name, shares in WHOLE + SHARED:
        pod = pods[name]
        node_name, devices = booked[f"default/{name}"]
        assert (pod["spec"]["nodeName"], pod["metadata"]["annotations"][DEVICES]) == (
            node_name, ",".join(map(str, devices))) and node_name == NODE
        assert len(devices) == max(1, shares // 100)
        visible = ",".join(uuids[d] for d in devices)
        assert seen(pod) == f"{visible};{visible}", name
        assert pod["metadata"]["annotations"]["quasched.io/assigned"] == "true"
    # the two shares hold the one GPU the whole pods left
    whole = {d for n, _ in WHOLE for d in booked[f"default/{n}"][1]}
    assert len(whole) == 3 and {booked[f"default/{n}"][1][0] for n, _ in SHARED} == set(range(GPUS)) - whole


def test_a_pod_quasched_did_not_bind_is_refused_at_admission(node) -> None:
    """Bound by hand (no quasched.io annotations): Allocate finds no pod waiting for its shares and the
    kubelet fails the pod's admission with the plugin's reason (what an operator sees in kubectl describe)."""
    kc, _, kn = node
    manifest = container_pod("bypass", 100)
    manifest["spec"]["nodeName"] = NODE
    manifest["spec"]["schedulerName"] = "default-scheduler"
    kc.create_pod(manifest)
    pod = finished(kc, ["bypass"], kn)["bypass"]
    assert pod["status"]["phase"] == "Failed" and pod["status"]["reason"] == "UnexpectedAdmissionError"
    assert "quasched device plugin: no pod on this node waits for 100 shares" in pod["status"]["message"]
    assert GPU in pod["spec"]["containers"][0]["resources"]["limits"]


def priority_class(kc: KubeCluster, name: str, value: int) -> None:
    r = kc.api.post("/apis/scheduling.k8s.io/v1/priorityclasses",
                    json={"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                          "value": value})
    assert r.status_code in (201, 409), r.text


def test_a_higher_priority_pod_preempts_the_victim_stops_on_sigterm_and_the_preemptor_sees_its_gpus(
        node, tmp_path: Path) -> None:
    kc, q, kn = node
    priority_class(kc, "batch-low", 0)
    priority_class(kc, "urgent-high", 1000)
    marks = tmp_path / "marks"
    marks.mkdir()
    victim = container_pod("victim", 100 * GPUS)  # every GPU of the node
    victim["spec"].update(priorityClassName="batch-low", terminationGracePeriodSeconds=30,
                          volumes=[{"name": "marks", "hostPath": {"path": str(marks)}}])
    container = victim["spec"]["containers"][0]
    container["volumeMounts"] = [{"name": "marks", "mountPath": "/marks"}]
    container["command"] = ["/bin/sh", "-c", "trap 'echo TERM > /marks/victim; exit 0' TERM; echo up > /marks/up; "
                            "while true; do sleep 0.2; done"]
    kc.create_pod(victim)
    kc.wait_bound(["victim"], timeout_s=60)
    wait_for("the victim's container runs", lambda: (marks / "up").exists(), 60)
    urgent = container_pod("urgent", 100 * GPUS)
    urgent["spec"]["priorityClassName"] = "urgent-high"
    kc.create_pod(urgent)
    wait_for("the victim's container got SIGTERM", lambda: (marks / "victim").exists(), 60)
    assert (marks / "victim").read_text().strip() == "TERM"  # ended by its own handler: before any SIGKILL
    pod = finished(kc, ["urgent"], kn)["urgent"]
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    booked = booked_by_quasched(q)
    node_name, devices = booked["default/urgent"]
    assert node_name == NODE and sorted(devices) == list(range(GPUS))
    visible = ",".join(kn.gpu_uuids()[d] for d in devices)
    assert seen(pod) == f"{visible};{visible}"
    jobs = {j["name"]: j for j in q.jobs()}
    # its container exited 0 (its handler), but it was preempted: so its job says
    assert jobs["default/victim"]["state"] == "cancelled" and jobs["default/victim"]["reason"]["code"] == "Preempted"
    r = q.client.get("/api/v1/events", params={"limit": 1000})
    preempting = [e for e in r.json() if e["kind"] == "preempting" and e["job_id"] == jobs["default/victim"]["id"]]
    assert [e["data"]["by"] for e in preempting] == ["pod default/urgent"]
    assert preempting[0]["data"]["grace_s"] == 30
    left = kc.pods().get("victim")
    assert left is None or left["metadata"].get("deletionTimestamp")  # evicted: deleted (once the kubelet cleaned up)
