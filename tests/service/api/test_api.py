"""HTTP API contract (docs/service.md): jobs, queues, nodes, auth, bad input, snapshot/metrics/events, restart.

FastAPI's TestClient on a tmp SQLite database and a 4-node cluster (tests/api_support.py);
the clock is moved by hand and timers fired with ``service.tick()``.
"""

from __future__ import annotations

import os
import stat
import warnings

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from api_support import Clock, bearer, db_url, job_body, make_app, small_cluster

from quasched.policies.registry import parse_spec
from quasched.service.loop.state import LoopOptions

API = "/api/v1"


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def env(tmp_path, clock):
    """(client, admin headers, service, vision team headers, nlp team headers) with queues vision and nlp."""
    app, token = make_app(tmp_path, clock)
    client = TestClient(app)
    admin = bearer(token)
    for team in ("vision", "nlp"):
        assert client.put(f"{API}/queues/{team}", json={}, headers=admin).status_code == 200
    teams = {}
    for team in ("vision", "nlp"):
        r = client.post(f"{API}/tokens", json={"name": f"{team}-ci", "team": team}, headers=admin)
        assert r.status_code == 201, r.text
        teams[team] = bearer(r.json()["token"])
    return client, admin, app.state.service, teams["vision"], teams["nlp"]


def submit(client, headers, **kw):
    r = client.post(f"{API}/jobs", json=job_body(**kw), headers=headers)
    assert r.status_code == 201, r.text
    return r.json()


# ---------------------------------------------------------------- jobs
def test_submit_get_list_filter(env):
    client, admin, _, vision, nlp = env
    a = submit(client, vision, team="vision", name="resnet-ft", gpus=0.5, cpu=4, memory="16GiB", duration="2h",
               gpu_model="T4")
    assert a["state"] == "running" and a["gpus"] == 0.5 and a["cpu"] == 4 and a["memory_mib"] == 16384
    assert a["duration_s"] == 7200 and a["priority_class"] == "normal" and a["priority"] == 100
    assert len(a["placement"]) == 1 and len(a["placement"][0]["devices"]) == 1 and a["started_at"] is not None
    assert a["solver"] == "policy:guard" and a["reason"] is None  # the service's one default policy
    b = submit(client, nlp, team="nlp", name="bert", gpus=8, pods=2, memory=1024)
    assert b["state"] == "running" and {p["node"] for p in b["placement"]} == {"a0", "a1"}
    # a gang that cannot fit now waits with a reason
    c = submit(client, nlp, team="nlp", name="big", gpus=8, gpu_model="A100")
    assert c["state"] == "pending" and c["reason"]["code"] in ("InsufficientResources", "Fragmented")
    assert c["position"] == 1
    got = client.get(f"{API}/jobs/{a['id']}", headers=nlp).json()  # any token reads
    assert got["name"] == "resnet-ft" and [e["kind"] for e in got["events"]] == ["submitted", "started"]
    assert [j["id"] for j in client.get(f"{API}/jobs", headers=admin).json()] == [c["id"], b["id"], a["id"]]
    assert [j["id"] for j in client.get(f"{API}/jobs?team=nlp", headers=admin).json()] == [c["id"], b["id"]]
    assert [j["id"] for j in client.get(f"{API}/jobs?state=pending", headers=admin).json()] == [c["id"]]
    assert [j["id"] for j in client.get(f"{API}/jobs?limit=1&offset=1", headers=admin).json()] == [b["id"]]
    assert client.get(f"{API}/jobs?state=bogus", headers=admin).status_code == 422


def test_cancel_complete_and_conflicts(env):
    client, admin, _, vision, nlp = env
    a = submit(client, vision, team="vision", gpus=8, memory="1Gi")
    b = submit(client, vision, team="vision", gpus=8, memory="1Gi")
    c = submit(client, vision, team="vision", gpus=8, memory="1Gi")
    assert [a["state"], b["state"], c["state"]] == ["running", "running", "pending"]
    r = client.post(f"{API}/jobs/{c['id']}/complete", json={"failed": False}, headers=vision)
    assert r.status_code == 409 and "not running" in r.json()["detail"]
    r = client.post(f"{API}/jobs/{a['id']}/complete", json={"failed": True}, headers=vision)
    assert r.status_code == 200 and r.json()["state"] == "failed" and r.json()["finished_at"] is not None
    # the freed node goes to the pending job in the same request
    assert client.get(f"{API}/jobs/{c['id']}", headers=vision).json()["state"] == "running"
    r = client.post(f"{API}/jobs/{b['id']}/cancel", headers=vision)
    assert r.status_code == 200 and r.json()["state"] == "cancelled" and r.json()["placement"] == []
    assert client.post(f"{API}/jobs/{b['id']}/cancel", headers=vision).status_code == 409
    assert client.post(f"{API}/jobs/{a['id']}/complete", headers=vision).status_code == 409
    # complete without a body means succeeded
    assert client.post(f"{API}/jobs/{c['id']}/complete", headers=admin).json()["state"] == "succeeded"
    for path in ("", "/cancel", "/complete"):
        method = client.get if not path else client.post
        assert method(f"{API}/jobs/999{path}", headers=admin).status_code == 404


