"""Preemption and quota reclaim for GPU pods through the extender: quasched's victims, minimised at the device
level, evicted through the Eviction API (dry run first, PodDisruptionBudgets respected, gangs whole), the freed
devices held for the preemptor; hand-computed on two 8-GPU nodes."""

from __future__ import annotations

import copy
import dataclasses
import threading
import time
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
from quasched.kube.preemption import NOMINATION_SLACK_S, PREEMPTING, PROTECTED_S
from quasched.kube.reservations import PodJobs
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


# ---------------------------------------------------------------- the preemptor's time, its room and its races
POKE = "quasched.io/preemption"  # (the annotation that makes kube-scheduler try the preemptor again at once)


@pytest.fixture
def paused(full):
    """:func:`full`, with the evictions' worker held: plans queue until ``resume(app)``."""
    client, api, token, app = full
    app.state.kube.evictions._start = lambda: None  # type: ignore[method-assign]
    return full


def resume(app: Any) -> None:
    ev = app.state.kube.evictions
    del ev._start
    ev._start()
    ev.drain()


def pokes(api: EvictingApi, name: str, timeout_s: float = 5.0) -> list[dict[str, str]]:
    """The annotations quasched wrote on pod ``name`` to have it tried again (waits a little: a thread writes them)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [c[3] for c in api.calls if c[0] == "annotate" and c[2] == name and POKE in c[3]]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_the_preemptor_is_tried_again_at_once_when_its_room_is_held(full):
    client, api, token, app = full
    urgent = pod("urgent", 4, priority=1000)
    post(client, "filter", args(urgent, names=NODES))
    app.state.kube.evictions.drain()
    assert pokes(api, "urgent", timeout_s=0.2) == []  # nothing held yet: nothing to try
    gone(app, API_PODS["team-a", "a"])
    assert app.state.kube.holds[urgent["metadata"]["uid"]].node == "g0"
    [mark] = pokes(api, "urgent")  # an update of the pod: kube-scheduler moves it out of its back-off at once
    assert mark[POKE].startswith("room held on g0 until ")
    assert post(client, "filter", args(API_PODS["team-a", "urgent"], names=NODES))["NodeNames"] == ["g0"]


def test_the_nominations_deadline_counts_from_its_evictions_not_from_filter(paused):
    client, api, token, app = paused
    ev = app.state.kube.evictions
    urgent = pod("urgent", 4, priority=1000)
    post(client, "filter", args(urgent, names=NODES))
    app.state.service.clock.advance(1000)  # the worker is slow: its queue is long
    assert post(client, "filter", args(urgent, names=NODES))["FailedNodes"] == dict.fromkeys(NODES, PREEMPTING)
    assert ev._plans.qsize() == 1  # still waiting for its one plan: no second plan, no second choice
    resume(app)
    assert evictions(api) == [("a", True), ("a", False)]
    # from the evictions on: the victim's grace (5 s) and the slack
    assert ev.nominations[urgent["metadata"]["uid"]].until == app.state.service.clock() + 5 + NOMINATION_SLACK_S


def test_a_victim_stuck_terminating_keeps_its_gpus_and_the_preemptor_names_it_after_the_deadline(full):
    client, api, token, app = full
    urgent = pod("urgent", 4, priority=1000)
    post(client, "filter", args(urgent, names=NODES))
    app.state.kube.evictions.drain()
    uid = urgent["metadata"]["uid"]
    app.state.service.clock.advance(5 + NOMINATION_SLACK_S - 1)
    assert post(client, "filter", args(urgent, names=NODES))["FailedNodes"] == dict.fromkeys(NODES, PREEMPTING)
    app.state.service.clock.advance(2)  # a finalizer, or its node's kubelet gone: the pod never goes
    reply = post(client, "filter", args(urgent, names=NODES))
    says = "quasched: waiting for preempted GPU pods to stop past their grace period: team-a/a"
    assert reply["FailedNodes"] == dict.fromkeys(NODES, says)
    assert ev_node(app, uid) == ""  # its nomination ended: it waits, holding no claim and no node
    assert jobs(client, token)["a"]["state"] == "preempting"  # booked while the pod exists
    late = pod("late", 4, priority=0)
    assert set(post(client, "filter", args(late, names=NODES))["FailedNodes"].values()) == {NO_GPU}
    app.state.kube.evictions.drain()
    assert len(evictions(api)) == 2  # nothing more evicted for it
    gone(app, API_PODS["team-a", "a"])  # it goes at last: the preemptor is tried again at once, and fits
    assert pokes(api, "urgent")
    assert post(client, "filter", args(urgent, names=NODES))["NodeNames"] == ["g0"]


def ev_node(app: Any, uid: str) -> str | None:
    nom = app.state.kube.evictions.nominations.get(uid)
    return None if nom is None else nom.node


def test_a_preemptor_deleted_before_its_plan_runs_evicts_nothing(paused):
    client, api, token, app = paused
    post(client, "filter", args(pod("urgent", 4, priority=1000), names=NODES))
    del API_PODS["team-a", "urgent"]  # deleted unbound: the sync watches bound pods only, no event comes
    resume(app)
    assert evictions(api) == []
    assert app.state.kube.evictions.nominations == {}
    assert {j["state"] for j in jobs(client, token).values()} == {"running"}


def test_a_preemptor_deleted_after_its_evictions_is_held_nothing(full):
    client, api, token, app = full
    post(client, "filter", args(pod("urgent", 4, priority=1000), names=NODES))
    app.state.kube.evictions.drain()
    del API_PODS["team-a", "urgent"]  # (no event: it was never bound)
    gone(app, API_PODS["team-a", "a"])
    deadline = time.monotonic() + 5
    while app.state.kube.holds and time.monotonic() < deadline:  # the try-again finds it gone: the room is free
        time.sleep(0.02)
    assert app.state.kube.holds == {}
    late = pod("late", 4, priority=0)
    assert post(client, "filter", args(late, names=NODES))["NodeNames"] == ["g0"]


def test_a_preemptor_placed_elsewhere_before_its_plan_runs_evicts_nothing(paused):
    client, api, token, app = paused
    urgent = pod("urgent", 4, priority=1000)
    post(client, "filter", args(urgent, names=NODES))
    gone(app, API_PODS["team-a", "d"])  # d ends on its own: g1 has room now
    assert post(client, "filter", args(urgent, names=NODES))["NodeNames"] == ["g1"]
    resume(app)
    assert evictions(api) == []
    assert jobs(client, token)["a"]["state"] == "running"


def test_a_standby_by_the_time_its_plan_runs_evicts_nothing(paused):
    client, api, token, app = paused
    post(client, "filter", args(pod("urgent", 4, priority=1000), names=NODES))
    app.state.kube.options = dataclasses.replace(app.state.kube.options, lease="kube-system/sched")
    app.state.kube.active = False  # the Lease moved to another replica meanwhile
    resume(app)
    assert evictions(api) == []


def test_a_victim_deleted_before_its_eviction_is_recorded_ends_preempted_and_its_room_is_held(full):
    client, api, token, app = full
    evict = api.evict_pod

    def deleted_at_once(namespace: str, name: str, uid: str, dry_run: bool = False) -> None:
        evict(namespace, name, uid, dry_run)
        if not dry_run:  # grace 0, or a container that exits on SIGTERM: the watch's DELETED comes first
            app.state.kube.release(uid, "cancelled")

    api.evict_pod = deleted_at_once  # type: ignore[method-assign]
    urgent = pod("urgent", 4, priority=1000)
    post(client, "filter", args(urgent, names=NODES))
    app.state.kube.evictions.drain()
    a = jobs(client, token)["a"]
    assert a["state"] == "cancelled" and a["reason"]["code"] == "Preempted"
    assert a["reason"]["evidence"]["preempted_by"] == "pod team-a/urgent"
    assert app.state.kube.holds[urgent["metadata"]["uid"]].node == "g0"


def test_no_filter_takes_the_freed_devices_between_a_victims_end_and_its_preemptors_hold(full, monkeypatch):
    client, api, token, app = full
    urgent = pod("urgent", 4, priority=1000)
    post(client, "filter", args(urgent, names=NODES))
    app.state.kube.evictions.drain()
    late = pod("late", 4, priority=0)
    replies: list[Any] = []
    release = PodJobs.release

    def with_a_filter_right_after(self: Any, uid: str, outcome: str, why: str = "") -> Any:
        job = release(self, uid, outcome, why)
        other = threading.Thread(target=lambda: replies.append(app.state.kube.filter(args(late, names=NODES))))
        other.start()  # kube-scheduler's next cycle, on another thread, as the victim's job ends
        other.join(timeout=0.5)
        threads.append(other)
        return job

    threads: list[threading.Thread] = []
    monkeypatch.setattr(PodJobs, "release", with_a_filter_right_after)
    gone(app, API_PODS["team-a", "a"])
    threads[0].join(timeout=5)
    assert set(replies[0]["FailedNodes"].values()) == {NO_GPU}  # the room is urgent's, held before any filter
    assert app.state.kube.holds[urgent["metadata"]["uid"]].node == "g0"


def test_a_waiter_whose_plan_was_refused_chooses_again(paused):
    client, api, token, app = paused
    first = pod("first", 2, priority=1000)
    post(client, "filter", args(first, names=NODES))  # its plan: a, on g0 (4 GPUs freed, it takes 2)
    second = pod("second", 2, priority=1000)
    assert post(client, "filter", args(second, names=NODES))["FailedNodes"] == dict.fromkeys(NODES, PREEMPTING)
    assert evictions(api) == []  # it waits for a too (the other 2 GPUs): nothing of its own
    api.budgets.add("a")
    resume(app)  # the dry run is refused: a stays, nobody makes room for second now
    assert evictions(api) == []
    post(client, "filter", args(second, names=NODES))  # so it chooses again at once (a protected: d, on g1)
    app.state.kube.evictions.drain()
    assert evictions(api) == [("d", True), ("d", False)]


def test_a_victim_evicted_already_with_another_plans_gang_is_not_evicted_twice_and_is_waited_for(env):
    client, api, token, app = env
    api.groups["coscheduling", "team-a", "train"] = {"metadata": {"name": "train", "namespace": "team-a"},
                                                     "spec": {"minMember": 1}}
    run(client, pod("w0", 8, group="train"), "g0")
    run(client, pod("w1", 8, group="train"), "g1")
    ev = app.state.kube.evictions
    ev._start = lambda: None  # type: ignore[method-assign]
    post(client, "filter", args(pod("first", 8, priority=1000), names=["g0"]))  # its plan: w0 (and so w1)
    second = pod("second", 8, priority=1000)
    post(client, "filter", args(second, names=["g1"]))  # its plan: w1, chosen before the first plan ran
    resume(app)
    assert sorted(evictions(api)) == [("w0", False), ("w0", True), ("w1", False), ("w1", True)]  # once each
    assert ev.nominations[second["metadata"]["uid"]].victims == (jobs(client, token)["w1"]["id"],)
    gone(app, API_PODS["team-a", "w1"])
    assert app.state.kube.holds[second["metadata"]["uid"]].node == "g1"
