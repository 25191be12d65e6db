"""The HTTP lifecycle of ``quasched serve`` on real uvicorn servers: a revoked or expired token's open streams
(the live stream, a followed log) end, on this server and on another sharing the PostgreSQL store; ``/docs`` works
offline under the same-origin policy; a server still starting is alive (``/healthz``) and answers every other
request 503 "starting" at once."""

from __future__ import annotations

import queue
import re
import socket
import sqlite3
import subprocess
import threading
import time
from contextlib import ExitStack

import httpx
import pytest
from api_support import Clock, bearer, job_body, live_server, make_app
from fastapi.testclient import TestClient
from pg import free_port
from serve_process import QUASCHED, wait_for
from test_service_leader import pg_app
from test_service_runs import POLITE, accounts, jobs_dir, served, submit  # noqa: F401 (fixtures)

from quasched.service.api.startup import Starting
from quasched.service.store.database import Store

pytestmark = pytest.mark.slow  # real uvicorn servers and quasched serve

API = "/api/v1"
#: seconds a stream may take to end once its token stopped working, or a server to answer (generous: shared cores)
END_S = 60


class Reader(threading.Thread):
    """Reads ``url`` (a stream) until the server ends it; ``status`` once the response started."""

    def __init__(self, url: str, params: dict | None = None, headers: dict | None = None) -> None:
        super().__init__(daemon=True)
        self.url, self.params, self.headers = url, params, headers
        self.status = 0
        self.body = b""
        self.started = threading.Event()

    def run(self) -> None:
        with httpx.stream("GET", self.url, params=self.params, headers=self.headers,
                          timeout=httpx.Timeout(10.0, read=END_S)) as response:
            self.status = response.status_code
            self.started.set()
            for chunk in response.iter_bytes():
                self.body += chunk

    def ended(self) -> bool:
        self.join(END_S)
        return not self.is_alive()


def opened(url: str, first: bytes, **kw: dict | None) -> Reader:
    """A stream of ``url`` that has sent ``first``."""
    reader = Reader(url, **kw)
    reader.start()
    assert reader.started.wait(30) and reader.status == 200
    wait_for(lambda: first in reader.body, 30, f"{url} sends {first!r}")
    return reader


def test_revoking_a_token_ends_its_stream_and_followed_log(served):
    base, admin, _ = served
    secret = httpx.post(f"{base}{API}/tokens", json={"name": "ci", "team": "default"}, headers=admin).json()["token"]
    job = submit(base, bearer(secret), POLITE)
    wait_for(lambda: b"up" in httpx.get(f"{base}{API}/jobs/{job['id']}/logs", headers=admin).content, 60,
             "the job runs")
    stream = opened(f"{base}{API}/stream", b"retry: 2000", params={"token": secret})
    follow = opened(f"{base}{API}/jobs/{job['id']}/logs", b"up", params={"follow": "true"}, headers=bearer(secret))
    assert httpx.delete(f"{base}{API}/tokens/ci", headers=admin).status_code == 204
    assert stream.ended() and follow.ended()
    assert httpx.get(f"{base}{API}/whoami", headers=bearer(secret)).status_code == 401
    assert httpx.get(f"{base}{API}/jobs/{job['id']}", headers=admin).json()["state"] == "running"
    assert httpx.post(f"{base}{API}/jobs/{job['id']}/cancel", headers=admin).status_code == 200
    wait_for(lambda: httpx.get(f"{base}{API}/jobs/{job['id']}", headers=admin).json()["state"] == "cancelled",
             60, "the job ends")


def test_a_token_expiring_ends_its_stream(tmp_path):
    clock = Clock(time.time())
    app, token = make_app(tmp_path, clock=clock)
    with live_server(app) as base:
        short = httpx.post(f"{base}{API}/tokens", json={"name": "ci", "team": "default", "expires_in": "1h"},
                           headers=bearer(token)).json()["token"]
        stream = opened(f"{base}{API}/stream", b"retry: 2000", headers=bearer(short))
        clock.advance(3600)
        assert stream.ended()
        assert httpx.get(f"{base}{API}/whoami", headers=bearer(short)).status_code == 401


def test_a_token_revoked_on_the_leader_ends_its_stream_on_the_standby(postgres_url, tmp_path):
    with ExitStack() as running:
        leader = running.enter_context(live_server(pg_app(postgres_url, tmp_path)))
        admin = bearer((tmp_path / "token").read_text().strip())
        standby = running.enter_context(live_server(pg_app(postgres_url, tmp_path, name="b")))
        secret = httpx.post(f"{leader}{API}/tokens", json={"name": "ci", "team": "default"},
                            headers=admin).json()["token"]
        stream = opened(f"{standby}{API}/stream", b'"role":"standby"', headers=bearer(secret))
        assert httpx.delete(f"{leader}{API}/tokens/ci", headers=admin).status_code == 204
        assert stream.ended()
        assert httpx.get(f"{standby}{API}/whoami", headers=bearer(secret)).status_code == 401
        assert httpx.post(f"{leader}{API}/jobs", json=job_body(), headers=admin).status_code == 201