def test_duration_finishes_on_tick(env, clock):
    client, admin, service, vision, _ = env
    a = submit(client, vision, team="vision", gpus=1, duration="90m")
    clock.advance(90 * 60 - 1)
    service.tick()
    assert client.get(f"{API}/jobs/{a['id']}", headers=admin).json()["state"] == "running"
    clock.advance(1)
    service.tick()
    got = client.get(f"{API}/jobs/{a['id']}", headers=admin).json()
    assert got["state"] == "succeeded" and got["finished_at"] == got["started_at"] + 5400


def test_client_token_is_idempotent(env):
    client, admin, _, vision, _ = env
    first = client.post(f"{API}/jobs", json=job_body(team="vision", client_token="abc"), headers=vision)
    again = client.post(f"{API}/jobs", json=job_body(team="vision", client_token="abc"), headers=vision)
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert len(client.get(f"{API}/jobs", headers=admin).json()) == 1
    other = client.post(f"{API}/jobs", json=job_body(team="vision", gpus=2, client_token="abc"), headers=vision)
    assert other.status_code == 409
    assert len(client.get(f"{API}/jobs", headers=admin).json()) == 1
    # still idempotent once the job has finished
    client.post(f"{API}/jobs/{first.json()['id']}/cancel", headers=vision)
    late = client.post(f"{API}/jobs", json=job_body(team="vision", client_token="abc"), headers=vision)
    assert late.status_code == 200 and late.json()["state"] == "cancelled"


def test_priority_and_cpu_only(env):
    client, admin, _, vision, _ = env
    cpu = submit(client, vision, team="vision", gpus=0, cpu=0.5, memory="512MiB", priority_class="high")
    assert cpu["state"] == "running" and cpu["priority"] == 1000 and cpu["gpus"] == 0
    assert cpu["placement"][0]["devices"] == []


# ---------------------------------------------------------------- queues
def test_queues_quota_and_admin_only(env):
    client, admin, _, vision, nlp = env
    r = client.put(f"{API}/queues/vision", json={"quota": {"A100": 1}, "weight": 2}, headers=admin)
    assert r.status_code == 200 and r.json()["quota"] == {"A100": 1} and r.json()["weight"] == 2
    assert client.put(f"{API}/queues/vision", json={"quota": {"A100": 9}}, headers=vision).status_code == 403
    a = submit(client, vision, team="vision", gpus=1, gpu_model="A100")
    b = submit(client, vision, team="vision", gpus=1, gpu_model="A100")
    assert a["state"] == "running" and b["state"] == "pending" and b["reason"]["code"] == "WaitingForQuota"
    queues = {q["name"]: q for q in client.get(f"{API}/queues", headers=nlp).json()}
    assert set(queues) == {"default", "vision", "nlp"}
    assert queues["vision"]["used_gpus"] == 1 and queues["vision"]["pending"] == 1 and queues["vision"]["running"] == 1
    # raising the quota admits the waiting job
    client.put(f"{API}/queues/vision", json={"quota": {"A100": 2}}, headers=admin)
    assert client.get(f"{API}/jobs/{b['id']}", headers=admin).json()["state"] == "running"
    bad = client.put(f"{API}/queues/vision", json={"quota": {"A100": -1}, "weight": 0}, headers=admin)
    assert bad.status_code == 422
    assert {tuple(e["loc"][:2]) for e in bad.json()["detail"]} >= {("body", "quota"), ("body", "weight")}


