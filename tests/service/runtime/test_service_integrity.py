"""What a large registration, a ``kill -9`` or a second server cannot break: node registrations are bounded and
stored all or none, the API answers while one is stored, every stored job's first event is ``submitted``, and a
SQLite database has one writer under any of its names, which keeps (or takes back) the lease."""

from __future__ import annotations

import random
import socket
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from api_support import bearer, job_body, make_app
from fastapi.testclient import TestClient
from serve_process import ServeProcess, wait_for

from quasched.service.api import nodes as routes_nodes
from quasched.service.store.database import Store
from quasched.service.store.leadership import LeaderHeld

API = "/api/v1"
BOX = "pools:\n  - {name: box, count: 2, cpu: 64, memory: 256Gi, gpu: {model: A100, count: 8}}\n"


def node_list(prefix: str, count: int) -> list[dict[str, object]]:
    return [{"name": f"{prefix}-{i}", "cpu": 8, "memory": "32Gi"} for i in range(count)]


def scalar(db: Path, query: str) -> object:
    """One value read from the SQLite file ``db`` (its own connection, as another process would)."""
    with sqlite3.connect(db, timeout=30) as conn:
        return conn.execute(query).fetchone()[0]


def server(tmp_path: Path, db: str = "sqlite:///q.db") -> ServeProcess:
    (tmp_path / "box.yaml").write_text(BOX)
    return ServeProcess(db, tmp_path, extra=("--cluster", "box.yaml"))


def stop(*servers: ServeProcess) -> None:
    for one in servers:
        if one.proc is not None and one.proc.poll() is None:
            one.kill()


def until_killed(send: Callable[[], object], until: threading.Event | None = None) -> threading.Thread:
    """A started thread calling ``send()`` (a request to a server the test kills) once, or again until ``until``
    is set; the kill's transport error ends it."""
    def run() -> None:
        try:
            send()
            while until is not None and not until.is_set():
                send()
        except httpx.TransportError:  # killed
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def started_rounds(one: ServeProcess, rounds: int) -> Iterator[int]:
    """Start ``one`` for each of ``rounds`` rounds (the round's body kills it; else it is killed after)."""
    for round_ in range(rounds):
        one.start()
        try:
            yield round_
        finally:
            stop(one)


# ------------------------------------------------------------ node registrations

def test_a_registration_over_the_limits_is_refused_naming_the_field_and_the_limit(tmp_path, monkeypatch):
    app, token = make_app(tmp_path)
    admin = bearer(token)
    with TestClient(app) as client:
        huge = "pools:\n  - {name: g, count: 1000000, cpu: 32, memory: 128Gi}\n"
        reply = client.post(f"{API}/nodes", json={"cluster_yaml": huge}, headers=admin)
        assert reply.status_code == 413
        [error] = reply.json()["detail"]
        assert error["loc"] == ["body", "cluster_yaml"] and "1,000,000 nodes" in error["msg"] \
            and "at most 10,000" in error["msg"]
        reply = client.post(f"{API}/nodes", json=node_list("n", 10_001), headers=admin)
        assert reply.status_code == 413 and reply.json()["detail"][0]["loc"] == ["body", "nodes"]
        monkeypatch.setattr(routes_nodes, "MAX_CLUSTER_NODES", 6)  # the small cluster has 4
        reply = client.post(f"{API}/nodes", json=node_list("n", 3), headers=admin)
        assert reply.status_code == 422
        assert reply.json()["detail"][0]["msg"] == "the cluster would have 7 nodes; it has at most 6"
        assert client.post(f"{API}/nodes", json=node_list("n", 2), headers=admin).status_code == 201
        assert len(client.get(f"{API}/nodes", headers=admin).json()) == 6


