"""Contract tests of the kube-scheduler extender (``extender/v1`` wire format) on a real app and store.

kube-scheduler sends PascalCase keys (the Go structs have no json tags), ``"Nodes": null`` with
``nodeCacheCapable``, and reads replies case-insensitively; these tests send exactly those shapes
(and lower-case variants), check every verb, the stable FailedNodes strings, fractional GPUs, the
GPU-model constraint, and that bad bodies get a 4xx JSON error, never a 500. Binding goes through a
fake API client (the real API server is exercised by the end-to-end test).
"""

from __future__ import annotations

import copy
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any, Mapping

import pytest
from api_support import Clock, bearer, make_app
from fastapi.testclient import TestClient
from repo import TESTS

from quasched.kube.convention import ASSIGNED_ANNOTATION, ASSUME_TIME_ANNOTATION, DEVICES_ANNOTATION
from quasched.kube.extender import PREFIX, KubeOptions
from quasched.kube.verdicts import (BINDING, INVALID, MODEL_MISMATCH, NO_GPU, OVER_QUOTA, REASONS, UNKNOWN_NODE,
                                    UNKNOWN_QUEUE, verdicts)
from quasched.service.loop.state import job_pod

FIXTURES = TESTS / "fixtures" / "kube"
ALL = ["a0", "a1", "t0", "c0"]


#: the pods "in the API server" of the fake: every pod :func:`gpu_pod` makes (cleared for each test)
API_PODS: dict[tuple[str, str], dict[str, Any]] = {}


@pytest.fixture(autouse=True)
def fresh_api_pods():
    API_PODS.clear()
    yield
    API_PODS.clear()