# ---------------------------------------------------------------- nodes
def test_nodes_cordon_drain_devices(env):
    client, admin, _, vision, _ = env
    nodes = {n["name"]: n for n in client.get(f"{API}/nodes", headers=vision).json()}
    assert set(nodes) == {"a0", "a1", "t0", "c0"} and nodes["t0"]["num_gpus"] == 2
    assert nodes["t0"]["gpu_model"] == "T4" and nodes["c0"]["num_gpus"] == 0
    assert client.patch(f"{API}/nodes/a0", json={"cordoned": True}, headers=vision).status_code == 403
    r = client.patch(f"{API}/nodes/a0", json={"cordoned": True}, headers=admin)
    assert r.status_code == 200 and r.json()["cordoned"]
    jobs = [submit(client, vision, team="vision", gpus=4, gpu_model="A100", memory="1Gi") for _ in range(2)]
    assert [j["placement"][0]["node"] for j in jobs] == ["a1", "a1"]
    third = submit(client, vision, team="vision", gpus=4, gpu_model="A100", memory="1Gi")
    assert third["state"] == "pending"
    assert client.patch(f"{API}/nodes/a0", json={"cordoned": False}, headers=admin).json()["cordoned"] is False
    assert client.get(f"{API}/jobs/{third['id']}", headers=admin).json()["placement"][0]["node"] == "a0"
    # a failed device: its job goes back to the queue and lands elsewhere
    device = jobs[0]["placement"][0]["devices"][0]
    r = client.put(f"{API}/nodes/a1/devices/{device}", json={"healthy": False}, headers=admin)
    assert r.status_code == 200 and r.json()["gpu_healthy"][device] is False
    moved = client.get(f"{API}/jobs/{jobs[0]['id']}", headers=admin).json()
    assert moved["restarts"] == 1 and "evicted" in [e["kind"] for e in moved["events"]]
    assert client.put(f"{API}/nodes/a1/devices/{device}", json={"healthy": True}, headers=admin).json()[
        "gpu_healthy"][device] is True
    # cordon with drain requeues the node's jobs
    client.patch(f"{API}/nodes/a0", json={"cordoned": True, "drain": True}, headers=admin)
    snap = client.get(f"{API}/snapshot", headers=admin).json()
    a0 = next(n for n in snap["nodes"] if n["name"] == "a0")
    assert a0["cordoned"] and a0["jobs"] == [] and sum(a0["gpu_used_milli"]) == 0
    assert client.patch(f"{API}/nodes/zz", json={"cordoned": True}, headers=admin).status_code == 404
    assert client.put(f"{API}/nodes/t0/devices/2", json={"healthy": False}, headers=admin).status_code == 404
    assert client.put(f"{API}/nodes/c0/devices/0", json={"healthy": False}, headers=admin).status_code == 404


def test_add_and_delete_nodes(env):
    client, admin, _, vision, _ = env
    r = client.post(f"{API}/nodes", json=[{"name": "h0", "cpu": 64, "memory": "512Gi", "gpus": 4, "gpu_model": "H100",
                                           "labels": {"zone": "b"}}], headers=admin)
    assert r.status_code == 201, r.text
    assert r.json()[0]["gpu_model"] == "H100" and r.json()[0]["labels"] == {"zone": "b"}
    assert client.post(f"{API}/nodes", json=[{"name": "h0", "cpu": 1, "memory": 1}], headers=admin).status_code == 409
    assert client.post(f"{API}/nodes", json=[{"name": "x", "cpu": 1, "memory": 1}], headers=vision).status_code == 403
    r = client.post(f"{API}/nodes", json=[{"name": "g9", "cpu": 8, "memory": "32Gi", "gpus": 2}], headers=admin)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", 0, "gpu_model"]
    for model in ("A 100", "A100|H100", "-x"):  # one model name, as in cluster files: no spaces, no '|'
        r = client.post(f"{API}/nodes", json=[{"name": "g9", "cpu": 8, "memory": "32Gi", "gpus": 2,
                                               "gpu_model": model}], headers=admin)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][-2:] == [0, "gpu_model"], model
        assert "is not a GPU model name" in r.text or "one GPU model" in r.text
    r = client.post(f"{API}/nodes", json=[{"name": "d", "cpu": 1, "memory": 1}] * 2, headers=admin)
    assert r.status_code == 422 and client.post(f"{API}/nodes", json=[], headers=admin).status_code == 422
    yaml = "pools:\n  - {name: l4, count: 2, cpu: 32, memory: 128Gi, gpu: {model: L4, count: 1}}\n"
    r = client.post(f"{API}/nodes", json={"cluster_yaml": yaml}, headers=admin)
    assert r.status_code == 201 and sorted(n["name"] for n in r.json()) == ["l4-0", "l4-1"]
    bad = client.post(f"{API}/nodes", json={"cluster_yaml": "pools: 3"}, headers=admin)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "cluster_yaml"]
    job = submit(client, vision, team="vision", gpus=2, gpu_model="H100")
    assert job["placement"][0]["node"] == "h0"
    assert client.delete(f"{API}/nodes/h0", headers=admin).status_code == 204
    assert client.delete(f"{API}/nodes/h0", headers=admin).status_code == 404
    after = client.get(f"{API}/jobs/{job['id']}", headers=admin).json()
    assert after["state"] == "pending" and after["placement"] == []
    assert "h0" not in {n["name"] for n in client.get(f"{API}/nodes", headers=admin).json()}


