"""The API as a new user and a hostile tester meet it: jobs that can never run, quotas on unknown models, request
size, tokens (expiry, revocation, names, teams), /metrics behind a token, the dashboard's security headers."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from api_support import Clock, bearer, job_body, make_app

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
    doc = (Path(__file__).resolve().parents[1] / "docs" / "service.md").read_text()
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
