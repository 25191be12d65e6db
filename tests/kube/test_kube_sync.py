"""The pod/node convention and the cluster sync: pure functions on recorded API objects, then the
sync applied to a real app and store through a fake API client (restart: nothing double-booked)."""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from pathlib import Path
from typing import Any, Mapping

import pytest
from api_support import bearer, make_app
from extra import requires
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings, strategies as st
from repo import TESTS
from test_kube_extender import API_PODS, FakeApi, args, bind_args, fresh_api_pods, gpu_pod, post  # noqa: F401

from quasched.kube.convention import (PodError, devices_of, is_managed, job_spec, mebibytes, milli, node_record,
                                      pod_gpu, quantity, token_uid)
from quasched.kube.extender import KubeOptions
from quasched.kube.sync import Sync, bound_pod, node_changes, pod_changes
from quasched.service.domain import Job, JobState, NodeRecord
from quasched.service.loop.controller import nodes_of

FIXTURES = TESTS / "fixtures" / "kube"


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


# ---------------------------------------------------------------- quantities
@pytest.mark.parametrize("text, value", [
    ("500m", Decimal("0.5")), ("2", Decimal(2)), ("1.5", Decimal("1.5")), ("16Gi", Decimal(16 << 30)),
    ("1G", Decimal(10**9)), ("128974848", Decimal(128974848)), ("129e6", Decimal(129 * 10**6)),
    ("123Mi", Decimal(123 << 20)), ("1k", Decimal(1000)), ("1Ki", Decimal(1024)), ("100u", Decimal("0.0001")),
    ("5n", Decimal("5e-9")), (3, Decimal(3)), (0.25, Decimal("0.25")), (" 4 ", Decimal(4)),
])
def test_quantities(text, value):
    assert quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1Zi", "-1", "1.2.3", None, True, float("nan"), "Gi", [1]])
def test_bad_quantities(text):
    with pytest.raises(PodError):
        quantity(text)


def test_units():
    assert milli("500m") == 500 and milli("2") == 2000 and milli("0.1") == 100 and milli("1u") == 1
    assert mebibytes("16Gi") == 16384 and mebibytes("1G") == 954 and mebibytes("1") == 1 and mebibytes(0) == 0


# ---------------------------------------------------------------- pods
def test_fraction_pod_fixture():
    pod = fixture("pod-fraction-pending")
    want = pod_gpu(pod)
    assert (want.num_gpu, want.gpu_milli, want.gpu_model, want.queue) == (1, 500, "NVIDIA-A100-SXM4-80GB", "default")
    assert want.cpu_milli == 2250  # containers 2 + 250m; the init container's 1 is smaller
    assert want.memory_mib == 8 * 1024 + 64  # requests, not the limit
    spec = job_spec(pod, attempt="7")
    assert spec.name == "vision/notebook-7f9c" and spec.user == "vision"
    assert token_uid(spec.client_token) == "c0ffee00-0000-4000-8000-000000000001"
    assert bound_pod(pod) is None  # pending: not bound


def test_whole_gpu_bound_fixture():
    pod = fixture("pod-whole-bound")
    want = pod_gpu(pod)
    assert (want.num_gpu, want.gpu_milli, want.gpu_model) == (2, 1000, "NVIDIA-A100-SXM4-80GB")
    assert (want.cpu_milli, want.memory_mib) == (16000, 128 * 1024)
    bound = bound_pod(pod)
    assert bound is not None and (bound.node, bound.devices) == ("gpu-a0", (2, 3))