# ---------------------------------------------------------------- auth
ROUTES = [("get", "/jobs"), ("post", "/jobs"), ("get", "/jobs/1"), ("post", "/jobs/1/cancel"),
          ("post", "/jobs/1/complete"), ("get", "/queues"), ("put", "/queues/x"), ("get", "/nodes"),
          ("post", "/nodes"), ("patch", "/nodes/a0"), ("put", "/nodes/a0/devices/0"), ("delete", "/nodes/a0"),
          ("get", "/snapshot"), ("get", "/timeseries"), ("get", "/events"), ("get", "/stream"),
          ("post", "/tokens"), ("get", "/tokens"), ("delete", "/tokens/x"), ("get", "/whoami")]


@pytest.mark.parametrize("method,path", ROUTES)
def test_every_route_needs_a_valid_token(env, method, path):
    client = env[0]
    for headers in ({}, bearer("not-a-token"), {"Authorization": "Basic Zm9vOmJhcg=="}):
        r = client.request(method.upper(), API + path, headers=headers)
        assert r.status_code == 401, (headers, r.text)
        assert r.headers.get("www-authenticate") == "Bearer"


def test_team_tokens_act_only_for_their_team(env):
    client, admin, _, vision, nlp = env
    job = submit(client, vision, team="vision")
    assert client.post(f"{API}/jobs/{job['id']}/cancel", headers=nlp).status_code == 403
    assert client.post(f"{API}/jobs/{job['id']}/complete", headers=nlp).status_code == 403
    r = client.post(f"{API}/jobs", json=job_body(team="vision"), headers=nlp)
    assert r.status_code == 403
    assert client.put(f"{API}/queues/nlp", json={}, headers=nlp).status_code == 403
    assert client.post(f"{API}/tokens", json={"name": "x", "admin": True}, headers=nlp).status_code == 403
    assert client.delete(f"{API}/nodes/c0", headers=nlp).status_code == 403
    assert client.get(f"{API}/whoami", headers=nlp).json() == {"name": "nlp-ci", "team": "nlp", "admin": False}
    assert client.post(f"{API}/jobs/{job['id']}/cancel", headers=vision).status_code == 200
    # an admin acts for every team
    assert client.post(f"{API}/jobs", json=job_body(team="nlp"), headers=admin).status_code == 201
    assert client.post(f"{API}/tokens", json={"name": "x", "team": "nlp", "admin": True},
                       headers=admin).status_code == 422


def test_first_start_writes_an_admin_token_file(tmp_path):
    app, token = make_app(tmp_path)
    mode = stat.S_IMODE(os.stat(tmp_path / "quasched.token").st_mode)
    assert mode == 0o600
    assert app.state.service.new_admin_token == token
    app.state.service.store.close()  # the first server is gone (it held the database's lock)
    app2, token2 = make_app(tmp_path)  # a restart keeps the token
    assert app2.state.service.new_admin_token is None and token2 == token
    assert TestClient(app2).get(f"{API}/whoami", headers=bearer(token)).json()["admin"] is True


