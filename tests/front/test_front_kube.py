"""A Kubernetes member's pieces without a cluster: the pod built from a front job (fields checked by hand, and read
back by the extender's own convention), a pod's and a gang's state, the nodes' use, the members file's kubernetes
entries. tests/front/test_front_kube_e2e.py runs them against a real API server, kube-scheduler and quasched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from quasched.front.front import job_body
from quasched.front.kubemember import (GONE, JOB_LABEL, TOKEN_ANNOTATION, KubeMember, gang_state, gpu_shares,
                                       node_entries, pod_manifests, pod_name, pod_state, ref_of)
from quasched.front.members import KubeMemberConfig, MemberConfig, MemberError, read_members
from quasched.kube.convention import pod_gpu
from quasched.kube.gangs import GROUP_LABEL, group_of
from quasched.service.runtime.schemas import JobSubmit

T = "2024-05-01T12:00:00Z"
T_S = 1714564800.0


def config(**kw: Any) -> KubeMemberConfig:
    fields: dict[str, Any] = {"name": "west", "kind": "kubernetes", "kubeconfig": "/etc/kubeconfig", "zone": "FR",
                              "namespace": "gpu-jobs", "image": "registry.example/train:1.4"}
    return KubeMemberConfig.model_validate({**fields, **kw})


def spec(**kw: Any) -> Any:
    body = {"name": "train", "team": "vision", "cpu": 4, "memory": "16GiB", "gpus": 2, "gpu_model": "A100|H100",
            "command": ["python", "train.py"], "env": {"LR": "3e-4"}, "workdir": "/work", "time_limit": "2h"}
    body.update(kw)
    return JobSubmit.model_validate({k: v for k, v in body.items() if v is not None}).to_spec()


def plain(**kw: Any) -> Any:
    """A job without a command, of ``duration``."""
    return spec(command=None, env=None, workdir=None, time_limit=None, duration=600, **kw)


def test_a_front_job_becomes_one_pod_for_quasched() -> None:
    name, [pod], group = pod_manifests(spec(), "front-12", config(pod_spec={
        "tolerations": [{"key": "gpu", "operator": "Exists"}], "restartPolicy": "Always", "schedulerName": "x"}))
    assert group is None and name == pod_name("front-12") and name.startswith("front-12-") and len(name) == 19
    meta, pod_spec = pod["metadata"], pod["spec"]
    assert (meta["name"], meta["namespace"], meta["labels"]) == (name, "gpu-jobs", {JOB_LABEL: name})
    assert meta["annotations"] == {TOKEN_ANNOTATION: "front-12", "front.quasched.io/name": "train",
                                   "quasched.io/queue": "vision", "quasched.io/gpu-model": "A100|H100"}
    # the front's fields win over the member's pod_spec; the rest of it is kept
    assert (pod_spec["schedulerName"], pod_spec["restartPolicy"], pod_spec["activeDeadlineSeconds"]) == (
        "quasched", "Never", 7200)
    assert pod_spec["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    [container] = pod_spec["containers"]
    assert container == {"name": "main", "image": "registry.example/train:1.4", "command": ["python", "train.py"],
                         "env": [{"name": "LR", "value": "3e-4"}], "workingDir": "/work",
                         "resources": {"requests": {"cpu": "4000m", "memory": "16384Mi",
                                                    "quasched.io/gpu-shares": "200"},
                                       "limits": {"quasched.io/gpu-shares": "200"}}}
    # what the extender reads of it is the job
    want = pod_gpu(pod)
    assert (want.num_gpu, want.gpu_milli, want.gpu_model, want.cpu_milli, want.memory_mib, want.queue) == (
        2, 1000, "A100|H100", 4000, 16384, "vision")


def test_shares_a_cpu_job_and_the_image_entrypoint() -> None:
    assert [gpu_shares(1, m) for m in (1000, 500, 250, 333, 1, 999)] == [100, 50, 25, 34, 1, 99]
    assert gpu_shares(4, 1000) == 400 and gpu_shares(0, 0) == 0
    _, [pod], _ = pod_manifests(plain(gpus=0.5, gpu_model=""), "f-1", config())
    container = pod["spec"]["containers"][0]
    assert "command" not in container and "activeDeadlineSeconds" not in pod["spec"]  # the image's own entrypoint
    assert container["resources"]["limits"] == {"quasched.io/gpu-shares": "50"}
    assert "quasched.io/gpu-model" not in pod["metadata"]["annotations"]
    assert (pod_gpu(pod).num_gpu, pod_gpu(pod).gpu_milli) == (1, 500)
    _, [cpu_pod], _ = pod_manifests(plain(gpus=0),
                                    "f-2", config())
    assert "limits" not in cpu_pod["spec"]["containers"][0]["resources"]
    assert "quasched.io/gpu-model" not in cpu_pod["metadata"]["annotations"]


def test_names_are_valid_and_distinct() -> None:
    assert pod_name("Front_A-12") != pod_name("front-a-12")  # folded alike, told apart by the digest
    long = pod_name("x" * 128)
    assert len(long) <= 51 and long[0].isalnum()
    assert pod_name("___").startswith("job-")


def test_a_gang_is_pods_and_a_podgroup() -> None:
    name, pods, group = pod_manifests(plain(pods=3, gpus=8), "front-7", config())
    assert group is not None and group["kind"] == "PodGroup" and group["spec"] == {"minMember": 3}
    assert group["metadata"]["name"] == name and group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert [p["metadata"]["name"] for p in pods] == [f"{name}-{i}" for i in range(3)]
    for pod in pods:
        assert pod["metadata"]["labels"] == {JOB_LABEL: name, GROUP_LABEL: name}
        ref = group_of(pod)
        assert ref is not None and (ref.namespace, ref.name, ref.convention) == ("gpu-jobs", name, "coscheduling")
        assert ref_of(pod) == f"gpu-jobs/{name}[3]"


def pod(phase: str | None, deleting: bool = False, started: str | None = None, ended: dict[str, Any] | None = None,
        node: str | None = None, **status: Any) -> dict[str, Any]:
    state: dict[str, Any] = {}
    if started and not ended:
        state["running"] = {"startedAt": started}
    if ended:
        state["terminated"] = ended
    meta: dict[str, Any] = {"name": "p", "namespace": "gpu-jobs"}
    if deleting:
        meta["deletionTimestamp"] = T
    out: dict[str, Any] = {"metadata": meta, "spec": {"nodeName": node} if node else {},
                           "status": {**({"phase": phase} if phase else {}), **status}}
    if state:
        out["status"]["containerStatuses"] = [{"name": "main", "state": state}]
    return out


def test_a_pods_phase_is_the_jobs_state() -> None:
    def brief(p: dict[str, Any]) -> tuple[Any, ...]:
        s = pod_state(p)
        return s["state"], s["started_at"], s["finished_at"], s["exit"]

    assert brief(pod(None)) == ("pending", None, None, None)  # just created
    assert brief(pod("Pending", node="n1")) == ("pending", None, None, None)  # bound, not started: not running
    assert pod_state(pod("Pending", node="n1"))["node"] == "n1"
    assert brief(pod("Running", started=T)) == ("running", T_S, None, None)
    assert brief(pod("Running", startTime=T)) == ("running", T_S, None, None)  # no container status yet
    done = {"exitCode": 0, "startedAt": T, "finishedAt": "2024-05-01T13:00:00Z", "reason": "Completed"}
    assert brief(pod("Succeeded", ended=done)) == ("succeeded", T_S, T_S + 3600, 0)
    assert brief(pod("Failed", ended={**done, "exitCode": 3, "reason": "Error"})) == ("failed", T_S, T_S + 3600, 3)
    refused = pod("Failed", reason="UnexpectedAdmissionError", startTime=T)  # the kubelet refused it
    assert brief(refused) == ("failed", T_S, None, None) and pod_state(refused)["reason"] == "UnexpectedAdmissionError"
    assert brief(pod("Running", deleting=True, started=T)) == ("stopping", T_S, None, None)  # its grace period
    assert brief(pod("Pending", deleting=True)) == ("cancelled", None, None, None)
    assert brief(pod("Succeeded", deleting=True, ended=done))[0] == "succeeded"  # it ended before the delete
    assert brief(pod("Unknown", started=T))[0] == "running"
    assert GONE["state"] == "cancelled"


def test_a_gangs_state() -> None:
    done = {"exitCode": 0, "startedAt": T, "finishedAt": "2024-05-01T13:00:00Z"}
    later = "2024-05-01T12:00:10Z"
    running = [pod("Running", started=T), pod("Running", started=later)]
    assert (gang_state(running, 2)["state"], gang_state(running, 2)["started_at"]) == ("running", T_S + 10)
    assert gang_state([pod("Running", started=T), pod("Pending")], 2)["state"] == "pending"
    assert gang_state([pod("Succeeded", ended=done)] * 2, 2)["state"] == "succeeded"
    assert gang_state([pod("Succeeded", ended=done)] * 2, 2)["exit"] == 0
    failed = gang_state([pod("Succeeded", ended=done), pod("Failed", ended={**done, "exitCode": 2})], 2)
    assert (failed["state"], failed["exit"], failed["finished_at"]) == ("failed", 2, T_S + 3600)
    assert gang_state(running[:1], 2)["state"] == "cancelled"  # one of its pods is gone
    assert gang_state([], 2)["state"] == "cancelled"


def node(name: str, gpus: int, model: str = "A100", ready: str = "True", **spec: Any) -> dict[str, Any]:
    capacity = {"cpu": "64", "memory": "256Gi", "quasched.io/gpu-shares": str(100 * gpus)}
    return {"metadata": {"name": name, "labels": {"quasched.io/gpu-model": model}}, "spec": spec,
            "status": {"capacity": capacity, "allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": ready}]}}


def bound(name: str, on: str, shares: int, devices: str | None, namespace: str = "team", **meta: Any) -> dict[str, Any]:
    annotations = {"quasched.io/gpu-devices": devices} if devices else {}
    resources = {"requests": {"cpu": "2", "memory": "1Gi"}}
    if shares:
        resources["limits"] = {"quasched.io/gpu-shares": str(shares)}
    return {"metadata": {"name": name, "namespace": namespace, "annotations": {**annotations, **meta.pop("ann", {})},
                         "labels": meta.pop("labels", {})},
            "spec": {"nodeName": on, "containers": [{"name": "main", "resources": resources}]},
            "status": {"phase": meta.pop("phase", "Running")}}


def test_nodes_carry_the_use_of_their_bound_pods() -> None:
    nodes = [node("a", 4), node("b", 2, taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]),
             node("c", 0, ready="False"), node("d", 2, taints=[{"key": "other", "effect": "NoSchedule"}]),
             {"metadata": {}}]
    pods = [bound("whole", "a", 200, "0,2"), bound("half", "a", 50, "1"), bound("quarter", "a", 25, "1"),
            bound("plain", "a", 0, None), bound("ended", "a", 100, "3", phase="Succeeded"),
            bound("mine", "b", 100, "1", namespace="gpu-jobs", labels={JOB_LABEL: "front-3-x"}),
            bound("g-0", "b", 100, "0", namespace="gpu-jobs", labels={JOB_LABEL: "g"},
                  ann={"front.quasched.io/pods": "2"})]
    listed = node_entries(nodes[::-1], pods, [{"key": "gpu", "operator": "Equal", "value": "yes"}])
    assert [e["name"] for e in listed] == ["a", "b", "c", "d"]  # by name; the node without a name is left out
    entries = {e["name"]: e for e in listed}
    a = entries["a"]
    assert (a["num_gpus"], a["gpu_model"], a["gpu_used_milli"], a["gpu_healthy"]) == (
        4, "A100", [1000, 750, 1000, 0], [True] * 4)
    assert (a["cpu_milli"], a["cpu_used_milli"], a["memory_mib"], a["memory_used_mib"]) == (64000, 8000, 262144, 4096)
    assert a["jobs"] == ["team/half", "team/plain", "team/quarter", "team/whole"] and not a["cordoned"]
    assert entries["b"]["jobs"] == ["gpu-jobs/front-3-x", "gpu-jobs/g[2]"] and not entries["b"]["cordoned"]
    assert entries["c"]["cordoned"] and entries["d"]["cordoned"]  # not Ready; a taint the pods do not tolerate


class Recorded:
    """Answers :meth:`KubeMember` calls from a dict of (method, path) -> reply (tests what it asks, not HTTP)."""

    def __init__(self, replies: dict[tuple[str, str], Any]) -> None:
        self.replies, self.calls = replies, []

    def request(self, method: str, path: str, body: Any = None, params: Any = None, timeout_s: Any = None) -> Any:
        self.calls.append((method, path))
        reply = self.replies[(method, path)]
        if isinstance(reply, Exception):
            raise reply
        return reply


def test_a_repeat_reads_the_pod_back_and_a_stranger_is_refused() -> None:
    from quasched.kube.client import ApiError

    member_config = config()
    body = job_body(spec(), "front-9")
    name = pod_name("front-9")
    path = "/api/v1/namespaces/gpu-jobs/pods"
    existing = {"metadata": {"name": name, "annotations": {TOKEN_ANNOTATION: "front-9"}},
                "status": {"phase": "Running"}}
    api = Recorded({("POST", path): ApiError(409, "exists"), ("GET", f"{path}/{name}"): existing})
    answer = KubeMember(member_config, api).submit(body)
    assert (answer["id"], answer["state"]) == (f"gpu-jobs/{name}", "running")
    assert api.calls == [("POST", path), ("GET", f"{path}/{name}")]
    existing["metadata"]["annotations"][TOKEN_ANNOTATION] = "other-1"
    with pytest.raises(MemberError, match="exists and is not the front's job 'front-9'"):
        KubeMember(member_config, api).submit(body)
    with pytest.raises(MemberError, match="not one of its jobs"):
        KubeMember(member_config, api).job("default/" + name)
    gone = Recorded({("GET", f"{path}/{name}"): ApiError(404, "not found")})
    assert KubeMember(member_config, gone).job(f"gpu-jobs/{name}")["state"] == "cancelled"


def test_the_members_file_checks_a_kubernetes_member(tmp_path: Path) -> None:
    good = tmp_path / "members.toml"
    good.write_text('[[member]]\nname = "north"\nurl = "https://127.0.0.1:8443"\nzone = "SE"\ntoken_file = "/t"\n'
                    '[[member]]\nname = "west"\nkind = "kubernetes"\nkubeconfig = "/k"\nzone = "FR"\n'
                    'image = "busybox:1"\npod_spec = { hostNetwork = true }\n')
    north, west = read_members(good)
    assert isinstance(north, MemberConfig) and north.kind == "serve"
    assert isinstance(west, KubeMemberConfig) and (west.namespace, west.scheduler_name, west.pod_spec) == (
        "default", "quasched", {"hostNetwork": True})
    cases = {'image = "busybox:1"\n': r"member 2 \(west\): image: Field required \(a kubernetes member\)",
             'zone = "FR"\n': r"member 2 \(west\): zone: Field required",
             'kind = "kubernetes"\n': r"member 2 \(west\): url: Field required \(a serve member\)"}
    for drop, message in cases.items():
        bad = tmp_path / "bad.toml"
        bad.write_text(good.read_text().replace(drop, ""))
        with pytest.raises(ValueError, match=message):
            read_members(bad)
    for swap, message in (('kind = "kubernetes"', "member 2 \\(west\\): kind: 'serve' or 'kubernetes', not 'k8s'"),
                          ('kubeconfig = "/k"', r"member 2 \(west\): url: Extra inputs .* \(a kubernetes member\)"),
                          ('image = "busybox:1"', r"member 2 \(west\): namespace: String should match")):
        replacement = {'kind = "kubernetes"': 'kind = "k8s"',
                       'kubeconfig = "/k"': 'kubeconfig = "/k"\nurl = "http://x"',
                       'image = "busybox:1"': 'image = "busybox:1"\nnamespace = "Not_A_Label"'}[swap]
        bad = tmp_path / "bad.toml"
        bad.write_text(good.read_text().replace(swap, replacement))
        with pytest.raises(ValueError, match=message):
            read_members(bad)
    with pytest.raises(ValueError, match="member west: kubeconfig /k: no such file"):
        KubeMember(west)


def test_a_jobs_output_is_its_pods_log() -> None:
    from quasched.kube.client import ApiError

    name = pod_name("front-9")
    path = "/api/v1/namespaces/gpu-jobs/pods"
    api = Recorded({("GET", f"{path}/{name}"): {"metadata": {"name": name}, "status": {"phase": "Running"}}})
    asked: list[tuple[str, str, Any]] = []

    def pod_log(namespace: str, pod: str, tail: Any = None, timeout_s: Any = None) -> str:
        asked.append((namespace, pod, tail))
        if pod != name:
            raise ApiError(404, "not found")
        return "epoch 1 loss 0.3\n"

    api.pod_log = pod_log  # type: ignore[attr-defined]
    member = KubeMember(config(), api)
    assert member.logs(f"gpu-jobs/{name}", 50) == "epoch 1 loss 0.3\n" and asked == [("gpu-jobs", name, 50)]
    gone = Recorded({("GET", f"{path}/{name}"): ApiError(404, "not found")})
    with pytest.raises(MemberError, match="has no pod left"):
        KubeMember(config(), gone).logs(f"gpu-jobs/{name}", 50)
