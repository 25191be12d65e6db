"""Pod groups through the extender: all of a group's minMember pods held together or none, bound together by the
last member's bind, released whole at the timeout; hand-computed on four 8-GPU nodes."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pytest
from api_support import Clock, bearer, make_app
from fastapi.testclient import TestClient
from test_kube_extender import API_PODS, FakeApi, args, bind_args, fresh_api_pods, gpu_pod, post  # noqa: F401 (autouse)

from quasched.kube import together
from quasched.kube.convention import DEVICES_ANNOTATION, GANG_HOLD_ANNOTATION, PodError
from quasched.kube.extender import KubeOptions
from quasched.kube.gangs import GROUP_LABEL, VOLCANO_ANNOTATION, GroupRef, group_of, group_spec
from quasched.model.nodes import NodeSpec

NODES = ["g0", "g1", "g2", "g3"]


class GroupApi(FakeApi):
    """:class:`FakeApi` with PodGroups (by convention, namespace and name) and the calls groups make."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: dict[tuple[str, str, str], dict[str, Any]] = {}

    def get_pod_group(self, ref: GroupRef) -> dict[str, Any]:
        self.calls.append(("podgroup", ref.key))
        found = self.groups.get((ref.convention, ref.namespace, ref.name))
        if found is None:
            raise LookupError(f"no PodGroup {ref.key}")
        return copy.deepcopy(found)

    def group_pods(self, ref: GroupRef) -> list[dict[str, Any]]:
        return [copy.deepcopy(p) for p in self.pods.values() if ref.member(p)]

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        """Merged into the stored pod, as the API server does (what kube-scheduler sends next carries them)."""
        self.calls.append(("annotate", namespace, name, dict(annotations)))
        self.pods[namespace, name]["metadata"].setdefault("annotations", {}).update(annotations)