class FakeApi:
    """The API-server calls of bind, recorded, on the pods of :data:`API_PODS` (uid preconditions, one
    binding per pod, the Binding's annotations merged into the pod, as the API server does); ``fail_bind``
    makes the Binding fail."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.pods = API_PODS
        self.fail_bind: str | None = None
        self.lease: dict[str, Any] = {}

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append(("get", namespace, name))
        if (namespace, name) not in self.pods:
            raise LookupError(f'pods "{name}" not found')
        return copy.deepcopy(self.pods[namespace, name])

    def _stored(self, namespace: str, name: str, uid: str) -> dict[str, Any]:
        pod = self.pods.get((namespace, name))
        if pod is None or (uid and pod["metadata"]["uid"] != uid):
            raise LookupError(f"409: Precondition failed: UID in precondition: {uid}")
        return pod

    def bind_pod(self, namespace: str, name: str, uid: str, node: str,
                 annotations: Mapping[str, str] | None = None) -> None:
        if self.fail_bind:
            raise RuntimeError(self.fail_bind)
        pod = self._stored(namespace, name, uid)
        if pod["metadata"].get("deletionTimestamp"):
            raise LookupError(f"pod {name} is being deleted, cannot be assigned to a host")
        if pod["spec"].get("nodeName"):
            raise LookupError(f'409: pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"')
        pod["spec"]["nodeName"] = node
        pod["metadata"].setdefault("annotations", {}).update(annotations or {})
        self.calls.append(("bind", namespace, name, uid, node, dict(annotations or {})))

    def get_lease(self, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append(("lease", namespace, name))
        if not self.lease:
            raise LookupError(f'leases.coordination.k8s.io "{name}" not found')
        return copy.deepcopy(self.lease)


def gpu_pod(name: str = "p", gpus: int = 1, fraction: str | None = None, model: str | None = None,
            namespace: str = "team-a", uid: str | None = None, cpu: str = "2", memory: str = "8Gi",
            queue: str | None = None, shares: Any = None) -> dict[str, Any]:
    """A v1.Pod as kube-scheduler embeds it (camelCase, json tags): ``quasched.io/gpu-shares`` 100 × ``gpus``,
    or ``fraction`` × 100, or ``shares`` verbatim."""
    annotations: dict[str, str] = {}
    if shares is None:
        shares = str(round(float(fraction) * 100) if fraction is not None else 100 * gpus)
    if model is not None:
        annotations["quasched.io/gpu-model"] = model
    if queue is not None:
        annotations["quasched.io/queue"] = queue
    limits = {"quasched.io/gpu-shares": shares} if shares != "0" else {}
    pod = {"metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{namespace}-{name}",
                         "annotations": annotations, "creationTimestamp": None},
            "spec": {"schedulerName": "quasched", "containers": [
                {"name": "main", "image": "x", "resources": {"limits": limits,
                                                             "requests": {"cpu": cpu, "memory": memory}}}]},
            "status": {"phase": "Pending"}}
    API_PODS[namespace, name] = copy.deepcopy(pod)
    return pod


def node_obj(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {}}, "status": {"allocatable": {"cpu": "1"}}}


def args(pod: dict[str, Any], names: list[str] | None = ALL, nodes: list[str] | None = None) -> dict[str, Any]:
    """ExtenderArgs: nodeCacheCapable sends NodeNames and ``"Nodes": null``; otherwise the reverse."""
    return {"Pod": pod, "Nodes": None if nodes is None else {"metadata": {}, "items": [node_obj(n) for n in nodes]},
            "NodeNames": names}


def lower_keys(value: Any) -> Any:
    """Every key of the extender's own structs in lower case (Pod/Node objects keep their camelCase)."""
    if isinstance(value, dict):
        return {(k.lower() if k[:1].isupper() else k): lower_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [lower_keys(v) for v in value]
    return value


@pytest.fixture
def env(tmp_path: Path):
    api = FakeApi()
    clock = Clock()
    app, token = make_app(tmp_path, clock=clock, kube=KubeOptions(client=api))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, api, token, app


def post(client: TestClient, verb: str, body: Any) -> Any:
    r = client.post(f"{PREFIX}/{verb}", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def bind_args(pod: dict[str, Any], node: str) -> dict[str, str]:
    meta = pod["metadata"]
    return {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}


def gated_inserts(store: Any, after: bool = False) -> tuple[Any, threading.Event, threading.Event]:
    """A stand-in for ``store.insert_jobs`` that sets ``entered`` and waits for ``go`` before its write (``after``:
    once written): (stand-in, entered, go), for ``monkeypatch.setattr(store, "insert_jobs", stand_in)``."""
    entered, go = threading.Event(), threading.Event()
    insert_jobs = store.insert_jobs

    def gated(*a: Any, **kw: Any) -> Any:
        jobs = insert_jobs(*a, **kw) if after else None
        entered.set()
        assert go.wait(10)
        return jobs if after else insert_jobs(*a, **kw)

    return gated, entered, go


def in_background(call: Any) -> tuple[threading.Thread, list[Any]]:
    """Run ``call()`` in a started thread: (the thread, a list that holds its result once it has returned)."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call()))
    thread.start()
    return thread, out


def node_use(client: TestClient, token: str) -> dict[str, list[int]]:
    return {n["name"]: n["gpu_used_milli"] for n in client.get("/api/v1/nodes", headers=bearer(token)).json()}


def fits(client: TestClient, pod: dict[str, Any], names: list[str] = ALL) -> tuple[list[str], dict[str, str]]:
    """The nodes of ``names`` where the fit rule places ``pod`` and the reasons of the others: filter asked one
    node at a time (each call a new cycle of the pod, which drops the last one's hold; the last is dropped too)."""
    passed: list[str] = []
    failed: dict[str, str] = {}
    for name in names:
        reply = post(client, "filter", args(pod, names=[name]))
        passed += reply["NodeNames"]
        failed.update(reply["FailedNodes"])
    post(client, "filter", args(pod, names=[]))
    return passed, failed


def own_pick(app: Any, pod: dict[str, Any]) -> str:
    """The node quasched's own loop chooses for ``pod`` now (its host selection on the whole cluster)."""
    from quasched.kube.convention import job_spec

    ctl = app.state.service.ctl
    return str(ctl.cluster.names[ctl.scheduler.decide(job_pod(job_spec(pod))).node])


def test_filter_sees_the_pod_the_loop_would_place(env, monkeypatch):
    """The extender's pod of a job spec is the loop's, field for field (app, density, the command's node), but for
    its uid and name."""
    from dataclasses import replace

    from builders import nodes

    import quasched.kube.verdicts as verdicts_module
    from quasched.kube.convention import job_spec
    from quasched.service.loop.state import NO_COMMAND_NODE, LoopState

    _, _, _, app = env
    ctl = app.state.service.ctl
    spec = replace(job_spec(gpu_pod()), app="web", max_per_node=1, command=("true",))
    monkeypatch.setattr(verdicts_module, "job_spec", lambda pod: spec)
    _, qpod, _ = verdicts(ctl, gpu_pod(), ALL)
    loops = LoopState(nodes((64_000, 1 << 20, 4, "T4")), options=ctl.options).pod(spec, 3, 0)
    assert qpod is not None and (qpod.app, qpod.max_per_node, qpod.node) == ("web", 1, NO_COMMAND_NODE)
    assert qpod == replace(loops, uid=0, name=spec.name)


# ---------------------------------------------------------------- filter
def test_filter_answers_quasched_pick_alone_pascal_case_reply(env):
    """One feasible node: kube-scheduler skips scoring and binds quasched's pick; the other nodes are left out."""
    client, _, _, app = env
    pod = gpu_pod(gpus=2)
    pick = own_pick(app, pod)
    reply = post(client, "filter", args(pod))
    assert set(reply) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert reply["Nodes"] is None and reply["Error"] == ""
    assert reply["NodeNames"] == [pick] and pick in ("a0", "a1", "t0")
    assert reply["FailedNodes"] == {}
    assert fits(client, pod) == (["a0", "a1", "t0"], {"c0": NO_GPU})


def test_filter_full_nodes_without_node_names(env):
    """nodeCacheCapable: false sends Nodes.items and ``"NodeNames": null``; the reply keeps the pick's node object."""
    client, *_ = env
    reply = post(client, "filter", args(gpu_pod(gpus=4), names=None, nodes=["a0", "t0", "c0"]))
    assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["a0"]
    assert reply["NodeNames"] == ["a0"] and reply["FailedNodes"] == {}
    nowhere = post(client, "filter", args(gpu_pod(name="huge", gpus=16), names=None, nodes=["a0", "t0"]))
    assert nowhere["Nodes"]["items"] == [] and nowhere["FailedNodes"] == {"a0": NO_GPU, "t0": NO_GPU}


def test_filter_returns_only_names_given(env):
    client, *_ = env
    reply = post(client, "filter", args(gpu_pod(), names=["t0", "ghost"]))
    assert reply["NodeNames"] == ["t0"] and reply["FailedNodes"] == {}
    assert fits(client, gpu_pod(), ["t0", "ghost"]) == (["t0"], {"ghost": UNKNOWN_NODE})


def test_filter_both_null_and_empty(env):
    client, *_ = env
    for body in ({"Pod": gpu_pod(), "Nodes": None, "NodeNames": None}, {"Pod": gpu_pod()},
                 {"Pod": gpu_pod(), "NodeNames": []}):
        reply = post(client, "filter", body)
        assert reply["NodeNames"] == [] and reply["FailedNodes"] == {}


def test_lower_case_keys_accepted(env):
    client, api, _, app = env
    reply = post(client, "filter", lower_keys(args(gpu_pod(gpus=2))))
    assert reply["NodeNames"] == [own_pick(app, gpu_pod(gpus=2))]
    weird = {"pOD": gpu_pod(gpus=1), "NODES": None, "nodeNAMES": ["a0"]}
    assert post(client, "filter", weird)["NodeNames"] == ["a0"]
    bind = {k.lower(): v for k, v in bind_args(gpu_pod(name="lc"), "a0").items()}
    api.pods["team-a", "lc"] = gpu_pod(name="lc")
    assert post(client, "bind", bind) == {"Error": ""}


def test_pod_keys_case_insensitive_but_labels_verbatim(env):
    """Structural keys of the embedded pod in any case; annotation keys are data and are not rewritten."""
    client, *_ = env
    pod = gpu_pod(gpus=1, model="T4")
    shouted = {"METADATA": pod["metadata"], "Spec": {"Containers": [
        {"Name": "main", "Resources": {"Limits": {"quasched.io/gpu-shares": "100"}, "Requests": {"CPU": "1"}}}]}}
    assert fits(client, shouted) == (["t0"], {"a0": MODEL_MISMATCH, "a1": MODEL_MISMATCH, "c0": NO_GPU})


def test_fits_nowhere_gets_stable_reason(env):
    client, *_ = env
    reply = post(client, "filter", args(gpu_pod(gpus=16)))
    assert reply["NodeNames"] == []
    assert reply["FailedNodes"] == dict.fromkeys(ALL, NO_GPU)
    assert set(reply["FailedNodes"].values()) <= set(REASONS)


def test_insufficient_cpu_reason(env):
    client, *_ = env
    assert fits(client, gpu_pod(gpus=1, cpu="40")) == (["a0", "a1"], {"t0": "quasched: insufficient cpu", "c0": NO_GPU})


def test_gpu_model_constraint(env):
    client, *_ = env
    assert fits(client, gpu_pod(gpus=1, model="A100")) == (["a0", "a1"], {"t0": MODEL_MISMATCH, "c0": NO_GPU})
    assert fits(client, gpu_pod(gpus=1, model="A100|T4"))[0] == ["a0", "a1", "t0"]
    selector = gpu_pod(gpus=1)
    selector["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "T4"}
    assert post(client, "filter", args(selector))["NodeNames"] == ["t0"]
    unknown = post(client, "filter", args(gpu_pod(gpus=1, model="H100")))
    assert unknown["NodeNames"] == [] and unknown["FailedNodes"]["a0"] == MODEL_MISMATCH


def test_cordoned_node_reason(env):
    client, _, token, _ = env
    assert client.patch("/api/v1/nodes/a1", json={"cordoned": True}, headers=bearer(token)).status_code == 200
    assert fits(client, gpu_pod())[1]["a1"] == UNKNOWN_NODE


def _with(pod: dict[str, Any], annotations: dict[str, str] | None = None, limits: dict[str, str] | None = None,
          containers: int = 1) -> dict[str, Any]:
    pod["metadata"]["annotations"].update(annotations or {})
    pod["spec"]["containers"][0]["resources"]["limits"].update(limits or {})
    pod["spec"]["containers"] *= containers
    return pod


@pytest.mark.parametrize("pod, says", [
    (gpu_pod(shares="150"), "quasched.io/gpu-shares: 1..99 (a share of one GPU) or a multiple of 100"),
    (gpu_pod(shares="1.5"), "got 1.5"),
    (gpu_pod(shares="lots"), "not a quantity: 'lots'"),
    (_with(gpu_pod(), {"gpu-fraction": "0.5"}), "annotation gpu-fraction is not read: ask quasched.io/gpu-shares"),
    (_with(gpu_pod(), {"quasched.io/gpu-fraction": "0.5"}), "annotation quasched.io/gpu-fraction is not read"),
    (_with(gpu_pod(shares="0"), limits={"nvidia.com/gpu": "1"}), "nvidia.com/gpu is not offered"),
    (_with(gpu_pod(shares="50"), containers=2), "only one container may ask for GPUs, 2 do"),
])
def test_invalid_gpu_requests_fail_every_node_with_one_reason(env, pod, says):
    """The reason names the field and the expected form, the same on every node (one line of the event)."""
    client, *_ = env
    reply = post(client, "filter", args(pod))
    assert reply["NodeNames"] == [] and set(reply["FailedNodes"]) == set(ALL), pod
    [reason] = set(reply["FailedNodes"].values())
    assert reason.startswith(f"{INVALID}: ") and says in reason, reason


def test_model_from_required_node_affinity(env):
    """A required nodeAffinity ``In`` on the model label restricts the model as the annotation does; with the
    annotation too, the models both allow."""
    client, *_ = env
    pod = gpu_pod()
    term = {"matchExpressions": [{"key": "quasched.io/gpu-model", "operator": "In", "values": ["T4", "H100"]}]}
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}
    assert post(client, "filter", args(pod))["NodeNames"] == ["t0"]
    both = _with(gpu_pod(), {"quasched.io/gpu-model": "A100|T4"})
    both["spec"]["affinity"] = pod["spec"]["affinity"]
    assert post(client, "filter", args(both))["NodeNames"] == ["t0"]
    clash = _with(gpu_pod(), {"quasched.io/gpu-model": "A100"})
    clash["spec"]["affinity"] = pod["spec"]["affinity"]
    assert set(post(client, "filter", args(clash))["FailedNodes"].values()) == {
        f"{INVALID}: quasched.io/gpu-model, nodeSelector and nodeAffinity allow no GPU model in common"}


def test_unknown_queue_and_quota(env):
    client, _, token, _ = env
    assert post(client, "filter", args(gpu_pod(queue="nope")))["FailedNodes"] == dict.fromkeys(ALL, UNKNOWN_QUEUE)
    r = client.put("/api/v1/queues/vision", json={"quota": {"A100": 1, "T4": 8}}, headers=bearer(token))
    assert r.status_code == 200, r.text
    # 1 A100 allowed, 8 T4
    assert fits(client, gpu_pod(gpus=2, queue="vision")) == (["t0"], {"a0": OVER_QUOTA, "a1": OVER_QUOTA, "c0": NO_GPU})
    assert fits(client, gpu_pod(gpus=1, queue="vision", model="A100"))[0] == ["a0", "a1"]


def test_pod_without_gpu_passes_through(env):
    client, *_ = env
    reply = post(client, "filter", args(gpu_pod(gpus=0)))
    assert reply["NodeNames"] == ALL and reply["FailedNodes"] == {}


def test_fractional_gpus_share_a_device(env):
    client, api, token, _ = env
    for i in range(4):
        pod = gpu_pod(name=f"half-{i}", fraction="0.5", model="T4")
        assert post(client, "filter", args(pod))["NodeNames"] == ["t0"]
        assert post(client, "bind", bind_args(pod, "t0")) == {"Error": ""}
    assert node_use(client, token)["t0"] == [1000, 1000]
    devices = [c[5][DEVICES_ANNOTATION] for c in api.calls if c[0] == "bind"]
    assert sorted(devices) == ["0", "0", "1", "1"]
    full = post(client, "filter", args(gpu_pod(name="more", fraction="0.25", model="T4")))
    assert full["NodeNames"] == [] and full["FailedNodes"]["t0"] == NO_GPU


# ---------------------------------------------------------------- the pick
def test_filter_pick_is_the_policy_choice(env):
    """The pick is quasched's own host selection: FGD packs a second share next to the first."""
    client, _, _, app = env
    first = gpu_pod(name="first", fraction="0.5", model="A100")
    [pick] = post(client, "filter", args(first))["NodeNames"]  # equal scores on a0, a1: the tie-break rank
    assert pick == own_pick(app, first) and pick in ("a0", "a1")
    assert post(client, "bind", bind_args(first, pick)) == {"Error": ""}
    second = gpu_pod(name="second", fraction="0.5", model="A100")
    assert post(client, "filter", args(second, names=["a1", "t0", "a0", "c0", "x"]))["NodeNames"] == [pick]


def test_filter_pick_matches_own_loop_on_any_subset(env):
    """kube-scheduler's own filters may pass a subset: the pick is the policy's choice within it."""
    import numpy as np

    from quasched.kube.convention import job_spec
    from quasched.policies.base import CycleState

    client, _, _, app = env
    service = app.state.service
    c, scheduler = service.ctl.cluster, service.ctl.scheduler
    qpod = job_pod(job_spec(gpu_pod(gpus=1)))
    for names in (["a0", "a1", "t0"], ["t0", "a1"], ["t0"], ["c0", "a1"]):
        idx = np.array(sorted(c.node(n) for n in names if n != "c0"))
        raw = scheduler.policy.score(c, qpod, idx, CycleState())
        expected = str(c.names[scheduler.select(idx, raw)])
        assert post(client, "filter", args(gpu_pod(gpus=1), names=names))["NodeNames"] == [expected], names


def running(client: TestClient, token: str) -> list[tuple[str, str, list[dict[str, Any]]]]:
    jobs = client.get("/api/v1/jobs", headers=bearer(token)).json()
    return [(j["name"], j["state"], j["placement"]) for j in jobs if j["state"] == "running"]


def top(scores: list[dict[str, Any]]) -> str:
    [host] = [s["Host"] for s in scores if s["Score"] == 10]
    return host


def test_filter_holds_the_pick_until_bind_confirms_it(env):
    """kube-scheduler's next cycle starts while a bind is in flight: the pick is held from filter on, in memory."""
    client, api, token, app = env
    pod = gpu_pod(name="big", gpus=8, model="A100")
    [pick] = post(client, "filter", args(pod))["NodeNames"]
    assert running(client, token) == []  # held, not stored
    assert node_use(client, token)[pick] == [1000] * 8
    # the next pod sees the eight GPUs taken before the first pod is bound
    other = gpu_pod(name="next", gpus=8, model="A100")
    assert fits(client, other, ["a0", "a1"])[0] == [({"a0", "a1"} - {pick}).pop()]
    before = time.time_ns()
    assert post(client, "bind", bind_args(pod, pick)) == {"Error": ""}
    # one call: the Binding, with the annotations the device plugin's Allocate reads and the pod's uid
    [bind] = api.calls
    assert bind[:5] == ("bind", "team-a", "big", "uid-team-a-big", pick)
    assert bind[5] | {ASSUME_TIME_ANNOTATION: "t"} == {DEVICES_ANNOTATION: "0,1,2,3,4,5,6,7",
                                                      ASSIGNED_ANNOTATION: "false", ASSUME_TIME_ANNOTATION: "t"}
    assert before <= int(bind[5][ASSUME_TIME_ANNOTATION]) <= time.time_ns()
    assert running(client, token) == [("team-a/big", "running", [{"node": pick, "devices": list(range(8))}])]
    [job] = client.get("/api/v1/jobs", headers=bearer(token)).json()
    kinds = [e["kind"] for e in client.get("/api/v1/events", headers=bearer(token)).json() if e["job_id"] == job["id"]]
    assert kinds == ["submitted", "started"] and job["id"] > 0
    assert app.state.kube.holds == {}


def test_bind_elsewhere_moves_the_held_pod(env):
    client, api, token, _ = env
    pod = gpu_pod(name="moved", gpus=8, model="A100")
    [pick] = post(client, "filter", args(pod))["NodeNames"]
    elsewhere = ({"a0", "a1"} - {pick}).pop()  # not kube-scheduler's choice: the checked path books it there
    assert post(client, "bind", bind_args(pod, elsewhere)) == {"Error": ""}
    assert [c[0] for c in api.calls] == ["get", "bind"]
    assert running(client, token) == [("team-a/moved", "running", [{"node": elsewhere, "devices": list(range(8))}])]
    assert node_use(client, token)[pick] == [0] * 8


def test_held_pod_released_by_its_next_cycle_or_after_ttl(env):
    from quasched.kube import reservations

    client, _, token, app = env
    pod = gpu_pod(name="retry", gpus=8, model="A100")
    [pick] = post(client, "filter", args(pod))["NodeNames"]
    # the cycle failed after filter (no bind): the pod's next filter starts afresh and sees both nodes free
    assert fits(client, pod, ["a0", "a1"])[0] == ["a0", "a1"]
    assert node_use(client, token)[pick] == [0] * 8
    post(client, "filter", args(pod))
    app.state.service.clock.advance(reservations.ASSUME_TTL_S)  # the hold's TTL runs out
    post(client, "filter", args(gpu_pod(name="someone-else", gpus=1), names=["t0"]))  # any call expires stale holds
    assert set(app.state.kube.holds) == {"uid-team-a-someone-else"}
    assert node_use(client, token)[pick] == [0] * 8
    assert running(client, token) == [] and client.get("/api/v1/jobs", headers=bearer(token)).json() == []


def test_new_cycle_while_its_bind_is_in_flight_keeps_the_hold(env):
    """kube-scheduler gave up on a slow bind (its httpTimeout) and filters the pod again while quasched's Binding is
    still under way: the hold stays (the retry is answered the same node, its bind told to wait), and when the
    first Binding lands the pod's job runs there. Releasing it then left a bound pod without a job in quasched."""
    import threading

    client, api, token, app = env
    pod = gpu_pod(name="slow", gpus=8, model="A100")
    [pick] = post(client, "filter", args(pod))["NodeNames"]
    entered, go = threading.Event(), threading.Event()
    bind_pod = api.bind_pod

    def slow_bind(*a: Any, **kw: Any) -> None:
        entered.set()
        go.wait(10)
        bind_pod(*a, **kw)

    api.bind_pod = slow_bind
    first, replies = in_background(lambda: post(client, "bind", bind_args(pod, pick)))
    assert entered.wait(10)
    assert post(client, "filter", args(pod))["NodeNames"] == [pick]
    other = ({"a0", "a1"} - {pick}).pop()
    assert post(client, "filter", args(pod, names=[other]))["FailedNodes"] == {other: BINDING}
    assert "is in flight" in post(client, "bind", bind_args(pod, pick))["Error"]
    go.set()
    first.join(10)
    assert replies == [{"Error": ""}]
    assert running(client, token) == [("team-a/slow", "running", [{"node": pick, "devices": list(range(8))}])]
    assert node_use(client, token)[pick] == [1000] * 8 and node_use(client, token)[other] == [0] * 8


def test_bind_stores_its_job_while_filter_goes_on(env, monkeypatch):
    """Bind writes the held pod's job to the database outside the service lock: the next pod's filter is answered
    while that write is under way (with the first pod's devices still held), and the write's job then takes the
    hold's place. If the controller was rebuilt meanwhile and the devices went to another pod, the stored job is
    cancelled and nothing is bound."""
    import threading

    from quasched.service.loop.controller import Controller

    client, api, token, app = env
    service, store = app.state.service, app.state.service.store
    slow_insert, entered, go = gated_inserts(store)
    monkeypatch.setattr(store, "insert_jobs", slow_insert)
    first = gpu_pod(name="first", gpus=8, model="A100")
    [pick] = post(client, "filter", args(first))["NodeNames"]
    binder, replies = in_background(lambda: post(client, "bind", bind_args(first, pick)))
    assert entered.wait(10)
    other = ({"a0", "a1"} - {pick}).pop()
    second = gpu_pod(name="second", gpus=8, model="A100")
    filtering, answers = in_background(lambda: post(client, "filter", args(second, names=["a0", "a1"])))
    filtering.join(10)  # (a filter waiting for the lock would wait for the write, that is, forever here)
    go.set()
    filtering.join(10)
    assert [a["NodeNames"] for a in answers] == [[other]] and not replies
    binder.join(10)
    assert replies == [{"Error": ""}]
    assert node_use(client, token)[pick] == [1000] * 8
    assert [r[0] for r in running(client, token)] == ["team-a/first"]
    post(client, "filter", args(second, names=[]))  # its next cycle: the hold is dropped

    # the controller rebuilt from the store while the write is under way: the hold is gone, another pod takes its
    # devices, and the late write must not double-book them
    entered.clear(), go.clear()
    monkeypatch.setattr(store, "insert_jobs", slow_insert)
    late = gpu_pod(name="late", gpus=8, model="A100")
    assert post(client, "filter", args(late, names=[other]))["NodeNames"] == [other]
    binder, replies = in_background(lambda: post(client, "bind", bind_args(late, other)))
    assert entered.wait(10)
    with service.lock:
        service.ctl = Controller.rebuilt(*store.load(), service.options)
    taker = gpu_pod(name="taker", gpus=8, model="A100")
    assert post(client, "filter", args(taker, names=[other]))["NodeNames"] == [other]
    go.set()
    binder.join(10)
    assert "devices" in replies[0]["Error"] and "taken" in replies[0]["Error"]
    assert not [c for c in api.calls if c[0] == "bind" and c[2] == "late"]
    states = {j["name"]: j["state"] for j in client.get("/api/v1/jobs", headers=bearer(token)).json()}
    assert states == {"team-a/first": "running", "team-a/late": "cancelled"}
    assert node_use(client, token)[other] == [1000] * 8  # the taker's hold, once


def test_jobs_stored_in_one_order_and_entering_memory_in_another_are_found(env, monkeypatch):
    """Concurrent binds store their jobs outside the lock, so a younger job may enter the controller first: the
    older one is still found by its pod (a repeated bind of its pod books nothing twice). Finding pods' jobs by
    the newest id read missed it, and a repeated bind of the shared pod then booked its share a second time."""
    import threading

    client, api, token, app = env
    bridge, store = app.state.kube, app.state.service.store
    insert_then_wait, stored, go = gated_inserts(store, after=True)

    older = gpu_pod(name="older", fraction="0.5", model="T4")
    assert post(client, "filter", args(older, names=["t0"]))["NodeNames"] == ["t0"]
    monkeypatch.setattr(store, "insert_jobs", insert_then_wait)
    binder, replies = in_background(lambda: post(client, "bind", bind_args(older, "t0")))
    assert stored.wait(10)
    monkeypatch.undo()
    younger = gpu_pod(name="younger", gpus=8, model="A100")
    [pick] = post(client, "filter", args(younger, names=["a0", "a1"]))["NodeNames"]
    assert post(client, "bind", bind_args(younger, pick)) == {"Error": ""}
    with app.state.service.lock:  # e.g. the watch event of its Binding
        assert bridge.job_of("uid-team-a-younger").spec.name == "team-a/younger"
    go.set()
    binder.join(10)
    assert replies == [{"Error": ""}]
    with app.state.service.lock:
        found = {uid: job.spec.name for uid in ("uid-team-a-older", "uid-team-a-younger")
                 if (job := bridge.job_of(uid)) is not None}
    assert found == {"uid-team-a-older": "team-a/older", "uid-team-a-younger": "team-a/younger"}
    assert post(client, "bind", bind_args(older, "t0")) == {"Error": ""}  # kube-scheduler repeats it: booked once
    assert sorted(r[0] for r in running(client, token)) == ["team-a/older", "team-a/younger"]
    assert sum(node_use(client, token)["t0"]) == 500


def test_pod_adopted_while_its_bind_stores_its_job_keeps_one_job(env, monkeypatch):
    """While bind stores a held pod's job outside the lock, the watch reports the pod bound (an earlier Binding
    whose outcome bind did not learn) on other devices and adopts it there: the late job must not take the hold's
    place. It did, and the failed Binding's release then ended the adopted job: quasched booked the devices the
    pod does not use and left free the one it runs on."""
    import threading

    from quasched.kube.sync import Sync

    client, api, token, app = env
    bridge, store = app.state.kube, app.state.service.store
    slow_insert, entered, go = gated_inserts(store)

    pod = gpu_pod(name="twice", gpus=1, model="A100")
    assert post(client, "filter", args(pod, names=["a0"]))["NodeNames"] == ["a0"]
    [held] = bridge.holds.values()
    monkeypatch.setattr(store, "insert_jobs", slow_insert)
    binder, replies = in_background(lambda: post(client, "bind", bind_args(pod, "a0")))
    assert entered.wait(10)
    monkeypatch.undo()
    elsewhere = next(d for d in range(8) if d not in held.devices)
    bound = copy.deepcopy(pod)
    bound["spec"]["nodeName"] = "a0"
    bound["metadata"]["annotations"][DEVICES_ANNOTATION] = str(elsewhere)
    API_PODS["team-a", "twice"] = copy.deepcopy(bound)
    Sync(bridge, api).apply_event("pod", "MODIFIED", bound)
    go.set()
    binder.join(10)
    assert "released" in replies[0]["Error"]
    assert not [c for c in api.calls if c[0] == "bind"]
    assert running(client, token) == [("team-a/twice", "running", [{"node": "a0", "devices": [elsewhere]}])]
    assert node_use(client, token)["a0"] == [1000 if d == elsewhere else 0 for d in range(8)]
    assert bridge.holds == {}


def test_a_hold_ends_with_its_bind_whatever_fails(env, monkeypatch):
    """An unexpected failure while bind stores the held pod's job ends the hold too: left binding, it made every
    later bind of the pod answer 'in flight' and its filter offer that one node, for good."""
    client, api, token, app = env
    bridge, store = app.state.kube, app.state.service.store
    pod = gpu_pod(name="unlucky", gpus=1, model="T4")
    assert post(client, "filter", args(pod, names=["t0"]))["NodeNames"] == ["t0"]

    def broken(*a: Any, **kw: Any) -> Any:
        raise RuntimeError("the event counter broke")

    monkeypatch.setattr(app.state.service.metrics, "count", broken)
    post_raw = client.post(f"{PREFIX}/bind", json=bind_args(pod, "t0"))
    assert post_raw.status_code == 500
    monkeypatch.undo()
    assert bridge.holds == {}
    post(client, "filter", args(pod, names=["t0"]))  # the pod's next cycle
    assert post(client, "bind", bind_args(pod, "t0")) == {"Error": ""}


def test_a_device_failing_under_a_held_pod_ends_the_hold(env):
    """A GPU is marked failed while filter holds a pod on it: the hold ends (it is never stored, so it is not
    requeued) and the pod's bind books healthy devices. Requeued, the hold was placed again by the loop and refused
    by the store: the health change answered 503 and the controller was rebuilt from the store."""
    client, api, token, app = env
    service = app.state.service
    pod = gpu_pod(name="unlucky", gpus=2, model="A100")
    assert post(client, "filter", args(pod, names=["a0"]))["NodeNames"] == ["a0"]
    [held] = app.state.kube.holds.values()
    ctl = service.ctl
    service.set_device_health("a0", held.devices[0], False)
    assert service.ctl is ctl and node_use(client, token)["a0"] == [0] * 8
    assert post(client, "bind", bind_args(pod, "a0")) == {"Error": ""}
    [(_, state, [placed])] = running(client, token)
    assert state == "running" and held.devices[0] not in placed["devices"] and len(placed["devices"]) == 2


def test_filter_at_once_only_with_the_lock_free(env, tmp_path):
    """filter is answered on the event loop when the service lock is free, else (None) on a worker thread, which
    may wait for the lock; a standby replica (Lease configured, not active) always goes to a worker thread."""
    import threading

    client, _, _, app = env
    bridge, lock = app.state.kube, app.state.service.lock
    pod = gpu_pod(name="now", gpus=1, model="T4")
    taken, done = threading.Event(), threading.Event()

    def hold_lock() -> None:
        with lock:
            taken.set()
            done.wait(10)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    assert taken.wait(10)
    assert bridge.filter_at_once(args(pod)) is None and bridge.holds == {}
    done.set()
    holder.join(10)
    assert bridge.filter_at_once(args(pod))["NodeNames"] == ["t0"]
    app.state.service.leading = False  # a standby service reads the store: not on the event loop
    assert bridge.filter_at_once(args(pod)) is None
    app.state.service.leading = True
    (tmp_path / "standby").mkdir()
    standby_app, _ = make_app(tmp_path / "standby", kube=KubeOptions(client=FakeApi(), lease="kube-system/kube-scheduler",
                                                                     identity="me"))
    assert standby_app.state.kube.filter_at_once(args(pod)) is None


def test_filter_on_the_event_loop_never_reads_the_lease(tmp_path):
    """filter answered on the event loop holds the service lock: if another call found the Lease lost just after
    filter_at_once saw the replica active, filter must not read the Lease and activate there. It did: an API
    server call on the event loop under the lock, and, with an activation under way on another thread (it holds
    the activation while its re-list waits for the service lock), the two waited for each other for good."""
    api = FakeApi()
    api.lease = {"spec": {"holderIdentity": "me_1"}}
    app, _ = make_app(tmp_path, kube=KubeOptions(client=api, lease="kube-system/kube-scheduler", identity="me"))
    bridge = app.state.kube
    assert bridge.standby() is None and bridge.active
    pods_lock = bridge._pods_lock

    class LeaseLostMeanwhile:
        """filter's first lock: another thread's Lease read fails just then."""

        def __enter__(self) -> None:
            bridge.active = False
            pods_lock.acquire()

        def __exit__(self, *exc: Any) -> None:
            pods_lock.release()

    bridge._pods_lock = LeaseLostMeanwhile()
    reads = len(api.calls)
    assert bridge.filter_at_once(args(gpu_pod(name="now", gpus=1, model="T4")))["NodeNames"] == ["t0"]
    assert len(api.calls) == reads


# ---------------------------------------------------------------- bind
def test_bind_checked_path_reserves_and_binds_once(env):
    """A bind quasched holds nothing for (here: another node than its pick) reads the pod, books, then binds."""
    client, api, token, _ = env
    pod = gpu_pod(name="train", gpus=2, model="A100")
    [pick] = post(client, "filter", args(pod))["NodeNames"]
    other = ({"a0", "a1"} - {pick}).pop()
    before = time.time_ns()
    assert post(client, "bind", bind_args(pod, other)) == {"Error": ""}
    [get, bind] = api.calls
    assert get == ("get", "team-a", "train") and bind[:5] == ("bind", "team-a", "train", "uid-team-a-train", other)
    # with spec.nodeName, what the device plugin's Allocate reads: devices, assume time, not yet assigned
    assert bind[5] | {ASSUME_TIME_ANNOTATION: "t"} == {DEVICES_ANNOTATION: "0,1", ASSIGNED_ANNOTATION: "false",
                                                      ASSUME_TIME_ANNOTATION: "t"}
    assert before <= int(bind[5][ASSUME_TIME_ANNOTATION]) <= time.time_ns()
    assert node_use(client, token)[pick] == [0] * 8
    assert node_use(client, token)[other][:3] == [1000, 1000, 0]
    [job] = client.get("/api/v1/jobs", headers=bearer(token)).json()
    assert job["state"] == "running" and job["name"] == "team-a/train" and job["placement"] == [
        {"node": other, "devices": [0, 1]}]
    kinds = [e["kind"] for e in client.get("/api/v1/events", headers=bearer(token)).json() if e["job_id"] == job["id"]]
    assert kinds == ["submitted", "started"]
    # kube-scheduler retries a bind that took effect: answered without a second booking or Binding
    assert post(client, "bind", bind_args(pod, other)) == {"Error": ""}
    assert node_use(client, token)[other][:3] == [1000, 1000, 0]
    assert [c[0] for c in api.calls] == ["get", "bind", "get"]
    assert len(client.get("/api/v1/jobs", headers=bearer(token)).json()) == 1


def test_repeated_bind_of_a_held_pod_answered_from_the_api_server(env):
    """kube-scheduler retries a bind whose reply was lost: the pod is bound already, answered without a second
    booking; a held pod's Binding refused by the API server leaves no job behind."""
    client, api, token, _ = env
    pod = gpu_pod(name="twice", gpus=1, model="T4")
    assert post(client, "filter", args(pod))["NodeNames"] == ["t0"]
    assert post(client, "bind", bind_args(pod, "t0")) == {"Error": ""}
    assert post(client, "bind", bind_args(pod, "t0")) == {"Error": ""}
    assert [c[0] for c in api.calls] == ["bind", "get"] and node_use(client, token)["t0"] == [1000, 0]
    going = gpu_pod(name="going", gpus=1, model="T4")
    assert post(client, "filter", args(going))["NodeNames"] == ["t0"]
    api.pods["team-a", "going"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert "being deleted" in post(client, "bind", bind_args(going, "t0"))["Error"]
    assert node_use(client, token)["t0"] == [1000, 0]
    assert [r[0] for r in running(client, token)] == ["team-a/twice"]


def test_bind_fetches_pod_it_has_not_seen(env):
    client, api, token, _ = env
    pod = gpu_pod(name="unseen", gpus=1)
    api.pods["team-a", "unseen"] = pod
    assert post(client, "bind", bind_args(pod, "t0")) == {"Error": ""}
    assert api.calls[0] == ("get", "team-a", "unseen")
    assert node_use(client, token)["t0"] == [1000, 0]
    missing = post(client, "bind", {"PodName": "gone", "PodNamespace": "x", "PodUID": "u", "Node": "a0"})
    assert "refused to bind x/gone to a0: cannot read the pod" in missing["Error"]


def test_bind_failure_rolls_back(env):
    client, api, token, _ = env
    pod = gpu_pod(name="doomed", gpus=8)
    [pick] = post(client, "filter", args(pod))["NodeNames"]
    api.fail_bind = "connection reset"
    reply = post(client, "bind", bind_args(pod, pick))
    assert f"binding team-a/doomed to {pick} failed: connection reset" in reply["Error"]
    assert node_use(client, token)[pick] == [0] * 8
    # the held pod's Binding failed, then the checked path's: both jobs cancelled
    assert {j["state"] for j in client.get("/api/v1/jobs", headers=bearer(token)).json()} == {"cancelled"}
    # the retry binds (a new attempt, a new job)
    api.fail_bind = None
    assert post(client, "bind", bind_args(pod, pick)) == {"Error": ""}
    assert node_use(client, token)[pick] == [1000] * 8


@pytest.mark.parametrize("held", [True, False])
def test_a_binding_that_landed_with_its_answer_lost_keeps_its_job(env, held):
    """The Binding takes effect but its call fails (a timeout): the pod read back is bound there, so its job stays
    (the watch may have reported the binding already). On the checked path the job was cancelled: a bound pod
    without a job, its devices free for the next pods."""
    client, api, token, _ = env
    pod = gpu_pod(name="lost", gpus=2, model="A100")
    if held:
        post(client, "filter", args(pod, names=["a0"]))
    bind_pod = api.bind_pod

    def lands_then_times_out(*a: Any, **kw: Any) -> None:
        bind_pod(*a, **kw)
        raise TimeoutError("read timed out")

    api.bind_pod = lands_then_times_out
    assert post(client, "bind", bind_args(pod, "a0")) == {"Error": ""}
    devices = [int(d) for d in API_PODS["team-a", "lost"]["metadata"]["annotations"][DEVICES_ANNOTATION].split(",")]
    assert running(client, token) == [("team-a/lost", "running", [{"node": "a0", "devices": devices}])]
    assert sum(node_use(client, token)["a0"]) == 2000


def test_bind_on_node_without_room_is_an_error_not_a_double_booking(env):
    """A bind onto GPUs another pod holds finds them taken (the second pod's filter already said so)."""
    client, api, token, _ = env
    one, two = gpu_pod(name="one", gpus=2, model="T4"), gpu_pod(name="two", gpus=2, model="T4")
    assert post(client, "filter", args(one))["NodeNames"] == ["t0"]
    assert post(client, "filter", args(two))["FailedNodes"]["t0"] == NO_GPU
    reply = post(client, "bind", bind_args(two, "t0"))
    assert reply["Error"].startswith(NO_GPU)
    assert post(client, "bind", bind_args(one, "t0")) == {"Error": ""}
    assert reply["Error"].startswith(NO_GPU)
    assert node_use(client, token)["t0"] == [1000, 1000]
    assert [c[2] for c in api.calls if c[0] == "bind"] == ["one"]


def test_bind_when_the_database_refuses(env, monkeypatch):
    """The store refuses the reservation (the placement written in the job's insert transaction): bind answers an
    Error, the job's row is rolled back with it, the hold ends with the bind, nothing binds."""
    client, api, token, app = env
    pod = gpu_pod(name="nodb", gpus=1, model="T4")
    post(client, "filter", args(pod))
    store = app.state.service.store

    def refuse(*a: Any, **kw: Any) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(store, "_save", refuse)
    reply = post(client, "bind", bind_args(pod, "t0"))
    assert "database refused" in reply["Error"] and "disk full" in reply["Error"]
    monkeypatch.undo()
    assert node_use(client, token)["t0"] == [0, 0]
    assert not [c for c in api.calls if c[0] == "bind"]
    assert client.get("/api/v1/jobs", headers=bearer(token)).json() == []
    monkeypatch.setattr(store, "insert_job", refuse)
    assert "disk full" in post(client, "bind", bind_args(pod, "t0"))["Error"]


def test_bind_unknown_node(env):
    client, *_ = env
    pod = gpu_pod(name="p3")
    post(client, "filter", args(pod))
    assert post(client, "bind", bind_args(pod, "nowhere"))["Error"].startswith(UNKNOWN_NODE)


def refused(api: FakeApi, client: TestClient, token: str, args_: dict[str, str], why: str) -> None:
    """The bind is answered with ``why`` and leaves no trace: no annotation, no Binding, no job."""
    reply = post(client, "bind", args_)
    assert reply["Error"].startswith(f"quasched: refused to bind {args_['PodNamespace']}/{args_['PodName']}"), reply
    assert why in reply["Error"], reply
    assert not [c for c in api.calls if c[0] == "bind"]
    assert [j for j in client.get("/api/v1/jobs", headers=bearer(token)).json() if j["state"] == "running"] == []


def test_bind_refuses_what_quasched_must_not_bind(env):
    """The pod is read from the API server: a made-up, replaced, foreign, deleted, bound or GPU-less pod is refused."""
    client, api, token, _ = env
    refused(api, client, token, {"PodName": "made-up", "PodNamespace": "team-a", "PodUID": "u1", "Node": "a0"},
            "cannot read the pod")
    pod = gpu_pod(name="replaced", gpus=1)
    refused(api, client, token, bind_args(pod, "a0") | {"PodUID": "an-older-uid"}, "(the pod was replaced)")
    other = gpu_pod(name="theirs", gpus=1)
    api.pods["team-a", "theirs"]["spec"]["schedulerName"] = "default-scheduler"
    refused(api, client, token, bind_args(other, "a0"), "schedulerName is 'default-scheduler', not quasched's")
    going = gpu_pod(name="going", gpus=1)
    api.pods["team-a", "going"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    refused(api, client, token, bind_args(going, "a0"), "being deleted")
    placed = gpu_pod(name="placed", gpus=1)
    api.pods["team-a", "placed"]["spec"]["nodeName"] = "a1"
    refused(api, client, token, bind_args(placed, "a0"), "already bound to a1")
    web = gpu_pod(name="web", gpus=0)
    refused(api, client, token, bind_args(web, "c0"), "requests no GPU from quasched")


def test_bind_only_for_the_configured_scheduler_names(tmp_path):
    app, token = make_app(tmp_path, kube=KubeOptions(client=FakeApi(), scheduler_names=("gpu-a", "gpu-b")))
    with TestClient(app) as client:
        pod = gpu_pod(name="p", gpus=1)
        assert "not quasched's (gpu-a, gpu-b)" in post(client, "bind", bind_args(pod, "a0"))["Error"]
        API_PODS["team-a", "p"]["spec"]["schedulerName"] = "gpu-b"
        assert post(client, "bind", bind_args(pod, "a0")) == {"Error": ""}


def test_held_by_matches_the_host_name_part_only():
    from quasched.kube.admission import held_by, lease_holder

    assert held_by("replica-a_5f1c", "replica-a") and held_by("replica-a", "replica-a")
    assert not held_by("replica-ab_5f1c", "replica-a") and not held_by("x_replica-a_1", "replica-a")
    assert not held_by("", "replica-a") and not held_by("replica-a_1", "")
    assert lease_holder({"spec": {"holderIdentity": "h_1"}}) == "h_1" and lease_holder({}) == ""


def test_standby_replica_refuses_to_bind(tmp_path):
    """Fencing: bind only while this replica's kube-scheduler holds the leader Lease; becoming active binds."""
    api = FakeApi()
    app, token = make_app(tmp_path, kube=KubeOptions(client=api, lease="quasched/quasched-scheduler",
                                                     identity="replica-a"))
    with TestClient(app) as client:
        pod = gpu_pod(name="p", gpus=1)
        assert "cannot read the leader Lease quasched/quasched-scheduler" in post(
            client, "bind", bind_args(pod, "a0"))["Error"]
        for holder in ("replica-b_0c1d", "replica-ab_0c1d", ""):
            api.lease = {"spec": {"holderIdentity": holder, "leaseDurationSeconds": 8}}
            reply = post(client, "bind", bind_args(pod, "a0"))
            assert reply["Error"].startswith("quasched: standby replica: the leader Lease quasched/quasched-scheduler "
                                             f"is held by {holder or 'nobody'}"), reply
        assert not [c for c in api.calls if c[0] in ("get", "bind")]
        api.lease = {"spec": {"holderIdentity": "replica-a_77e2"}}
        assert post(client, "bind", bind_args(pod, "a0")) == {"Error": ""}
        assert app.state.kube.active
        assert node_use(client, token)["a0"][0] == 1000


def test_verbs_only_on_their_tls_listener(tmp_path):
    app, _ = make_app(tmp_path, kube=KubeOptions(client=FakeApi(), verbs_port=8443))
    with TestClient(app) as client:
        for verb in ("filter", "bind", "preempt"):  # a team token or none: never the verbs
            r = client.post(f"{PREFIX}/{verb}", json=args(gpu_pod()))
            assert r.status_code == 403 and "mutual TLS on port 8443 only" in r.json()["Error"], r.text


def test_bind_without_client_is_an_error(tmp_path):
    app, _ = make_app(tmp_path, kube=KubeOptions())
    with TestClient(app) as client:
        assert "no Kubernetes API client" in post(client, "bind", bind_args(gpu_pod(), "a0"))["Error"]


def test_bound_pod_survives_restart(tmp_path):
    """The reservation is durable: after a restart the devices are still taken."""
    api = FakeApi()
    app, token = make_app(tmp_path, kube=KubeOptions(client=api))
    pod = gpu_pod(name="keep", gpus=8, model="A100")
    with TestClient(app) as client:
        post(client, "filter", args(pod))
        assert post(client, "bind", bind_args(pod, "a0")) == {"Error": ""}
    app.state.service.store.close()
    again, _ = make_app(tmp_path, kube=KubeOptions(client=api))
    with TestClient(again) as client:
        assert post(client, "filter", args(gpu_pod(name="next", gpus=8, model="A100")))["NodeNames"] == ["a1"]


# ---------------------------------------------------------------- bad bodies
BAD_BODIES = [
    b"", b"null", b"[]", b"42", b"\"Pod\"", b"{not json", b"\xff\xfe", b'{"Pod": null}', b'{"Pod": []}',
    b'{"Pod": {}, "NodeNames": "a0"}', b'{"Pod": {}, "NodeNames": [1, 2]}', b'{"Pod": {}, "Nodes": []}',
    b'{"Pod": {}, "Nodes": {"items": [1]}}', b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}, "NodeNames": null}',
    b'{"Pod": {}, "Nodes": {"items": "x"}}', b"[" * 5000 + b"]" * 5000,
]
BAD_BINDS = [b"{}", b'{"PodName": "p"}', b'{"PodName": "p", "PodNamespace": "n", "Node": 3}',
             b'{"PodName": "", "PodNamespace": "n", "Node": "a0"}', b"[]", b"nope",
             json.dumps({"PodName": "p" * 300, "PodNamespace": "n", "Node": "a0"}).encode()]


@pytest.mark.parametrize("body", BAD_BODIES)
def test_bad_bodies_are_4xx_json(env, body):
    client, *_ = env
    r = client.post(f"{PREFIX}/filter", content=body, headers={"Content-Type": "application/json"})
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.json()["Error"]


@pytest.mark.parametrize("body", BAD_BINDS)
def test_bad_bind_bodies_are_4xx_json(env, body):
    client, *_ = env
    r = client.post(f"{PREFIX}/bind", content=body, headers={"Content-Type": "application/json"})
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.json()["Error"]


def test_odd_pods_never_500(env):
    """Well-formed bodies with strange pods answer 200 with reasons (or pass-through), never a 500."""
    client, *_ = env
    odd = [{}, {"metadata": None, "spec": None}, {"spec": {"containers": None}}, {"spec": {"containers": [1, "x"]}},
           {"spec": {"containers": [{"resources": {"limits": {"quasched.io/gpu-shares": None}}}]}},
           {"spec": {"containers": [{"resources": {"limits": {"quasched.io/gpu-shares": True}}}]}},
           {"spec": {"containers": [{"resources": {"limits": {"quasched.io/gpu-shares": "1"}, "requests": {"cpu": "-1"}}}]}},
           {"spec": {"containers": [{"resources": {"limits": {"quasched.io/gpu-shares": "1e400"}}}]}},
           {"spec": {"containers": [{"resources": {"limits": {"quasched.io/gpu-shares": 1}, "requests": {"memory": "1Zi"}}}]}},
           {"metadata": {"annotations": {"gpu-fraction": None}}, "spec": {"containers": [
               {"resources": {"limits": {"quasched.io/gpu-shares": 1}}}]}},
           {"metadata": {"annotations": "x"}, "spec": {"nodeSelector": "y", "containers": [
               {"resources": {"limits": {"quasched.io/gpu-shares": 1}}}]}},
           {"metadata": {"labels": ["scheduling.x-k8s.io/pod-group"], "annotations": {
               "scheduling.k8s.io/group-name": 7}}, "spec": {"containers": [
               {"resources": {"limits": {"quasched.io/gpu-shares": 1}}}]}},
           {"metadata": {"labels": {"scheduling.x-k8s.io/pod-group": "no-such-group"}}, "spec": {"containers": [
               {"resources": {"limits": {"quasched.io/gpu-shares": 1}}}]}}]
    for pod in odd:
        r = client.post(f"{PREFIX}/filter", json=args(pod))
        assert r.status_code == 200, (pod, r.status_code, r.text)


# ---------------------------------------------------------------- the socket
def test_tcp_nodelay_on_served_connections(tmp_path):
    """asyncio sets TCP_NODELAY only when ``sock.proto == IPPROTO_TCP``, which accepted sockets do not report,
    so plain uvicorn keeps Nagle on (about 40 ms per keep-alive call, BENCHMARKS.md); `quasched serve` runs
    uvicorn with NoDelayHttpToolsProtocol: the server's side of a live keep-alive connection has the option set."""
    import threading

    import httpx
    import uvicorn

    from quasched.kube.nodelay import NoDelayHttpToolsProtocol

    app, _ = make_app(tmp_path, kube=KubeOptions(client=FakeApi()))
    body = json.dumps(args(gpu_pod(gpus=1))).encode()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", http=NoDelayHttpToolsProtocol,
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.02)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}") as http:
            assert http.post(f"{PREFIX}/filter", content=body).status_code == 200
            [connection] = list(server.server_state.connections)
            served = connection.transport.get_extra_info("socket")
            assert served.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_nodelay_protocol_sets_the_option():
    from quasched.kube.nodelay import set_nodelay

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    try:
        assert accepted.proto == 0  # why asyncio's own _set_nodelay skips it
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0

        class Transport:
            def get_extra_info(self, key: str) -> Any:
                return accepted if key == "socket" else None

        set_nodelay(Transport())  # type: ignore[arg-type]
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        for s in (accepted, client, listener):
            s.close()