def test_a_registration_is_one_transaction_all_nodes_or_none(tmp_path):
    app, token = make_app(tmp_path)
    admin = bearer(token)
    with TestClient(app) as client:
        assert client.post(f"{API}/nodes", json=node_list("n", 3), headers=admin).status_code == 201
        # n-2 is stored, as by another writer (memory does not know it): the whole second request is refused
        app.state.service.records.pop("n-2")
        reply = client.post(f"{API}/nodes", json=node_list("m", 50) + node_list("n", 3)[2:], headers=admin)
        assert reply.status_code == 409 and "n-2" in reply.json()["detail"]
    assert scalar(tmp_path / "quasched.db", "SELECT count(*) FROM nodes WHERE name LIKE 'm-%'") == 0
    assert scalar(tmp_path / "quasched.db", "SELECT count(*) FROM events WHERE kind = 'node-added'") == 3


@pytest.mark.slow  # real servers, kill -9
def test_the_api_answers_while_a_registration_waits_for_the_database(tmp_path):
    """The test holds SQLite's write lock, so the registration cannot commit: reads are answered meanwhile, and
    the registration after the lock is released."""
    one = server(tmp_path)
    one.start()
    try:
        admin = bearer(one.token)
        order: list[str] = []
        blocker = sqlite3.connect(tmp_path / "q.db", timeout=30, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        replies: list[httpx.Response] = []

        def register() -> None:
            replies.append(httpx.post(f"{one.url}{API}/nodes", json=node_list("n", 10_000), headers=admin,
                                      timeout=120))
            order.append("nodes")

        thread = threading.Thread(target=register)
        thread.start()
        try:
            for _ in range(30):  # the registration is under way for most of these, however the machine is loaded
                reply = httpx.get(f"{one.url}{API}/jobs", params={"limit": 1}, headers=admin, timeout=120)
                assert reply.status_code == 200
                if order:
                    break
            order.append("jobs")
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
            thread.join(timeout=120)
        assert order == ["jobs", "nodes"] and replies[0].status_code == 201, replies[0].text
        assert len(httpx.get(f"{one.url}{API}/nodes", headers=admin, timeout=30).json()) == 10_002
    finally:
        stop(one)


@pytest.mark.slow  # real servers, kill -9
def test_kill_9_during_registrations_leaves_all_their_nodes_or_none(tmp_path):
    one = server(tmp_path)
    db = tmp_path / "q.db"
    rng = random.Random(7)
    for round_ in started_rounds(one, 3):
        before = scalar(db, "SELECT count(*) FROM nodes")
        nodes = node_list(f"r{round_}", 10_000)
        register = until_killed(lambda: httpx.post(f"{one.url}{API}/nodes", json=nodes, headers=bearer(one.token),
                                                   timeout=120))
        if round_ == 0:  # at the first sign of the registration in the database
            wait_for(lambda: not register.is_alive() or scalar(db, "SELECT count(*) FROM nodes") != before, 120,
                     "the registration shows in the database")
        else:  # at a random point of it
            register.join(rng.uniform(0.0, 1.5))
        one.kill()
        after = scalar(db, "SELECT count(*) FROM nodes")
        assert after in (before, before + 10_000), f"round {round_}: {after - before} of 10,000 nodes stored"
        added = scalar(db, "SELECT count(*) FROM events WHERE kind = 'node-added'")
        assert added == after - 2  # every registered node's event, with it (the two of the first start: none)


# ------------------------------------------------------------ a job's first event

def first_events(db: Path) -> dict[int, str | None]:
    """Per stored job: the kind of its first event (None: it has none)."""
    with sqlite3.connect(db, timeout=30) as conn:
        return dict(conn.execute(
            "SELECT j.id, (SELECT e.kind FROM events e WHERE e.job_id = j.id ORDER BY e.id LIMIT 1) FROM jobs j"))


def test_a_job_whose_cycle_was_not_stored_has_its_submitted_event(tmp_path):
    app, token = make_app(tmp_path)
    service = app.state.service
    with TestClient(app) as client:
        def refuse(jobs, events):
            raise RuntimeError("disk full")

        service.store.save = refuse  # as a kill between the insert and the cycle's write
        reply = client.post(f"{API}/jobs", json=job_body(), headers=bearer(token))
        assert reply.status_code == 503
    assert first_events(tmp_path / "quasched.db") == {1: "submitted"}


@pytest.mark.slow  # real servers, kill -9
def test_every_job_s_first_event_is_submitted_after_kill_9_at_random_points(tmp_path):
    one = server(tmp_path)
    db = tmp_path / "q.db"
    rng = random.Random(11)
    for _ in started_rounds(one, 4):
        stored = scalar(db, "SELECT count(*) FROM jobs")
        stopping = threading.Event()

        def submit() -> None:
            body = {**job_body(gpus=rng.choice([0, 1, 2]), cpu=1), "duration": rng.uniform(0.05, 0.5)}
            httpx.post(f"{one.url}{API}/jobs", json=body, headers=bearer(one.token), timeout=30)

        clients = [until_killed(submit, stopping) for _ in range(8)]
        target = stored + rng.randint(5, 30)
        try:
            wait_for(lambda: scalar(db, "SELECT count(*) FROM jobs") >= target, 120, "submissions stored")
            one.kill()
        finally:
            stopping.set()
            for client in clients:
                client.join(timeout=60)
    one.start()  # recovery places what the killed server had stored
    stop(one)
    firsts = first_events(db)
    assert len(firsts) >= 20 and set(firsts.values()) == {"submitted"}


# ------------------------------------------------------------ one writer per SQLite file

@pytest.mark.slow  # real servers, kill -9
def test_a_second_server_on_a_symbolic_link_to_the_database_is_refused_and_the_first_keeps_leading(tmp_path):
    first = server(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "link.db").symlink_to(tmp_path / "q.db")
    (tmp_path / "dir-link").symlink_to(tmp_path)
    first.start()
    others = [server(tmp_path, name) for name in ("sqlite:///elsewhere/link.db", "sqlite:///dir-link/q.db",
                                                  f"sqlite:///{tmp_path}/q.db")]
    try:
        for other in others:
            with pytest.raises(RuntimeError) as refused:
                other.start()
            said = " ".join(str(refused.value).split())  # as printed, wrapped
            assert f"another quasched serve schedules this database: pid {first.proc.pid} on " in said
        assert first.ready()
        reply = httpx.post(f"{first.url}{API}/jobs", json=job_body(), headers=bearer(first.token), timeout=30)
        assert reply.status_code == 201, reply.text
    finally:
        stop(first, *others)


@pytest.mark.slow  # real servers, kill -9
def test_a_sqlite_server_that_still_holds_its_lock_takes_a_lost_lease_back(tmp_path):
    one = server(tmp_path)
    db = tmp_path / "q.db"
    one.start()
    try:
        epoch = scalar(db, "SELECT epoch FROM lease")
        with sqlite3.connect(db, timeout=30) as conn:  # as a server that wrote the lease without the lock
            conn.execute("UPDATE lease SET epoch = epoch + 1, holder = 'elsewhere:1'")
        wait_for(lambda: "stepped down" in "".join(one.output), 60, "the server sees the lease taken")
        wait_for(one.ready, 60, "the server leads again")
        assert scalar(db, "SELECT epoch FROM lease") == epoch + 2
        assert scalar(db, "SELECT holder FROM lease") == f"{socket.gethostname()}:{one.proc.pid}"
        reply = httpx.post(f"{one.url}{API}/jobs", json=job_body(), headers=bearer(one.token), timeout=30)
        assert reply.status_code == 201, reply.text
    finally:
        stop(one)


def test_a_store_whose_lock_file_was_replaced_does_not_take_the_lease_back(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/q.db")
    try:
        assert store.acquire_lease("a:1", "", None) == 1 and store.lock_intact()
        lock = tmp_path / "q.db.lock"
        lock.unlink()
        assert not store.lock_intact()
        other = Store(f"sqlite:///{tmp_path}/q.db")  # the new lock file is another server's to take
        other.acquire_lease("b:2", "", None)
        assert other.lock_intact() and not store.lock_intact()
        with pytest.raises(LeaderHeld):
            Store(f"sqlite:///{tmp_path}/q.db").acquire_lease("c:3", "", None)
        other.close()
    finally:
        store.close()
