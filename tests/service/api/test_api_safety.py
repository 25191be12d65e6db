"""The API as a new user and a hostile tester meet it: jobs that can never run, quotas on unknown models, request
size, tokens (expiry, revocation, names, teams), /metrics behind a token, the dashboard's security headers."""

from __future__ import annotations

import re
import warnings

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from api_support import Clock, bearer, job_body, make_app
from repo import REPO

API = "/api/v1"


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def env(tmp_path, clock):
    """(client, admin headers, service)."""
    app, token = make_app(tmp_path, clock)
    return TestClient(app), bearer(token), app.state.service


def test_a_gang_bigger_than_the_cluster_is_422_saying_why(env):
    client, admin, _ = env
    r = client.post(f"{API}/jobs", json=job_body(gpus=8, pods=3, gpu_model="A100", memory="1Gi"), headers=admin)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "pods"] and "at most 2" in r.json()["detail"][0]["msg"]
    assert client.get(f"{API}/jobs", headers=admin).json() == []


def test_quota_on_an_unknown_model_is_422_and_an_unnamed_model_is_not_admissible(env):
    client, admin, _ = env
    r = client.put(f"{API}/queues/vision", json={"quota": {"Z999": 4}}, headers=admin)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "quota"]
    assert "Z999" in r.json()["detail"][0]["msg"] and "A100" in r.json()["detail"][0]["msg"]
    assert client.put(f"{API}/queues/vision", json={"quota": {"T4": 1}}, headers=admin).status_code == 200
    r = client.post(f"{API}/jobs", json=job_body(team="vision", gpus=1, gpu_model="A100"), headers=admin)
    assert r.status_code == 422 and "names none of the GPU models" in r.json()["detail"][0]["msg"]
    job = client.post(f"{API}/jobs", json=job_body(team="vision", gpus=1), headers=admin).json()
    assert job["placement"][0]["node"] == "t0"  # any model asked: only T4 is admissible


def test_the_documented_quota_example_works_on_the_built_in_cluster(tmp_path):
    doc = (REPO / "docs" / "service.md").read_text()
    line = next(li for li in doc.splitlines() if li.startswith("quasched queue ") and "--quota" in li)
    quota = {m: float(n) for m, n in re.findall(r"--quota ['\"]?([^=\s'\"]+)=(\d+)", line)}
    assert quota, line
    app, token = make_app(tmp_path, cluster=None)
    r = TestClient(app).put(f"{API}/queues/vision", json={"quota": quota}, headers=bearer(token))
    assert r.status_code == 200, r.text


def test_a_body_over_one_mib_is_413_declared_or_streamed(env):
    client, admin, _ = env
    big = job_body(name="x" * (2 * 1024 * 1024))
    r = client.post(f"{API}/jobs", json=big, headers=admin)
    assert r.status_code == 413 and len(r.content) < 1000

    def chunks():
        yield b'{"name": "'
        for _ in range(40):
            yield b"y" * 65536
        yield b'"}'

    r = client.post(f"{API}/jobs", content=chunks(), headers={**admin, "Content-Type": "application/json"})
    assert r.status_code == 413
    assert client.get(f"{API}/jobs", headers=admin).json() == []


def test_errors_never_echo_a_large_input_nor_pydantics_prefix(env):
    client, admin, _ = env
    r = client.post(f"{API}/jobs", json=job_body(memory="9" * 500_000 + "Zi", name="n" * 300_000), headers=admin)
    assert r.status_code == 422 and len(r.content) < 2000
    errors = {tuple(e["loc"]): e["msg"] for e in r.json()["detail"]}
    assert set(errors) == {("body", "memory"), ("body", "name")}
    r = client.post(f"{API}/jobs", json=job_body(duration="soon"), headers=admin)
    detail = r.json()["detail"][0]
    assert detail["msg"].startswith("'soon' is not a duration") and detail["input"] == "soon"


def test_tokens_expire_are_revoked_have_unique_names_and_existing_teams(env, clock):
    client, admin, _ = env
    assert client.put(f"{API}/queues/vision", json={}, headers=admin).status_code == 200
    r = client.post(f"{API}/tokens", json={"name": "ghost-ci", "team": "ghosts"}, headers=admin)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "team"]
    r = client.post(f"{API}/tokens", json={"name": "vision-ci", "team": "vision", "expires_in": "1h"},
                    headers=admin)
    assert r.status_code == 201 and r.json()["expires_at"] == clock() + 3600
    short = bearer(r.json()["token"])
    r = client.post(f"{API}/tokens", json={"name": "vision-ci", "team": "vision"}, headers=admin)
    assert r.status_code == 409 and "vision-ci" in r.json()["detail"]
    assert client.get(f"{API}/whoami", headers=short).status_code == 200
    clock.advance(3600)
    r = client.get(f"{API}/whoami", headers=short)
    assert r.status_code == 401 and "expired" in r.json()["detail"]
    other = bearer(client.post(f"{API}/tokens", json={"name": "vision-2", "team": "vision"},
                               headers=admin).json()["token"])
    assert client.get(f"{API}/whoami", headers=other).status_code == 200
    assert client.delete(f"{API}/tokens/vision-2", headers=other).status_code == 403
    assert client.delete(f"{API}/tokens/vision-2", headers=admin).status_code == 204
    assert client.get(f"{API}/whoami", headers=other).status_code == 401
    assert client.delete(f"{API}/tokens/nobody", headers=admin).status_code == 404
    r = client.delete(f"{API}/tokens/admin", headers=admin)
    assert r.status_code == 409 and "last working admin token" in r.json()["detail"]
    listed = {t["name"]: t for t in client.get(f"{API}/tokens", headers=admin).json()}
    assert set(listed) == {"admin", "vision-ci", "vision-2"} and "token" not in listed["admin"]
    assert listed["vision-2"]["revoked_at"] == clock() and listed["admin"]["revoked_at"] is None


def test_metrics_need_a_token_unless_public(tmp_path, clock):
    app, token = make_app(tmp_path / "a", clock)
    client = TestClient(app)
    assert client.get("/metrics").status_code == 401
    assert "quasched_gpus" in client.get("/metrics", headers=bearer(token)).text
    public = TestClient(make_app(tmp_path / "b", clock, metrics_public=True)[0])
    assert "quasched_gpus" in public.get("/metrics").text


def test_the_dashboard_is_served_with_security_headers(env):
    client, _, _ = env
    for path in ("/", "/static/app.js"):
        r = client.get(path)
        assert r.status_code == 200
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"


def test_the_new_admin_token_is_written_not_printed_in_full(tmp_path, capsys):
    _, token = make_app(tmp_path)
    err = capsys.readouterr().err
    assert token not in err and f"{token[:4]}…{token[-4:]}" in err


def test_queue_usage_is_reported_per_gpu_model(env):
    client, admin, _ = env
    client.put(f"{API}/queues/vision", json={"quota": {"T4": 2, "A100": 8}}, headers=admin)
    for model, gpus in (("T4", 1), ("A100", 2)):
        client.post(f"{API}/jobs", json=job_body(team="vision", gpus=gpus, gpu_model=model), headers=admin)
    vision = next(q for q in client.get(f"{API}/queues", headers=admin).json() if q["name"] == "vision")
    assert vision["used_gpus_by_model"] == {"A100": 2, "T4": 1} and vision["used_gpus"] == 3