# ---------------------------------------------------------------- bad input
BAD = [
    ({"cpu": -1}, "cpu"), ({"cpu": 0}, "cpu"), ({"cpu": 1e9}, "cpu"), ({"cpu": "lots"}, "cpu"),
    ({"memory": "-5Gi"}, "memory"), ({"memory": "16GB"}, "memory"), ({"memory": "1e30Ti"}, "memory"),
    ({"memory": True}, "memory"), ({"gpus": -1}, "gpus"), ({"gpus": 1.5}, "gpus"), ({"gpus": 1e6}, "gpus"),
    ({"gpus": 0.0001}, "gpus"), ({"gpus": 0.9999}, "gpus"),
    ({"gpus": 0.5, "pods": 0}, "pods"), ({"pods": 5000}, "pods"), ({"pods": 1.5}, "pods"),
    ({"duration": "-2h"}, "duration"), ({"duration": "2 fortnights"}, "duration"), ({"duration": 0}, "duration"),
    ({"duration": 1e12}, "duration"), ({"duration": ""}, "duration"),
    ({"gpu_model": "H100"}, "gpu_model"), ({"gpu_model": "A100 | V100"}, "gpu_model"),
    ({"gpu_model": "A100|"}, "gpu_model"), ({"gpu_model": "a\x00b"}, "gpu_model"), ({"team": "nobody"}, "team"), ({"team": "bad team!"}, "team"),
    ({"priority_class": "urgent"}, "priority_class"), ({"name": ""}, "name"), ({"name": "a\x00b"}, "name"),
    ({"name": "x" * 500}, "name"), ({"surprise": 1}, "surprise"),
    ({"gpus": 16}, "gpus"),  # more GPUs than any node has: infeasible
    ({"gpus": 0, "cpu": 1000}, "cpu"),
]


@pytest.mark.parametrize("change,field", BAD, ids=[f"{f}={list(c.values())[0]!r}"[:40] for c, f in BAD])
def test_bad_submissions_name_the_field_and_store_nothing(env, change, field):
    client, admin, service, vision, _ = env
    r = client.post(f"{API}/jobs", json=job_body(**{"team": "vision", **change}), headers=admin)
    assert r.status_code == 422, r.text
    locs = [e["loc"] for e in r.json()["detail"]]
    assert ["body", field] in [loc[:2] for loc in locs], locs
    assert client.get(f"{API}/jobs", headers=admin).json() == []
    assert service.ctl.jobs == {}


@pytest.mark.parametrize("raw,field", [('{"cpu": NaN}', "cpu"), ('{"cpu": Infinity}', "cpu"),
                                       ('{"gpus": -Infinity}', "gpus"), ('{"memory": NaN}', "memory"),
                                       ('{"duration": NaN}', "duration")])