def test_init_container_counts_when_larger():
    pod = gpu_pod(cpu="1")
    pod["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}}]
    assert pod_gpu(pod).cpu_milli == 3000 and pod_gpu(pod).memory_mib == 8192


def test_limits_stand_for_missing_requests():
    pod = {"spec": {"containers": [{"resources": {"limits": {"quasched.io/gpu-shares": 100, "cpu": "4", "memory": "2Gi"}}}]}}
    want = pod_gpu(pod)
    assert (want.cpu_milli, want.memory_mib, want.num_gpu) == (4000, 2048, 1)


def test_unmanaged_and_finished_pods():
    assert not is_managed(fixture("pod-cpu-only")) and bound_pod(fixture("pod-cpu-only")) is None
    assert bound_pod(fixture("pod-succeeded")) is None
    assert is_managed(fixture("pod-succeeded"))


@pytest.mark.parametrize("annotation, devices", [("0,1", (0, 1)), ("3", (3,)), ("", None), ("a", None),
                                                 ("-1", None), (None, None)])
def test_device_annotation(annotation, devices):
    pod = gpu_pod()
    if annotation is not None:
        pod["metadata"]["annotations"]["quasched.io/gpu-devices"] = annotation
    assert devices_of(pod) == devices


# ---------------------------------------------------------------- nodes
def test_node_gpus_are_shares_capacity_over_100():
    """GPUs = capacity / 100 (an unhealthy device lowers allocatable, not the devices' indices); nvidia.com/gpu
    alone is not quasched's: no GPU."""
    node = copy.deepcopy(fixture("node-a100"))
    node["status"]["allocatable"]["quasched.io/gpu-shares"] = "700"
    assert node_record(node).num_gpus == 8
    del node["status"]["capacity"]["quasched.io/gpu-shares"], node["status"]["allocatable"]["quasched.io/gpu-shares"]
    node["status"]["capacity"]["nvidia.com/gpu"] = "8"
    assert node_record(node).num_gpus == 0


def test_node_fixtures():
    a = node_record(fixture("node-a100"))
    assert (a.name, a.cpu_milli, a.memory_mib, a.num_gpus, a.gpu_model, a.cordoned) == (
        "gpu-a0", 127500, 1055410444 // 1024, 8, "NVIDIA-A100-SXM4-80GB", False)
    assert a.labels["kubernetes.io/hostname"] == "gpu-a0"
    t = node_record(fixture("node-t4-cordoned"))
    assert (t.num_gpus, t.gpu_model, t.cordoned, t.memory_mib) == (2, "T4", True, 128 * 1024)  # quasched label wins
    c = node_record(fixture("node-cpu-notready"))
    assert (c.num_gpus, c.gpu_model, c.cordoned, c.cpu_milli) == (0, "", True, 63000)  # Ready=Unknown: cordoned


def test_node_changes():
    objs = [fixture("node-a100"), fixture("node-t4-cordoned")]
    first = node_changes(objs, {})
    assert [r.name for r in first.add] == ["gpu-a0", "gpu-t0"] and not first.update and not first.remove
    known = {r.name: r for r in first.add}
    known["old"] = NodeRecord("old", 1000, 1000)
    assert node_changes(objs, known).remove == ["old"]
    assert node_changes(objs, known, complete=False).remove == []
    uncordoned = copy.deepcopy(objs[1])
    uncordoned["spec"]["unschedulable"] = False
    known["gpu-t0"] = NodeRecord(**{**vars(known["gpu-t0"]), "unhealthy": (1,)})
    changes = node_changes([objs[0], uncordoned], known)
    assert [(r.name, r.cordoned, r.unhealthy) for r in changes.update] == [("gpu-t0", False, (1,))]
    assert node_changes([{"metadata": {}}, {"metadata": {"name": "x"}, "status": {"allocatable": {"cpu": "bad"}}}],
                        {}).add == []


@pytest.mark.parametrize("resource, amount", [("quasched.io/gpu-shares", "6500"), ("quasched.io/gpu-shares", "1e9"),
                                              ("cpu", "1e20"), ("memory", "1e30")])
def test_a_node_beyond_the_limits_is_named_not_registered(resource, amount):
    # 1e9 GPUs would have grown the cluster's nodes x GPUs matrix until memory ran out
    node = copy.deepcopy(fixture("node-a100"))
    node["status"]["allocatable"][resource] = node["status"]["capacity"][resource] = amount
    with pytest.raises(PodError, match="node gpu-a0: more than 64 GPUs, or CPU or memory out of range"):
        node_record(node)


# ---------------------------------------------------------------- pods vs jobs
def job_for(uid: str, node: str, state: JobState = JobState.RUNNING) -> Job:
    spec = job_spec(gpu_pod(uid=uid))
    return Job(1, spec, 100, 0.0, 1, state=state, placement=[(node, (0,))])


def test_pod_changes():
    bound, done = fixture("pod-whole-bound"), fixture("pod-succeeded")
    uid_bound, uid_done = bound["metadata"]["uid"], done["metadata"]["uid"]
    adopt = pod_changes([bound, done, fixture("pod-cpu-only")], {})
    assert [b.uid for b in adopt.adopt] == [uid_bound] and adopt.end == []
    jobs = {uid_bound: job_for(uid_bound, "gpu-a0"), uid_done: job_for(uid_done, "gpu-a0"),
            "vanished": job_for("vanished", "gpu-a0")}
    changes = pod_changes([bound, done], jobs)
    assert changes.adopt == [] and sorted(changes.end) == [(uid_done, "succeeded"), ("vanished", "cancelled")]
    assert pod_changes([bound, done], jobs, complete=False).end == [(uid_done, "succeeded")]
    moved = pod_changes([bound], {uid_bound: job_for(uid_bound, "elsewhere")})
    assert moved.end == [(uid_bound, "cancelled")] and [b.node for b in moved.adopt] == ["gpu-a0"]
    unbound = gpu_pod(uid="in-flight")
    assert pod_changes([unbound], {"in-flight": job_for("in-flight", "a0")}).end == []
    stale = job_for("in-flight", "a0", JobState.PENDING)  # never legitimate: the loop must not place it
    assert pod_changes([unbound], {"in-flight": stale}).end == [("in-flight", "cancelled")]


# ---------------------------------------------------------------- the sync on a real app
class ClusterApi(FakeApi):
    """A fake API server holding node and pod objects."""

    def __init__(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        super().__init__()
        self.nodes, self.bound = nodes, pods

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        return copy.deepcopy(self.nodes), "1"

    def list_pods(self) -> tuple[list[dict[str, Any]], str]:
        return copy.deepcopy(self.bound), "1"

    def watch_nodes(self, resource_version: str, timeout_s: float) -> Any:
        return iter(())

    def watch_pods(self, resource_version: str, timeout_s: float) -> Any:
        return iter(())

    def bind_pod(self, namespace: str, name: str, uid: str, node: str,
                 annotations: Mapping[str, str] | None = None) -> None:
        super().bind_pod(namespace, name, uid, node, annotations)
        for pod in self.pending:
            if pod["metadata"]["uid"] == uid:
                pod = copy.deepcopy(pod)
                pod["spec"]["nodeName"] = node
                pod["status"]["phase"] = "Running"
                pod["metadata"]["annotations"].update(annotations or {})
                self.bound.append(pod)

    pending: list[dict[str, Any]] = []
    annotations: dict[str, dict[str, str]] = {}


def k8s_node(name: str, gpus: int, model: str, cordoned: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": model}},
            "spec": {"unschedulable": cordoned},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "quasched.io/gpu-shares": str(100 * gpus)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def running(pod: dict[str, Any], node: str, devices: str | None) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["spec"]["nodeName"] = node
    pod["status"]["phase"] = "Running"
    if devices is not None:
        pod["metadata"]["annotations"]["quasched.io/gpu-devices"] = devices
    return pod


def sync_app(tmp_path: Path, api: ClusterApi) -> Any:
    app, _ = make_app(tmp_path, cluster=nodes_of([]), kube=KubeOptions(client=api, sync=True))
    return app


def uses(client: TestClient, token: str) -> dict[str, list[int]]:
    return {n["name"]: n["gpu_used_milli"] for n in client.get("/api/v1/nodes", headers=bearer(token)).json()}


def test_sync_registers_nodes_and_adopts_running_pods(tmp_path):
    api = ClusterApi([k8s_node("n0", 4, "A100"), k8s_node("n1", 2, "T4", cordoned=True)],
                     [running(gpu_pod(name="a", gpus=2), "n0", "1,2"),
                      running(gpu_pod(name="b", gpus=1, fraction="0.5"), "n1", None)])
    app = sync_app(tmp_path, api)
    token = (tmp_path / "quasched.token").read_text().strip()
    with TestClient(app) as client:
        nodes = {n["name"]: n for n in client.get("/api/v1/nodes", headers=bearer(token)).json()}
        assert set(nodes) == {"n0", "n1"} and nodes["n1"]["cordoned"] and nodes["n0"]["gpu_model"] == "A100"
        assert nodes["n0"]["gpu_used_milli"] == [0, 1000, 1000, 0]  # the annotation's devices
        assert sum(nodes["n1"]["gpu_used_milli"]) == 500  # no annotation: the policy's Reserve picks
        assert post(client, "filter", args(gpu_pod(name="c", gpus=3), names=["n0", "n1"]))["FailedNodes"] == {
            "n0": "quasched: not enough free GPU", "n1": "quasched: node cordoned or unknown"}


def test_sync_after_restart_no_double_booking(tmp_path):
    """Bind through the extender, stop quasched; meanwhile one pod ends and another is bound by someone
    else; the restart's first list reconciles both and the live pod's devices stay taken."""
    api = ClusterApi([k8s_node("n0", 4, "A100")], [])
    first, second = gpu_pod(name="first", gpus=2), gpu_pod(name="second", gpus=1)
    api.pending = [first, second]
    api.annotations = {}
    app = sync_app(tmp_path, api)
    token = (tmp_path / "quasched.token").read_text().strip()
    with TestClient(app) as client:
        for pod in (first, second):
            post(client, "filter", args(pod, names=["n0"]))
            assert post(client, "bind", bind_args(pod, "n0")) == {"Error": ""}
        assert uses(client, token)["n0"] == [1000, 1000, 1000, 0]
    app.state.service.store.close()
    # while quasched is down: "second" succeeds, "third" is bound to n0 device 3 by another replica
    api.bound[1]["status"]["phase"] = "Succeeded"
    api.bound.append(running(gpu_pod(name="third", gpus=1), "n0", "3"))
    again = sync_app(tmp_path, api)
    with TestClient(again) as client:
        assert uses(client, token)["n0"] == [1000, 1000, 0, 1000]
        jobs = {j["name"]: j["state"] for j in client.get("/api/v1/jobs", headers=bearer(token)).json()}
        assert jobs == {"team-a/first": "running", "team-a/second": "succeeded", "team-a/third": "running"}
        reply = post(client, "filter", args(gpu_pod(name="fourth", gpus=2), names=["n0"]))
        assert reply["FailedNodes"] == {"n0": "quasched: not enough free GPU"}


def test_relist_leaves_pods_bound_after_its_snapshot_to_the_watch(tmp_path):
    """A pod bound while a re-list is under way is missing from it: its job stays (the watch that follows the
    list reports the binding). Ending it left a bound pod without a job whose devices went to the next pods."""
    api = ClusterApi([k8s_node("n0", 4, "A100")], [])
    late = gpu_pod(name="late", gpus=2)
    api.pending = [late]
    app = sync_app(tmp_path, api)
    token = (tmp_path / "quasched.token").read_text().strip()
    with TestClient(app) as client:
        snapshot = api.list_pods

        def list_then_bind() -> tuple[list[dict[str, Any]], str]:
            listed = snapshot()  # the API server's answer, then kube-scheduler's bind of "late" lands
            post(client, "filter", args(late, names=["n0"]))
            assert post(client, "bind", bind_args(late, "n0")) == {"Error": ""}
            return listed

        api.list_pods = list_then_bind  # type: ignore[method-assign]
        app.state.kube.sync.relist_pods()
        assert uses(client, token)["n0"] == [1000, 1000, 0, 0]
        assert [j["state"] for j in client.get("/api/v1/jobs", headers=bearer(token)).json()] == ["running"]
        api.list_pods = snapshot  # type: ignore[method-assign]
        app.state.kube.sync.relist_pods()  # the next list shows it bound: nothing changes
        assert uses(client, token)["n0"] == [1000, 1000, 0, 0]
        # a pod whose job is stored and whose Binding is under way when the list starts is left alone too
        slow = gpu_pod(name="slow", gpus=1)
        [node] = post(client, "filter", args(slow, names=["n0"]))["NodeNames"]
        bridge = app.state.kube
        held = bridge.holds[slow["metadata"]["uid"]]
        held.binding, bridge._binding[slow["metadata"]["uid"]] = True, 1  # as bind marks it
        bridge.confirm(held)
        app.state.kube.sync.relist_pods()
        assert uses(client, token)["n0"] == [1000, 1000, 1000, 0]


@pytest.mark.parametrize("held", [False, True])
def test_relist_leaves_a_bind_under_way_to_the_watch(tmp_path, held):
    """A bind books the pod, then posts its Binding; a re-list that starts before the Binding lands does not show
    the pod bound, and must leave its job alone: on the checked path (nothing held), and on the held path when a
    controller rebuilt after a refused write dropped the holds meanwhile. It ended it: a bound pod without a job,
    its devices free for the next pods."""
    from quasched.service.loop.controller import Controller

    api = ClusterApi([k8s_node("n0", 4, "A100")], [])
    pod = gpu_pod(name="direct", gpus=2)
    api.pending = [pod]
    app = sync_app(tmp_path, api)
    token = (tmp_path / "quasched.token").read_text().strip()
    with TestClient(app) as client:
        bind_pod = api.bind_pod
        bridge, service = app.state.kube, app.state.service

        def relist_then_bind(*a: Any, **kw: Any) -> None:
            if held:  # as a reservation the database refused does
                with service.lock:
                    service.ctl = Controller.rebuilt(*service.store.load(), service.options)
                    bridge.holds.clear()
            bridge.sync.relist_pods()  # the list is answered before the Binding lands
            bind_pod(*a, **kw)

        api.bind_pod = relist_then_bind  # type: ignore[method-assign]
        if held:
            assert post(client, "filter", args(pod, names=["n0"]))["NodeNames"] == ["n0"]
        assert post(client, "bind", bind_args(pod, "n0")) == {"Error": ""}
        assert sum(1 for u in uses(client, token)["n0"] if u == 1000) == 2
        assert [j["state"] for j in client.get("/api/v1/jobs", headers=bearer(token)).json()] == ["running"]


def test_a_node_removed_while_pods_are_held_on_it(tmp_path):
    """A node goes away while filter holds a pod on it: the hold ends with the node. It was requeued with the
    node's jobs, placed elsewhere by the loop and refused by the store (it is never stored): the removal failed
    and the controller was rebuilt from the store."""
    api = ClusterApi([k8s_node("n0", 4, "A100"), k8s_node("n1", 4, "A100")], [])
    app = sync_app(tmp_path, api)
    token = (tmp_path / "quasched.token").read_text().strip()
    with TestClient(app) as client:
        bridge, service = app.state.kube, app.state.service
        pod = gpu_pod(name="held", gpus=2)
        assert post(client, "filter", args(pod, names=["n0"]))["NodeNames"] == ["n0"]
        ctl = service.ctl
        bridge.sync.apply_event("node", "DELETED", k8s_node("n0", 4, "A100"))
        assert service.ctl is ctl and bridge.holds == {} and set(uses(client, token)) == {"n1"}
        assert uses(client, token)["n1"] == [0] * 4 and client.get("/api/v1/jobs", headers=bearer(token)).json() == []
        assert "node cordoned or unknown" in post(client, "bind", bind_args(pod, "n0"))["Error"]


def test_sync_watch_events(tmp_path):
    api = ClusterApi([k8s_node("n0", 2, "A100")], [])
    app = sync_app(tmp_path, api)
    token = (tmp_path / "quasched.token").read_text().strip()
    with TestClient(app) as client:
        sync: Sync = app.state.kube.sync
        pod = running(gpu_pod(name="w", gpus=1), "n0", "1")
        sync.apply_event("pod", "ADDED", pod)
        assert uses(client, token)["n0"] == [0, 1000]
        sync.apply_event("pod", "MODIFIED", pod)  # idempotent
        assert uses(client, token)["n0"] == [0, 1000]
        sync.apply_event("node", "ADDED", k8s_node("n1", 8, "H100"))
        sync.apply_event("node", "MODIFIED", k8s_node("n0", 2, "A100", cordoned=True))
        nodes = {n["name"]: n for n in client.get("/api/v1/nodes", headers=bearer(token)).json()}
        assert nodes["n0"]["cordoned"] and nodes["n1"]["num_gpus"] == 8
        sync.apply_event("node", "MODIFIED", k8s_node("n0", 4, "A100"))  # resize waits until the node is empty
        assert len(uses(client, token)["n0"]) == 2
        sync.apply_event("pod", "DELETED", pod)
        assert uses(client, token)["n0"] == [0, 0]
        sync.apply_event("node", "MODIFIED", k8s_node("n0", 4, "A100"))
        assert uses(client, token)["n0"] == [0, 0, 0, 0]
        sync.apply_event("pod", "ADDED", running(gpu_pod(name="x", gpus=1), "n1", None))
        sync.apply_event("node", "DELETED", k8s_node("n1", 8, "H100"))
        assert set(uses(client, token)) == {"n0"}
        states = {j["name"]: j["state"] for j in client.get("/api/v1/jobs", headers=bearer(token)).json()}
        assert states == {"team-a/w": "cancelled", "team-a/x": "cancelled"}


@requires("urllib3", "kube")
def test_an_unverified_api_server_is_said_once_not_per_call(tmp_path, capsys):
    """insecure-skip-tls-verify: one line on stderr, and urllib3's per-request warning silenced."""
    import json
    import warnings

    from urllib3.exceptions import InsecureRequestWarning

    from quasched.kube.client import KubernetesClient

    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        KubernetesClient(str(config))
        KubernetesClient(str(config))
        for _ in range(3):
            warnings.warn("unverified", InsecureRequestWarning)
    assert not [w for w in caught if issubclass(w.category, InsecureRequestWarning)]
    assert capsys.readouterr().err.count("certificate is not verified") == 1


# ---------------------------------------------------------------- random orders
class ListingApi(FakeApi):
    """The fake API server of bind, listing its bound pods for the sync; ``outcome`` of the next Bindings:
    ``ok``, ``refused`` (nothing bound) or ``unknown`` (bound, but the call fails)."""

    outcome = "ok"

    def list_pods(self) -> tuple[list[dict[str, Any]], str]:
        return [copy.deepcopy(p) for p in self.pods.values() if p["spec"].get("nodeName")], "1"

    def bind_pod(self, namespace: str, name: str, uid: str, node: str,
                 annotations: Mapping[str, str] | None = None) -> None:
        if self.outcome == "refused":
            raise RuntimeError("connection refused")
        super().bind_pod(namespace, name, uid, node, annotations)
        if self.outcome == "unknown":
            raise TimeoutError("read timed out")


SHAPES = (dict(gpus=4, model="A100"), dict(gpus=6, model="A100"), dict(fraction="0.5", model="T4"),
          dict(gpus=2, model="T4"))
STEPS = st.one_of(
    st.tuples(st.just("filter"), st.integers(0, 3), st.sampled_from([("a0",), ("t0",), ("a0", "t0")])),
    st.tuples(st.just("bind"), st.integers(0, 3), st.sampled_from(["a0", "t0"]),
              st.sampled_from(["ok", "ok", "refused", "unknown"])),
    st.tuples(st.just("end"), st.integers(0, 3), st.sampled_from(["Succeeded", "Failed", "DELETED"])),
    st.tuples(st.sampled_from(["rebuild", "relist", "expire"])))


def books_match_the_api_server(bridge: Any, api: ListingApi) -> None:
    """One unfinished job per pod, for exactly the bound pods that have not ended, on their node and devices; the
    loop's other placements are the assumptions of the pods held, no more."""
    with bridge.service.lock:
        ctl = bridge.service.ctl
        jobs: dict[str, list[Job]] = {}
        for job in ctl.jobs.values():
            uid = token_uid(job.spec.client_token)
            if uid is not None and not job.state.finished:
                jobs.setdefault(uid, []).append(job)
        for assumption in ctl.assumptions:
            assert bridge.holds[assumption.key].assumption is assumption
        assert len(ctl.cluster.placements) == len(ctl.assumptions) + sum(
            j.spec.pods for j in ctl.jobs.values() if j.state.holds_resources)
        bound = {p["metadata"]["uid"]: p for p in api.list_pods()[0] if p["status"]["phase"] not in DONE_PHASES}
        assert set(jobs) == set(bound)
        for uid, pod in bound.items():
            [job] = jobs[uid]
            assert job.state == JobState.RUNNING
            assert job.placement == [(pod["spec"]["nodeName"], devices_of(pod))]
            assert bridge.job_of(uid) is job


DONE_PHASES = ("Succeeded", "Failed")


@pytest.mark.slow  # a long property run
@given(st.lists(STEPS, max_size=14))
@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_order_of_filter_bind_end_rebuild_relist_keeps_the_books(tmp_path_factory, steps):
    """kube-scheduler's calls, Binding outcomes, pods ending, controllers rebuilt from the store, re-lists and
    expired holds in any order: quasched books exactly the bound pods, once each, on their nodes and devices."""
    from quasched.kube import reservations
    from quasched.service.loop.controller import Controller

    API_PODS.clear()
    api = ListingApi()
    app, _ = make_app(tmp_path_factory.mktemp("order"), kube=KubeOptions(client=api))
    bridge, service = app.state.kube, app.state.service
    sync = Sync(bridge, api)
    pods = [gpu_pod(name=f"p{k}", **shape) for k, shape in enumerate(SHAPES)]  # type: ignore[arg-type]
    ended: set[int] = set()
    for step in steps:
        kind, k = step[0], (step[1] if len(step) > 1 else 0)
        key = ("team-a", f"p{k}")
        if kind in ("filter", "bind", "end") and k in ended:
            continue
        if kind == "filter":
            bridge.filter(args(pods[k], names=list(step[2])))
        elif kind == "bind":
            api.outcome = step[3]
            bridge.bind(bind_args(pods[k], step[2]))
            api.outcome = "ok"
        elif kind == "end":
            ended.add(k)
            pod = API_PODS.pop(key) if step[2] == "DELETED" else API_PODS[key]
            pod["status"]["phase"] = step[2] if step[2] != "DELETED" else pod["status"]["phase"]
            if pod["spec"].get("nodeName"):  # the watch reports bound pods (and its holds expire otherwise)
                sync.apply_event("pod", "DELETED" if step[2] == "DELETED" else "MODIFIED", copy.deepcopy(pod))
            else:
                with service.lock:
                    bridge.drop_hold(pod["metadata"]["uid"])
        elif kind == "rebuild":  # e.g. the database refused a write: memory is rebuilt from what is stored
            with service.lock:
                service.ctl = Controller.rebuilt(*service.store.load(), service.options)
        elif kind == "relist":
            sync.relist_pods()
        else:  # the TTL of every hold not being bound runs out
            service.clock.advance(reservations.ASSUME_TTL_S)
            with service.lock:
                bridge.expire_holds()
        books_match_the_api_server(bridge, api)
    service.store.close()