def podgroup(api: GroupApi, name: str, min_member: Any, timeout: Any = None, namespace: str = "team-a",
             convention: str = "coscheduling") -> None:
    spec = {"minMember": min_member} | ({} if timeout is None else {"scheduleTimeoutSeconds": timeout})
    api.groups[convention, namespace, name] = {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def member(group: str, name: str, gpus: int = 8, volcano: bool = False) -> dict[str, Any]:
    """A worker asking ``gpus`` GPUs in pod group ``group`` (the coscheduling label, or Volcano's annotation)."""
    pod = gpu_pod(name, gpus=gpus)
    meta = pod["metadata"]
    if volcano:
        meta["annotations"][VOLCANO_ANNOTATION] = group
    else:
        meta["labels"] = {GROUP_LABEL: group}
    API_PODS[meta["namespace"], name] = copy.deepcopy(pod)
    return pod


@pytest.fixture
def env(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(together, "BARRIER_S", 0.05)  # a bind waits this long for the other members
    api = GroupApi()
    cluster = NodeSpec(name=np.array(NODES, dtype=object), cpu_milli=np.full(4, 96_000),
                       memory_mib=np.full(4, 768 * 1024), num_gpus=np.full(4, 8), gpu_model=np.array(["A100"] * 4,
                                                                                                     dtype=object))
    app, token = make_app(tmp_path, clock=Clock(), kube=KubeOptions(client=api), cluster=cluster)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, api, token, app


def used(client: TestClient, token: str) -> dict[str, int]:
    """GPU milli in use (held or running) per node."""
    return {n["name"]: sum(n["gpu_used_milli"]) for n in client.get("/api/v1/nodes", headers=bearer(token)).json()}


def filtered(client: TestClient, pod: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    reply = post(client, "filter", args(pod, names=NODES))
    return reply["NodeNames"], reply["FailedNodes"]


def binds(api: GroupApi) -> dict[str, tuple[str, str]]:
    """Pod name -> (node, devices annotation) of every Binding created."""
    return {c[2]: (c[4], c[5][DEVICES_ANNOTATION]) for c in api.calls if c[0] == "bind"}


def test_four_workers_of_eight_gpus_are_held_together_and_bound_by_the_last(env):
    client, api, token, app = env
    podgroup(api, "train", 4)
    workers = [member("train", f"w{k}") for k in range(4)]
    passed, failed = filtered(client, workers[0])
    assert len(passed) == 1 and failed == {}
    assert used(client, token) == dict.fromkeys(NODES, 8000)  # every member's 8 GPUs held at once, one node each
    held = {w["metadata"]["name"]: app.state.kube.holds[w["metadata"]["uid"]].node for w in workers}
    assert sorted(held.values()) == NODES and held["w0"] == passed[0]
    for w in workers[1:]:  # the others were annotated, so kube-scheduler tries them at once
        name = w["metadata"]["name"]
        wait_for(lambda: ("annotate", "team-a", name, {GANG_HOLD_ANNOTATION: held[name]}) in api.calls)
    for w in workers[:3]:
        w = api.pods["team-a", w["metadata"]["name"]]  # as kube-scheduler sends it now: annotated
        assert filtered(client, w) == ([held[w["metadata"]["name"]]], {})  # its held node, again
        reply = post(client, "bind", bind_args(w, held[w["metadata"]["name"]]))
        assert "binds its members together" in reply["Error"] and binds(api) == {}  # nobody bound yet
    assert post(client, "bind", bind_args(workers[3], held["w3"])) == {"Error": ""}
    assert binds(api) == {name: (node, "0,1,2,3,4,5,6,7") for name, node in held.items()}
    jobs = client.get("/api/v1/jobs", headers=bearer(token)).json()
    assert sorted(j["state"] for j in jobs) == ["running"] * 4 and used(client, token) == dict.fromkeys(NODES, 8000)
    assert app.state.kube.holds == {} and app.state.kube.together.gangs == {}


def test_two_gangs_that_fit_alone_but_not_together_one_holds_the_other_waits(env):
    client, api, token, app = env
    podgroup(api, "a", 3, timeout=30)
    podgroup(api, "b", 3)
    a = [member("a", f"a{k}") for k in range(3)]
    b = [member("b", f"b{k}") for k in range(3)]
    assert len(filtered(client, a[0])[0]) == 1
    passed, failed = filtered(client, b[0])
    assert passed == [] and set(failed.values()) == {
        "quasched: pod group team-a/b waits: its 3 pods (24 GPUs) do not fit together now"}
    assert sum(used(client, token).values()) == 24_000  # a's three only: b holds nothing, no member of b partly
    app.state.service.clock.advance(30)  # a's timeout, none of a bound: a is released whole
    assert filtered(client, b[1])[0] and sum(used(client, token).values()) == 24_000
    assert {u for u in app.state.kube.holds} == {p["metadata"]["uid"] for p in b}
    assert binds(api) == {}


def test_members_arriving_one_by_one_are_held_when_the_last_exists(env):
    client, api, token, _ = env
    podgroup(api, "late", 4)
    first = [member("late", f"l{k}") for k in range(2)]
    passed, failed = filtered(client, first[0])
    assert passed == [] and set(failed.values()) == {"quasched: pod group team-a/late waits for its members: "
                                                     "2 of minMember 4 exist"}
    assert sum(used(client, token).values()) == 0
    member("late", "l2")
    assert filtered(client, first[1])[0] == [] and sum(used(client, token).values()) == 0
    last = member("late", "l3")
    assert len(filtered(client, last)[0]) == 1 and sum(used(client, token).values()) == 32_000


def test_a_group_not_bound_by_its_timeout_is_released_whole(env):
    client, api, token, app = env
    podgroup(api, "slow", 4, timeout=20)
    workers = [member("slow", f"s{k}") for k in range(4)]
    filtered(client, workers[0])
    bridge = app.state.kube
    nodes = {w["metadata"]["name"]: bridge.holds[w["metadata"]["uid"]].node for w in workers}
    for w in workers[:3]:
        assert "binds its members together" in post(client, "bind", bind_args(w, nodes[w["metadata"]["name"]]))["Error"]
    app.state.service.clock.advance(20)
    reply = post(client, "bind", bind_args(workers[3], nodes["s3"]))
    assert "binds only on the node quasched holds for it" in reply["Error"], reply
    assert binds(api) == {} and sum(used(client, token).values()) == 0 and bridge.holds == {}
    assert client.get("/api/v1/jobs", headers=bearer(token)).json() == []


def test_a_group_with_its_minimum_bound_places_further_members_alone(env):
    client, api, token, app = env
    podgroup(api, "elastic", 1)
    pod = member("elastic", "e0", gpus=2)
    member("elastic", "e-bound", gpus=1)
    API_PODS["team-a", "e-bound"]["spec"]["nodeName"] = "g0"
    passed, failed = filtered(client, pod)  # minMember 1 is bound already: e0 is an ordinary pod, held alone
    assert len(passed) == 1 and failed == {} and app.state.kube.together.gangs == {}
    assert set(app.state.kube.holds) == {pod["metadata"]["uid"]}


@pytest.mark.parametrize("spec, says", [
    (None, "waits for its PodGroup: no PodGroup team-a/g"),
    ({"minMember": 0}, "spec.minMember must be an integer from 1 to 1024, not 0"),
    ({"minMember": "4"}, "spec.minMember must be an integer from 1 to 1024, not '4'"),
    ({"minMember": 2, "scheduleTimeoutSeconds": 0}, "spec.scheduleTimeoutSeconds must be from 1 to 3600, not 0"),
])
def test_a_missing_or_bad_podgroup_is_named_on_every_node(env, spec, says):
    client, api, token, _ = env
    if spec is not None:
        api.groups["coscheduling", "team-a", "g"] = {"spec": spec}
    passed, failed = filtered(client, member("g", "x0"))
    assert passed == [] and len(set(failed.values())) == 1 and says in failed["g0"], failed
    assert sum(used(client, token).values()) == 0


def test_volcano_group_annotation_is_read_with_its_podgroup(env):
    client, api, token, _ = env
    podgroup(api, "v", 2, convention="volcano")
    pods = [member("v", f"v{k}", volcano=True) for k in range(2)]
    assert group_of(pods[0]) == GroupRef("team-a", "v", "volcano")
    assert len(filtered(client, pods[0])[0]) == 1 and sum(used(client, token).values()) == 16_000


def test_group_spec_defaults_and_convention_order():
    ref = GroupRef("ns", "g", "coscheduling")
    assert group_spec({"spec": {"minMember": 3}}, ref).timeout_s == 60.0
    assert group_spec({"spec": {"minMember": 3, "scheduleTimeoutSeconds": 5}}, ref).timeout_s == 5.0
    with pytest.raises(PodError, match="PodGroup ns/g: spec.minMember"):
        group_spec({"spec": {"minMember": True}}, ref)
    both = {"metadata": {"namespace": "ns", "labels": {GROUP_LABEL: "a"}, "annotations": {VOLCANO_ANNOTATION: "b"}}}
    assert group_of(both) == GroupRef("ns", "a", "coscheduling") and group_of({"metadata": {}}) is None


def wait_for(check: Any, timeout_s: float = 10.0) -> None:
    """Until ``check()`` holds (the requeue annotations are written by a thread)."""
    end = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < end, "not reached"
        time.sleep(0.01)


def stored(api: GroupApi, name: str) -> dict[str, Any]:
    """The pod as the API server has it now (annotations and binding included), as kube-scheduler sends it next."""
    return copy.deepcopy(api.pods["team-a", name])


def test_a_group_with_more_pods_than_its_minimum_is_held_once(env):
    """minMember 2 of 4 pods: the first filter holds two; the others wait (never a second hold that would take the
    first's place) until those two are bound, then are placed alone."""
    client, api, token, app = env
    podgroup(api, "elastic", 2)
    pods = [member("elastic", f"e{k}", gpus=4) for k in range(4)]
    filtered(client, pods[0])
    bridge = app.state.kube
    held = {p["metadata"]["name"]: bridge.holds[p["metadata"]["uid"]].node for p in pods[:2]}
    passed, failed = filtered(client, pods[2])
    assert passed == [] and set(failed.values()) == {
        "quasched: pod group team-a/elastic is held for 2 of its members; this one is placed once they are bound"}
    post(client, "bind", bind_args(pods[0], held["e0"]))
    assert post(client, "bind", bind_args(pods[1], held["e1"])) == {"Error": ""}
    passed, _ = filtered(client, stored(api, "e2"))  # the minimum is bound: e2 is a pod of its own
    assert len(passed) == 1 and bridge.together.gangs == {} and sum(used(client, token).values()) == 12_000


def test_after_a_timeout_the_annotated_members_are_held_again(env):
    client, api, token, app = env
    podgroup(api, "again", 2, timeout=10)
    pods = [member("again", f"a{k}") for k in range(2)]
    filtered(client, pods[0])
    wait_for(lambda: GANG_HOLD_ANNOTATION in stored(api, "a1")["metadata"]["annotations"])
    app.state.service.clock.advance(10)
    assert len(filtered(client, stored(api, "a1"))[0]) == 1  # held anew, its hold annotation read as quasched's
    assert sum(used(client, token).values()) == 16_000


def test_a_bound_member_filtered_again_is_not_held_twice(env):
    client, api, token, app = env
    podgroup(api, "done", 2)
    pods = [member("done", f"d{k}") for k in range(2)]
    filtered(client, pods[0])
    nodes = {p["metadata"]["name"]: app.state.kube.holds[p["metadata"]["uid"]].node for p in pods}
    post(client, "bind", bind_args(pods[0], nodes["d0"]))
    assert post(client, "bind", bind_args(pods[1], nodes["d1"])) == {"Error": ""}
    passed, failed = filtered(client, pods[0])  # kube-scheduler's copy from before its bind
    assert passed == [] and set(failed.values()) == {"quasched: pod d0 is bound already"}
    api.pods["team-a", "d0"]["spec"]["nodeName"] = None  # a read of the API server that lags: quasched's books say
    assert set(filtered(client, pods[0])[1].values()) == {"quasched: pod d0 is bound already"}
    jobs = client.get("/api/v1/jobs", headers=bearer(token)).json()
    assert sorted((j["name"], j["state"]) for j in jobs) == [("team-a/d0", "running"), ("team-a/d1", "running")]


def test_a_store_refusing_one_member_binds_none(env, monkeypatch):
    client, api, token, app = env
    podgroup(api, "fragile", 3)
    pods = [member("fragile", f"f{k}") for k in range(3)]
    filtered(client, pods[0])
    bridge = app.state.kube
    nodes = {p["metadata"]["name"]: bridge.holds[p["metadata"]["uid"]].node for p in pods}
    confirm, calls = bridge.confirm, []

    def refuse_the_second(held):
        calls.append(held)
        if len(calls) == 2:
            raise RuntimeError("database unreachable")
        return confirm(held)

    monkeypatch.setattr(bridge, "confirm", refuse_the_second)
    for p in pods[:2]:
        post(client, "bind", bind_args(p, nodes[p["metadata"]["name"]]))
    reply = post(client, "bind", bind_args(pods[2], nodes["f2"]))
    assert "database unreachable; no member bound" in reply["Error"], reply
    assert binds(api) == {} and sum(used(client, token).values()) == 0
    assert {j["state"] for j in client.get("/api/v1/jobs", headers=bearer(token)).json()} <= {"cancelled"}


def test_members_of_another_scheduler_and_bad_group_names(env):
    client, api, token, _ = env
    podgroup(api, "mixed", 2)
    ours = member("mixed", "m0")
    theirs = member("mixed", "m1")
    API_PODS["team-a", "m1"]["spec"]["schedulerName"] = "default-scheduler"  # not quasched's to hold or bind
    assert set(filtered(client, ours)[1].values()) == {
        "quasched: pod group team-a/mixed waits for its members: 1 of minMember 2 exist"}
    assert theirs["metadata"]["name"] == "m1"
    forged = member("../../../api/v1/namespaces/kube-system/secrets/x", "v0", volcano=True)
    assert set(filtered(client, forged)[1].values()) == {
        "quasched: invalid pod group name: an object name (lower-case letters, digits, '-' and '.')"}
    assert [c for c in api.calls if c[0] == "podgroup"] == [("podgroup", "team-a/mixed")]  # never the forged one