def test_non_finite_numbers_are_422(env, raw, field):
    client, admin, *_ = env
    body = job_body(team="vision")
    body.pop(field, None)
    text = "{" + ", ".join(f'"{k}": {v!r}'.replace("'", '"') for k, v in body.items()) + ", " + raw[1:]
    r = client.post(f"{API}/jobs", content=text, headers={**admin, "Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert ["body", field] in [e["loc"][:2] for e in r.json()["detail"]]
    assert client.get(f"{API}/jobs", headers=admin).json() == []


def test_malformed_requests_are_4xx(env):
    client, admin, *_ = env
    assert client.post(f"{API}/jobs", content="{not json", headers={**admin, "Content-Type": "application/json"}
                       ).status_code == 422
    assert client.post(f"{API}/jobs", json=[1, 2], headers=admin).status_code == 422
    assert client.get(f"{API}/jobs/abc", headers=admin).status_code == 422
    assert client.get(f"{API}/jobs/{2**70}", headers=admin).status_code == 422
    assert client.get(f"{API}/jobs?limit=0", headers=admin).status_code == 422
    assert client.get(f"{API}/events?after=-1", headers=admin).status_code == 422
    assert client.patch(f"{API}/nodes/a0", json={"cordoned": "maybe"}, headers=admin).status_code == 422


def test_units_are_converted(env):
    client, admin, *_ = env
    for memory, mib in (("16GiB", 16384), ("512MiB", 512), ("1.5Gi", 1536), (2048, 2048), ("0.5Ti", 1 << 19)):
        assert submit(client, admin, team="vision", gpus=0, cpu=1, memory=memory)["memory_mib"] == mib
    for duration, seconds in (("2h", 7200), ("90m", 5400), ("30s", 30), (45, 45), ("1h30m", 5400), ("1d", 86400)):
        assert submit(client, admin, team="vision", gpus=0, cpu=1, duration=duration)["duration_s"] == seconds
    assert submit(client, admin, team="vision", gpus=0.3333, cpu=1)["gpus"] == 0.333


# ---------------------------------------------------------------- snapshot, metrics, events
def test_snapshot_metrics_events(env, clock):
    client, admin, service, vision, _ = env
    submit(client, vision, team="vision", gpus=8, gpu_model="A100")
    submit(client, vision, team="vision", gpus=0.5, gpu_model="T4")
    pending = submit(client, vision, team="vision", gpus=8, pods=2, gpu_model="A100")
    snap = client.get(f"{API}/snapshot", headers=vision).json()
    assert snap["gpus"] == 18 and snap["running"] == 2 and snap["pending"] == 1
    assert snap["gpu_allocation_pct"] == pytest.approx(100 * 8.5 / 18)
    used = {n["name"]: sum(n["gpu_used_milli"]) for n in snap["nodes"]}
    assert sorted(used.values()) == [0, 0, 500, 8000]
    text = client.get("/metrics", headers=vision).text
    assert "quasched_gpu_allocation_percent 47.2" in text
    assert 'quasched_jobs_submitted_total{team="vision"} 3.0' in text
    assert 'quasched_jobs_started_total{team="vision"} 2.0' in text
    assert "quasched_running_jobs 2.0" in text
    code = client.get(f"{API}/jobs/{pending['id']}", headers=admin).json()["reason"]["code"]
    assert f'quasched_pending_jobs{{reason="{code}"}} 1.0' in text
    assert 'quasched_nodes{state="schedulable"} 4.0' in text
    assert "quasched_scheduling_decision_seconds_count" in text
    assert 'quasched_http_request_duration_seconds_count{method="POST",route="/api/v1/jobs",status="201"} 3.0' in text
    client.post(f"{API}/jobs/{pending['id']}/cancel", headers=vision)
    assert 'quasched_jobs_finished_total{state="cancelled"} 1.0' in client.get("/metrics", headers=vision).text
    events = client.get(f"{API}/events", headers=vision).json()
    assert [e["kind"] for e in events] == ["submitted", "started", "submitted", "started", "submitted", "cancelled"]
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    after = client.get(f"{API}/events?after={events[3]['id']}&limit=1", headers=vision).json()
    assert [e["kind"] for e in after] == ["submitted"]
    assert [e["kind"] for e in client.get(f"{API}/events?job_id={pending['id']}", headers=vision).json()] == [
        "submitted", "cancelled"]
    samples = client.get(f"{API}/timeseries", headers=vision).json()
    assert samples and set(samples[0]) == {"time", "gpu_allocation_pct", "fragmentation_pct", "pending"}


def test_snapshot_free_gpus_and_those_the_typical_jobs_cannot_use(env):
    client, admin, _, vision, _ = env
    snap = client.get(f"{API}/snapshot", headers=admin).json()
    assert (snap["free_gpus"], snap["free_whole_gpus"], snap["fragmented_gpus"]) == (18, 18, None)  # no job yet
    submit(client, vision, team="vision", gpus=0.5, gpu_model="T4")  # the typical job: half a T4
    snap = client.get(f"{API}/snapshot", headers=admin).json()
    assert (snap["free_gpus"], snap["free_whole_gpus"]) == (17.5, 17)
    # a half-T4 job can use the T4 node's 1.5 free GPUs, none of the 16 free A100s
    assert snap["fragmented_gpus"] == 16 and snap["fragmentation_pct"] == pytest.approx(100 * 16 / 17.5)
    submit(client, vision, team="vision", gpus=1, gpu_model="A100")  # a second shape: now half the typical jobs
    snap = client.get(f"{API}/snapshot", headers=admin).json()
    # a whole-A100 job can use the 15 free A100s, not the T4 node's 1.5 GPUs; a half-T4 job the reverse:
    # 1/2 x 1.5 + 1/2 x 15
    assert snap["free_gpus"] == 16.5 and snap["fragmented_gpus"] == 8.25


def test_openapi_and_docs(env):
    client = env[0]
    schema = client.get("/openapi.json").json()
    assert {"/api/v1/jobs", "/api/v1/jobs/{job_id}/cancel", "/api/v1/stream"} <= set(schema["paths"])
    assert client.get("/docs").status_code == 200
    assert client.get("/healthz").json() == {"status": "ok", "role": "leader"}
    assert client.get("/readyz").json() == {"status": "ready", "role": "leader", "epoch": 1}
    page = client.get("/")  # the dashboard if it is installed, else the API docs
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]


# ---------------------------------------------------------------- restart
def test_restart_restores_running_jobs_on_their_devices(tmp_path, clock):
    app, token = make_app(tmp_path, clock)
    client, admin = TestClient(app), bearer(token)
    client.put(f"{API}/queues/vision", json={"quota": {"A100": 4, "T4": 1}}, headers=admin)
    jobs = [submit(client, admin, team="vision", gpus=g, gpu_model=m, duration=d)
            for g, m, d in ((0.5, "T4", "1h"), (2, "A100", None), (2, "A100", "2h"), (4, "A100", None))]
    assert [j["state"] for j in jobs] == ["running", "running", "running", "pending"]
    client.patch(f"{API}/nodes/a0", json={"cordoned": True}, headers=admin)
    spare = 1 - jobs[0]["placement"][0]["devices"][0]  # the T4 device the share does not use
    client.put(f"{API}/nodes/t0/devices/{spare}", json={"healthy": False}, headers=admin)
    before = client.get(f"{API}/snapshot", headers=admin).json()
    app.state.service.store.close()

    app2 = make_app(tmp_path, clock)[0]
    client2 = TestClient(app2)
    after = client2.get(f"{API}/snapshot", headers=admin).json()
    occupancy = lambda snap: [{k: v for k, v in n.items() if k != "frag_milli"} for n in snap["nodes"]]  # noqa: E731
    assert occupancy(after) == occupancy(before)  # fragmentation follows typical pods learned since the start
    for job in jobs:
        again = client2.get(f"{API}/jobs/{job['id']}", headers=admin).json()
        assert (again["state"], again["placement"]) == (job["state"], job["placement"])
    queue = next(q for q in client2.get(f"{API}/queues", headers=admin).json() if q["name"] == "vision")
    assert queue["used_gpus"] == 4.5 and queue["quota"] == {"A100": 4, "T4": 1} and queue["pending"] == 1
    # timers come back too: the 1 h job finishes after its hour
    clock.advance(3600)
    app2.state.service.tick()
    assert client2.get(f"{API}/jobs/{jobs[0]['id']}", headers=admin).json()["state"] == "succeeded"
    # and the service keeps numbering after the stored jobs
    assert submit(client2, admin, team="vision", gpus=0)["id"] == jobs[-1]["id"] + 1


def test_default_queue_and_cluster_on_a_fresh_database(tmp_path):
    from quasched.service.api.app import create_app

    app = create_app(db_url(tmp_path), clock=Clock())
    token = (tmp_path / "quasched.token").read_text().strip()
    client = TestClient(app)
    assert [q["name"] for q in client.get(f"{API}/queues", headers=bearer(token)).json()] == ["default"]
    assert len(client.get(f"{API}/nodes", headers=bearer(token)).json()) == 120
    app.state.service.store.close()
    # a later start with another --cluster keeps the registered nodes
    app2 = create_app(db_url(tmp_path), small_cluster(), clock=Clock())
    assert len(TestClient(app2).get(f"{API}/nodes", headers=bearer(token)).json()) == 120


@pytest.mark.parametrize("policy", ["guard", "power"])
def test_recommended_policies_learn_the_typical_pods_from_submitted_jobs(tmp_path, policy):
    """`serve`'s default (guard) and power know no workload up front: their terms follow the jobs submitted."""
    app, token = make_app(tmp_path, Clock(), options=LoopOptions(policy=parse_spec(policy)))
    client, admin = TestClient(app), bearer(token)
    assert client.put(f"{API}/queues/vision", json={}, headers=admin).status_code == 200
    jobs = [submit(client, admin, team="vision", gpus=g, cpu=4, memory="16GiB") for g in (0.5, 1, 2, 0.5)]
    assert all(j["state"] == "running" and j["solver"] == f"policy:{policy}" for j in jobs)
    service = app.state.service
    assert service.ctl.window.current is not None  # the window learned the submitted shapes
    service.store.close()


def test_one_default_policy_from_the_cli_to_the_loop():
    """`quasched serve`'s --policy default, LoopOptions' and create_app's are one: DEFAULT_POLICY, a parsed spec."""
    from typer.main import get_command

    from quasched.cli import app as cli
    from quasched.service.domain import DEFAULT_POLICY

    serve = get_command(cli).commands["serve"]  # type: ignore[attr-defined]
    assert next(p.default for p in serve.params if p.name == "policy") == DEFAULT_POLICY == "guard"
    assert LoopOptions().policy == parse_spec(DEFAULT_POLICY)