def answered(url: str, **kw: object) -> httpx.Response:
    """The answer to GET ``url``, sent from a thread; AssertionError unless it comes within :data:`END_S`."""
    answers: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: answers.put(httpx.get(url, timeout=END_S, **kw)), daemon=True).start()
    return answers.get(timeout=END_S)


def assert_starting(base: str) -> None:
    """A server still starting: alive (``/healthz``, liveness: 200 "starting"), not ready (``/readyz``) and not
    serving the API: 503 "starting", at once."""
    alive = answered(f"{base}/healthz")
    assert alive.status_code == 200 and alive.json() == {"status": "starting"}
    for path in ("/readyz", f"{API}/jobs"):
        r = answered(base + path)
        assert r.status_code == 503 and r.json()["reason"] == "starting" and r.headers["retry-after"] == "1"


def ready(base: str) -> bool:
    return httpx.get(f"{base}/readyz").status_code == 200


def test_quasched_serve_is_alive_and_answers_503_starting_while_its_database_is_locked(tmp_path):
    """A real ``quasched serve`` whose start-up waits on its database, locked by the test: while the lock is held it
    is alive and every other request is answered 503 "starting"; once released, the server starts and serves."""
    db = tmp_path / "quasched.db"
    Store(f"sqlite:///{db}").close()  # migrated: the server's first write, taking the lease, waits for the lock
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    port = free_port()
    proc = subprocess.Popen([str(QUASCHED), "serve", "--port", str(port), "--db", str(db)], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: listening(port), END_S, "the server listens")
        assert_starting(base)
        assert not (tmp_path / "quasched.token").exists()  # still starting: the admin token is not written yet
        lock.execute("COMMIT")
        wait_for(lambda: ready(base), END_S, "the server starts")
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok", "role": "leader"}
        token = (tmp_path / "quasched.token").read_text().strip()
        r = httpx.post(f"{base}{API}/jobs", json=job_body(gpus=0, cpu=1, memory="1GiB"), headers=bearer(token))
        assert r.status_code == 201
    finally:
        lock.close()
        proc.terminate()
        proc.wait(END_S)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


class Gate:
    """An extension whose start waits until the test opens the gate (as the kube sync's first list waits on the
    API server)."""

    def __init__(self) -> None:
        self.reached, self.opened = threading.Event(), threading.Event()

    def __call__(self, app, service) -> Gate:
        return self

    def start(self) -> None:
        self.reached.set()
        assert self.opened.wait(END_S)

    def stop(self) -> None:
        pass


def test_a_server_whose_extension_is_still_starting_is_alive_and_answers_503_starting(tmp_path):
    gate = Gate()
    front = Starting(lambda: make_app(tmp_path, extensions=[gate])[0])
    with live_server(front) as base:
        assert gate.reached.wait(END_S)
        assert_starting(base)
        assert front.app is None and not gate.opened.is_set()
        gate.opened.set()
        wait_for(lambda: ready(base), END_S, "the server serves")
        token = (tmp_path / "quasched.token").read_text().strip()
        assert httpx.get(f"{base}{API}/jobs", headers=bearer(token)).status_code == 200


def test_a_server_that_failed_to_start_is_not_alive(tmp_path):
    """Once the start-up failed, ``/healthz`` too is 503 "failed", naming why (the server is stopping)."""
    def build():
        raise RuntimeError("the database is unreachable")

    failed = threading.Event()
    with TestClient(Starting(build, on_failure=failed.set)) as client:
        assert failed.wait(END_S)
        for path in ("/healthz", "/readyz"):
            r = client.get(path)
            assert r.status_code == 503 and r.json()["reason"] == "failed"
            assert "the database is unreachable" in r.json()["detail"]


def test_the_docs_are_served_from_this_server_under_the_same_origin_policy(tmp_path):
    app, _ = make_app(tmp_path)
    client = TestClient(app)
    page = client.get("/docs")
    assert page.status_code == 200
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert len(assets) == 4 and all(url.startswith("/") and not url.startswith("//") for url in assets)
    for url in ("/docs", *assets):
        r = client.get(url)
        assert r.status_code == 200 and len(r.content) > 100
        policy = r.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "script-src 'self';" in policy and "http" not in policy
    assert client.get("/openapi.json").json()["info"]["description"].count("need none") == 1
    assert client.get("/redoc").status_code == 404  # it would load from a CDN
