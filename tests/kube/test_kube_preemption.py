"""Preemption and quota reclaim for GPU pods through the extender: quasched's victims, minimised at the device
level, evicted through the Eviction API (dry run first, PodDisruptionBudgets respected, gangs whole), the freed
devices held for the preemptor; hand-computed on two 8-GPU nodes."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from api_support import Clock, bearer, make_app
from fastapi.testclient import TestClient
from test_kube_extender import API_PODS, args, bind_args, fresh_api_pods, gpu_pod, post  # noqa: F401 (autouse)
from test_kube_gangs import GroupApi

from quasched.kube.client import ApiError
from quasched.kube.convention import DEVICES_ANNOTATION
from quasched.kube.extender import PREFIX, KubeOptions
from quasched.kube.gangs import GROUP_LABEL
from quasched.kube.preemption import PREEMPTING, PROTECTED_S
from quasched.kube.verdicts import NO_GPU
from quasched.model.nodes import NodeSpec

NODES = ["g0", "g1"]


class EvictingApi(GroupApi):
    """:class:`GroupApi` with the Eviction API: a pod named in ``budgets`` is refused (429, as a PodDisruptionBudget
    allowing no disruption is), dry runs change nothing, an eviction marks the pod deleted (its kubelet then stops
    it: the test ends it through the bridge, as the sync does on the watch's DELETED)."""

    def __init__(self) -> None:
        super().__init__()
        self.budgets: set[str] = set()

    def evict_pod(self, namespace: str, name: str, uid: str, dry_run: bool = False) -> None:
        pod = self.pods.get((namespace, name))
        if pod is None or pod["metadata"]["uid"] != uid:
            raise ApiError(404, f'pods "{name}" not found')
        if name in self.budgets:
            raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.")
        self.calls.append(("evict", namespace, name, dry_run))
        if not dry_run:
            pod["metadata"]["deletionTimestamp"] = "2026-12-02T10:00:00Z"


@pytest.fixture
def env(tmp_path: Path):
    api = EvictingApi()
    cluster = NodeSpec(name=np.array(NODES, dtype=object), cpu_milli=np.full(2, 96_000),
                       memory_mib=np.full(2, 768 * 1024), num_gpus=np.full(2, 8),
                       gpu_model=np.array(["A100"] * 2, dtype=object))
    app, token = make_app(tmp_path, clock=Clock(), kube=KubeOptions(client=api), cluster=cluster)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, api, token, app


def pod(name: str, gpus: int, priority: int = 0, queue: str | None = None, group: str | None = None) -> dict[str, Any]:
    """A GPU pod of ``priority`` (as the API server resolves its PriorityClass), stored in the fake API server."""
    p = gpu_pod(name, gpus=gpus, queue=queue)
    p["spec"]["priority"] = priority
    p["spec"]["terminationGracePeriodSeconds"] = 5
    if group is not None:
        p["metadata"]["labels"] = {GROUP_LABEL: group}
    API_PODS["team-a", name] = copy.deepcopy(p)
    return p


def run(client: TestClient, p: dict[str, Any], node: str) -> None:
    """``p`` filtered onto ``node`` alone and bound there: a running job."""
    reply = post(client, "filter", args(p, names=[node]))
    assert reply["NodeNames"] == [node], reply
    assert post(client, "bind", bind_args(p, node)) == {"Error": ""}


def evictions(api: EvictingApi) -> list[tuple[str, bool]]:
    return [(c[2], c[3]) for c in api.calls if c[0] == "evict"]


def jobs(client: TestClient, token: str) -> dict[str, dict[str, Any]]:
    return {j["name"].split("/")[1]: j for j in client.get("/api/v1/jobs", headers=bearer(token)).json()}


def gone(app: Any, p: dict[str, Any]) -> None:
    """The pod's kubelet stopped it and the API server deleted it: the sync's DELETED."""
    app.state.kube.release(p["metadata"]["uid"], "cancelled")


@pytest.fixture
def full(env):
    """g0: a (4 GPUs, priority 0) and b (4, priority 500); g1: c (2, priority 0) and d (6, priority 0)."""
    client, api, token, app = env
    for name, gpus, priority, node in (("a", 4, 0, "g0"), ("b", 4, 500, "g0"), ("c", 2, 0, "g1"), ("d", 6, 0, "g1")):
        run(client, pod(name, gpus, priority), node)
    return env


def test_the_fewest_victims_on_one_node_are_evicted_and_their_devices_held_for_the_preemptor(full):
    client, api, token, app = full
    devices_a = API_PODS["team-a", "a"]["metadata"]["annotations"][DEVICES_ANNOTATION]
    urgent = pod("urgent", 4, priority=1000)
    reply = post(client, "filter", args(urgent, names=NODES))
    # g0: a (priority 0) before b (500); b is reprieved, a alone frees 4 GPUs. g1: d alone (c is reprieved). A tie
    # of one victim each: the first node, g0
    assert reply["NodeNames"] == [] and reply["FailedNodes"] == dict.fromkeys(NODES, PREEMPTING)
    app.state.kube.evictions.drain()
    assert evictions(api) == [("a", True), ("a", False)]  # a dry run, then the eviction
    a = jobs(client, token)["a"]
    assert a["state"] == "preempting" and a["reason"]["code"] == "Preempted"
    assert a["reason"]["evidence"]["preempted_by"] == "pod team-a/urgent"
    # tried again while a stops: it waits, nothing more is evicted
    assert post(client, "filter", args(urgent, names=NODES))["FailedNodes"] == dict.fromkeys(NODES, PREEMPTING)
    app.state.kube.evictions.drain()
    assert len(evictions(api)) == 2
    gone(app, API_PODS["team-a", "a"])
    # a's devices are held for urgent: a pod of lower priority arriving first does not get them, and preempts nothing
    late = pod("late", 4, priority=0)
    reply = post(client, "filter", args(late, names=NODES))
    assert reply["NodeNames"] == [] and set(reply["FailedNodes"].values()) == {NO_GPU}
    reply = post(client, "filter", args(urgent, names=NODES))
    assert reply["NodeNames"] == ["g0"]
    assert post(client, "bind", bind_args(urgent, "g0")) == {"Error": ""}
    assert API_PODS["team-a", "urgent"]["metadata"]["annotations"][DEVICES_ANNOTATION] == devices_a
    states = {name: j["state"] for name, j in jobs(client, token).items()}
    assert states == {"a": "cancelled", "b": "running", "c": "running", "d": "running", "urgent": "running"}
    assert jobs(client, token)["a"]["reason"]["code"] == "Preempted"
    app.state.kube.evictions.drain()
    assert len(evictions(api)) == 2


def test_a_pod_of_equal_priority_preempts_nothing(full):
    client, api, token, app = full
    reply = post(client, "filter", args(pod("same", 4, priority=0), names=NODES))
    assert set(reply["FailedNodes"].values()) == {NO_GPU}
    app.state.kube.evictions.drain()
    assert evictions(api) == []


def test_victims_are_only_on_kube_schedulers_candidates(full):
    client, api, token, app = full
    reply = post(client, "filter", args(pod("urgent", 4, priority=1000), names=["g1"]))
    assert reply["FailedNodes"] == {"g1": PREEMPTING}
    app.state.kube.evictions.drain()
    assert evictions(api) == [("d", True), ("d", False)]


def test_a_disruption_budget_refusal_evicts_nothing_and_the_next_try_chooses_other_victims(full):
    client, api, token, app = full
    api.budgets.add("a")
    urgent = pod("urgent", 4, priority=1000)
    post(client, "filter", args(urgent, names=NODES))
    app.state.kube.evictions.drain()
    assert evictions(api) == []  # the dry run was refused: nothing stopped
    assert jobs(client, token)["a"]["state"] == "running"
    post(client, "filter", args(urgent, names=NODES))
    app.state.kube.evictions.drain()
    assert evictions(api) == [("d", True), ("d", False)]  # a is protected a while: d on g1 instead
    assert app.state.kube.evictions.protected[jobs(client, token)["a"]["id"]] == pytest.approx(
        app.state.service.clock() + PROTECTED_S)


def test_a_gang_victim_is_evicted_with_every_member(env):
    client, api, token, app = env
    api.groups["coscheduling", "team-a", "train"] = {"metadata": {"name": "train", "namespace": "team-a"},
                                                     "spec": {"minMember": 1}}
    run(client, pod("w0", 8, group="train"), "g0")  # a group of minimum 1: each member binds alone
    run(client, pod("w1", 4, group="train"), "g1")
    run(client, pod("x", 4, priority=100), "g1")
    post(client, "filter", args(pod("urgent", 8, priority=1000), names=["g0"]))
    app.state.kube.evictions.drain()
    # w0 frees g0; w1 of its group on g1 stops with it; x (priority 100) is not touched
    assert sorted(evictions(api)) == [("w0", False), ("w0", True), ("w1", False), ("w1", True)]
    states = {name: j["state"] for name, j in jobs(client, token).items()}
    assert states == {"w0": "preempting", "w1": "preempting", "x": "running"}


def test_a_queue_within_its_quota_reclaims_what_another_borrows(env):
    client, api, token, app = env
    for name in ("lend", "borrow"):
        r = client.put(f"/api/v1/queues/{name}", json={"quota": {"A100": 8}, "cohort": "lab"}, headers=bearer(token))
        assert r.status_code == 200, r.text
    run(client, pod("mine", 8, queue="borrow"), "g0")
    run(client, pod("lent", 8, queue="borrow"), "g1")  # 8 of lend's nominal 8, borrowed
    reply = post(client, "filter", args(pod("back", 8, queue="lend"), names=NODES))  # equal priority: reclaim
    assert reply["FailedNodes"] == dict.fromkeys(NODES, PREEMPTING)
    app.state.kube.evictions.drain()
    assert [e for e in evictions(api) if not e[1]] == [("mine", False)] or \
        [e for e in evictions(api) if not e[1]] == [("lent", False)]
    assert len(evictions(api)) == 2  # one of borrow's two pods: what it borrows, no more


def test_preempt_verb_answers_no_victims(env):
    client, api, token, app = env
    body = {"Pod": pod("urgent", 4, priority=1000), "NodeNameToVictims": {"g0": {"Pods": [], "NumPDBViolations": 0}}}
    r = client.post(f"{PREFIX}/preempt", json=body)
    assert r.status_code == 200 and r.json() == {"NodeNameToMetaVictims": {}}
    assert client.post(f"{PREFIX}/preempt", json={"Pod": "x"}).status_code == 400


def test_a_pod_that_declines_to_preempt_evicts_nothing(full):
    client, api, token, app = full
    meek = pod("meek", 4, priority=1000)
    meek["spec"]["preemptionPolicy"] = "Never"
    reply = post(client, "filter", args(meek, names=NODES))
    assert set(reply["FailedNodes"].values()) == {NO_GPU}
    app.state.kube.evictions.drain()
    assert evictions(api) == []


def test_a_standby_replica_evicts_nothing(full):
    client, api, token, app = full
    app.state.kube.options = dataclasses.replace(app.state.kube.options, lease="kube-system/sched")
    app.state.kube.active = False  # another replica's kube-scheduler holds the Lease
    reply = post(client, "filter", args(pod("urgent", 4, priority=1000), names=NODES))
    assert PREEMPTING not in reply["FailedNodes"].values()
    app.state.kube.evictions.drain()
    assert evictions(api) == []


def test_an_eviction_refused_after_its_dry_run_stops_the_plan_and_the_evicted_room_is_not_held(env):
    client, api, token, app = env
    api.groups["coscheduling", "team-a", "train"] = {"metadata": {"name": "train", "namespace": "team-a"},
                                                     "spec": {"minMember": 1}}
    run(client, pod("w0", 8, group="train"), "g0")
    run(client, pod("w1", 8, group="train"), "g1")
    evict = api.evict_pod

    def refuse_w1_for_real(namespace: str, name: str, uid: str, dry_run: bool = False) -> None:
        if name == "w1" and not dry_run:  # the budget changed between the dry run and the eviction
            raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.")
        evict(namespace, name, uid, dry_run)

    api.evict_pod = refuse_w1_for_real  # type: ignore[method-assign]
    urgent = pod("urgent", 8, priority=1000)
    post(client, "filter", args(urgent, names=["g0"]))
    app.state.kube.evictions.drain()
    assert [e for e in evictions(api) if not e[1]] == [("w0", False)]  # w1 refused: nothing after it
    assert app.state.kube.evictions.nominations == {}  # urgent chooses again: the evicted w0 makes room for it
    assert post(client, "filter", args(urgent, names=["g0"]))["FailedNodes"] == {"g0": PREEMPTING}
    app.state.kube.evictions.drain()
    assert [e for e in evictions(api) if not e[1]] == [("w0", False)]  # it waits for w0, evicts nothing more


def test_a_preemptor_that_goes_away_waits_for_nothing(full):
    client, api, token, app = full
    urgent = pod("urgent", 4, priority=1000)
    post(client, "filter", args(urgent, names=NODES))
    app.state.kube.evictions.drain()
    assert list(app.state.kube.evictions.nominations) == [urgent["metadata"]["uid"]]
    app.state.kube.release(urgent["metadata"]["uid"], "cancelled")  # deleted before it bound
    assert app.state.kube.evictions.nominations == {}
    gone(app, API_PODS["team-a", "a"])
    assert app.state.kube.holds == {}  # a's devices are free, held for nobody
