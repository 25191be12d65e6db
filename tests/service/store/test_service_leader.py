"""One writer per database: SQLite's lock refuses a second server; on PostgreSQL a standby answers reads,
refuses writes naming the leader, takes over when the leader's lease ends, and a stale leader is fenced:
it commits nothing after another took over."""

from __future__ import annotations

import math
import multiprocessing
import os
import queue
import signal
import socket
import threading
from contextlib import ExitStack

import httpx
import pytest
from alembic.script import ScriptDirectory
from api_support import Clock, bearer, db_url, job_body, live_server, make_app, small_cluster
from fastapi.testclient import TestClient
from repo import REPO
from serve_process import ServeProcess, wait_for
from sqlalchemy import Engine, event, select
from test_api_stream import next_item, read_events
from typer.testing import CliRunner

from quasched.cli import app as cli
from quasched.service.api.app import create_app
from quasched.service.domain import QueueSpec
from quasched.service.runtime.service import TICK_S
from quasched.service.store.database import EVENTS, MIGRATIONS, Store
from quasched.service.store.leadership import Fenced, LeaderHeld

pytestmark = pytest.mark.slow  # real servers, PostgreSQL, kill -9

API = "/api/v1"


def test_a_second_server_on_a_sqlite_database_is_refused_naming_the_holder(tmp_path):
    app, _ = make_app(tmp_path)
    with pytest.raises(LeaderHeld, match=f"pid {os.getpid()} on {socket.gethostname()} since "):
        make_app(tmp_path)
    result = CliRunner().invoke(cli, ["serve", "--db", db_url(tmp_path), "--port", "1"])
    assert result.exit_code != 0 and f"pid {os.getpid()}" in result.output and "quasched.db.lock" in result.output
    app.state.service.store.close()  # the holder is gone: a new server starts
    make_app(tmp_path)[0].state.service.store.close()


def test_a_sqlite_server_stopped_and_started_again_leads_again(tmp_path):
    """A stop gives the lock up; the next start takes it again (and refuses while another server holds it)."""
    app, token = make_app(tmp_path)
    for _ in range(2):
        with TestClient(app) as client:
            assert client.get("/readyz").status_code == 200
            assert client.post(f"{API}/jobs", json=job_body(), headers=bearer(token)).status_code == 201
    other, _ = make_app(tmp_path)  # the lock is free while ``app`` is stopped
    with pytest.raises(LeaderHeld):
        with TestClient(app):
            pass
    other.state.service.store.close()
    app.state.service.store.close()


def pg_app(url, tmp_path, clock=None, name="a"):
    return create_app(url, small_cluster(), token_file=tmp_path / "token", clock=clock or Clock(), lease_ttl_s=3.0,
                      advertise_url=f"http://{name}.invalid:8080")


def stored_events(url):
    """(id, epoch, kind, job_id) of every stored event, by id."""
    store = Store(url)
    try:
        with store.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(select(EVENTS.c.id, EVENTS.c.epoch, EVENTS.c.kind,
                                                          EVENTS.c.job_id).order_by(EVENTS.c.id))]
    finally:
        store.close()


def epochs_in_commit_order(url) -> bool:
    """Whether no event was written under an epoch older than one already written (no stale commit)."""
    epochs = [e for _, e, _, _ in stored_events(url)]
    return epochs == sorted(epochs)


def test_standby_reads_refuses_writes_and_takes_over_when_the_leader_stops(postgres_url, tmp_path):
    leader = pg_app(postgres_url, tmp_path)
    admin = bearer((tmp_path / "token").read_text().strip())
    with ExitStack() as running_leader:
        a = running_leader.enter_context(TestClient(leader))
        first = a.post(f"{API}/jobs", json=job_body(gpus=8, gpu_model="A100"), headers=admin).json()
        with TestClient(pg_app(postgres_url, tmp_path, name="b")) as b:
            assert a.get("/readyz").status_code == 200
            ready = b.get("/readyz")
            assert ready.status_code == 503 and ready.json()["leader"]["epoch"] == 1
            assert b.get("/healthz").json() == {"status": "ok", "role": "standby"}
            refused = b.post(f"{API}/jobs", json=job_body(), headers=admin)
            assert refused.status_code == 503 and "standby" in refused.json()["detail"]
            assert refused.headers["x-quasched-leader"] == "http://a.invalid:8080" and refused.headers["retry-after"] == "1"
            assert [j["id"] for j in b.get(f"{API}/jobs", headers=admin).json()] == [first["id"]]
            with pytest.raises(Fenced):  # below the API too: a standby's store writes nothing
                b.app.state.service.store.put_queue(QueueSpec("sneaky"))
            running_leader.close()  # the leader stops and gives the lease up
            wait_for(lambda: b.get("/readyz").status_code == 200, 60, "the standby takes over")
            assert b.get("/readyz").json()["epoch"] == 2
            assert b.get(f"{API}/jobs/{first['id']}", headers=admin).json()["placement"] == first["placement"]
            second = b.post(f"{API}/jobs", json=job_body(gpus=8, gpu_model="A100"), headers=admin)
            assert second.status_code == 201
            assert second.json()["placement"][0]["node"] != first["placement"][0]["node"]
    assert epochs_in_commit_order(postgres_url)


def test_a_token_revoked_on_the_leader_stops_working_there_and_on_the_standby_at_once(postgres_url, tmp_path):
    """The leader caches the tokens it has seen; a standby reads the store, so it follows the leader's revocations."""
    leader = pg_app(postgres_url, tmp_path)
    admin = bearer((tmp_path / "token").read_text().strip())
    with TestClient(leader) as a, TestClient(pg_app(postgres_url, tmp_path, name="b")) as b:
        ci = bearer(a.post(f"{API}/tokens", json={"name": "ci", "admin": True}, headers=admin).json()["token"])
        for client in (a, b, a, b):
            assert client.get(f"{API}/whoami", headers=ci).json()["name"] == "ci"
        assert a.delete(f"{API}/tokens/ci", headers=admin).status_code == 204
        for client in (a, b):
            assert client.get(f"{API}/whoami", headers=ci).status_code == 401
            assert client.get(f"{API}/whoami", headers=admin).status_code == 200


def test_a_leader_stalled_past_its_lease_reads_tokens_from_the_store(tmp_path):
    """While its lease is current the leader answers from its token cache (no one else writes); once it has not
    renewed the lease for the TTL (e.g. the process was paused), another server may lead and have revoked a
    token: the stalled leader reads the store and refuses it, before its elector notices the lost lease."""
    app, token = make_app(tmp_path)
    service = app.state.service
    admin = bearer(token)
    with TestClient(app) as client:
        ci = bearer(client.post(f"{API}/tokens", json={"name": "ci", "admin": True}, headers=admin).json()["token"])
        assert client.get(f"{API}/whoami", headers=ci).json()["name"] == "ci"  # cached now
        service.store.revoke_token("ci", now=service.clock())  # as a new leader would, in the shared store
        assert client.get(f"{API}/whoami", headers=ci).status_code == 200  # the lease is current: the cache holds
        elector = service.elector
        assert elector is not None and elector.current()
        elector.stop()  # (no renewal races the clock below)
        elector._renewed -= elector.ttl_s + 1  # no renewal for longer than the TTL
        assert client.get(f"{API}/whoami", headers=ci).status_code == 401
        assert client.get(f"{API}/whoami", headers=admin).status_code == 200


def test_a_standby_s_live_stream_says_it_is_a_standby_naming_the_leader_then_that_it_leads(postgres_url, tmp_path):
    with ExitStack() as running_leader:
        running_leader.enter_context(TestClient(pg_app(postgres_url, tmp_path)))
        token = (tmp_path / "token").read_text().strip()
        with live_server(pg_app(postgres_url, tmp_path, name="b")) as base:
            out: queue.Queue = queue.Queue()
            ready, stop = threading.Event(), threading.Event()
            reader = threading.Thread(target=read_events, args=(f"{base}{API}/stream", {"token": token}, {}, out,
                                                                 ready, stop), daemon=True)
            reader.start()
            assert next_item(out)[:2] == ("status", 200)
            kind, event = next_item(out)
            assert kind == "role" and event["data"]["role"] == "standby" and event["id"] is None
            leader = event["data"]["leader"]
            assert leader["url"] == "http://a.invalid:8080" and leader["epoch"] == 1
            running_leader.close()  # the leader stops: the standby takes over and says so on the open stream
            kind, event = next_item(out, timeout=60)
            assert kind == "role" and event["data"]["role"] == "leader"
            assert event["data"]["leader"]["url"] == "http://b.invalid:8080" and event["data"]["leader"]["epoch"] == 2
            stop.set()  # the reader hangs up at the next event
            assert httpx.post(f"{base}{API}/jobs", json=job_body(), headers=bearer(token)).status_code == 201
            reader.join(10)


def test_a_stalled_leader_is_fenced_after_a_take_over(postgres_url, tmp_path):
    clock = Clock()
    leader = pg_app(postgres_url, tmp_path, clock)
    admin = bearer((tmp_path / "token").read_text().strip())
    a = TestClient(leader)  # no lifespan: no lease thread, the test drives each step
    ids = [a.post(f"{API}/jobs", json=job_body(gpus=8, gpu_model="A100", duration=d), headers=admin).json()["id"]
           for d in (10, 10, 100)]
    service_a = leader.state.service
    assert [service_a.ctl.jobs[i].state.value for i in ids] == ["running", "running", "pending"]
    standby = pg_app(postgres_url, tmp_path, clock)
    service_b = standby.state.service
    with service_a.store.engine.begin() as conn:  # the leader stalls: its lease runs out unrenewed
        conn.exec_driver_sql("UPDATE lease SET expires_at = 0")
    service_b.elector.round()
    wait_for(lambda: service_b.leading, 60, "the standby takes over")
    assert service_b.store.epoch == 2
    before = stored_events(postgres_url)
    clock.advance(11)  # the stale leader wakes: two jobs end, the third would start on its devices
    with pytest.raises(Exception, match="standby"):
        service_a.tick()
    assert not service_a.leading
    assert a.post(f"{API}/jobs", json=job_body(), headers=admin).status_code == 503
    assert stored_events(postgres_url) == before  # not one write of the stale leader committed
    service_b.tick()  # the new leader ends them and places the third
    events = stored_events(postgres_url)
    started = [(e, job) for _, e, kind, job in events if kind == "started"]
    assert started == [(1, ids[0]), (1, ids[1]), (2, ids[2])]
    assert epochs_in_commit_order(postgres_url)
    assert [t.epoch for t in service_b.store.terms()] == [1, 2]
    service_a.store.close()
    service_b.store.close()


class Announced:
    """A service's lock that, once ``armed``, says when a thread comes to take it (``coming``, set before it waits)."""

    def __init__(self, lock) -> None:
        self.lock, self.armed, self.coming = lock, threading.Event(), threading.Event()

    def __enter__(self):
        if self.armed.is_set():
            self.coming.set()
        return self.lock.__enter__()

    def __exit__(self, *exc):
        return self.lock.__exit__(*exc)


def test_a_read_waiting_on_the_lock_during_a_take_over_keeps_the_new_leader_s_loop(postgres_url, tmp_path):
    """A standby whose view is stale is read (outside the lock, as the kube extender reads) while the take-over
    rebuilds under the lock: the read waits, then answers from the new leader's loop, which stays the leader's."""
    leader = pg_app(postgres_url, tmp_path)
    admin = bearer((tmp_path / "token").read_text().strip())
    job = TestClient(leader).post(f"{API}/jobs", json=job_body(gpus=8, gpu_model="A100"), headers=admin).json()
    standby = pg_app(postgres_url, tmp_path, name="b").state.service
    lock = standby.lock = Announced(standby.lock)
    prepare, built, read = standby._prepare_to_lead, [], []
    reader = threading.Thread(target=lambda: read.append(standby.ctl), daemon=True)

    def prepare_while_a_read_comes() -> None:  # (under the lock) a read finds the view stale and waits here
        lock.armed.set()
        reader.start()
        assert lock.coming.wait(60)
        prepare()
        built.append(standby.ctl)

    standby._prepare_to_lead = prepare_while_a_read_comes
    standby._viewed = -math.inf  # the view is stale: the next read rebuilds it
    leader.state.service.store.release_lease()  # the leader stops
    standby.elector.round()  # wins the lease; the take-over runs in its own thread
    wait_for(lambda: standby.leading, 60, "the standby takes over")
    reader.join(60)
    assert read == built and standby.ctl is built[0]  # not a view built after the take-over
    assert standby.ctl.jobs[job["id"]].state.value == "running"
    leader.state.service.store.close()
    standby.store.close()


def test_a_tick_waiting_on_the_lock_when_the_leader_steps_down_runs_no_cycle(tmp_path):
    """The timer thread finds the server leading and waits on the lock; it steps down meanwhile: once the tick has the
    lock it runs no cycle (none on a view of the store), and the loop it had stays."""
    app, token = make_app(tmp_path)
    service = app.state.service
    loop = service.ctl
    lock = service.lock = Announced(service.lock)
    ticked: queue.Queue = queue.Queue()
    with lock:
        lock.armed.set()
        ticker = threading.Thread(target=lambda: ticked.put(service.tick()), daemon=True)
        ticker.start()
        assert lock.coming.wait(60)
        service.step_down("a renewal was refused")
    assert ticked.get(timeout=60) == TICK_S
    assert service._ctl is loop  # not replaced by a view, nor cycled
    service.store.close()


def first_start(url: str, hold: bool, results) -> None:
    """A server's first start on ``url`` (its store, which migrates), in a process of its own; ``hold``: wait inside
    the migration, at its first CREATE TABLE, until the test frees advisory lock 4242. Puts its outcome."""
    held = []

    def wait_for_the_test(conn, cursor, statement, *_):
        if statement.lstrip().startswith("CREATE TABLE") and not held:
            held.append(statement)
            cursor.execute("SELECT pg_advisory_xact_lock(4242)")

    if hold:
        event.listen(Engine, "before_cursor_execute", wait_for_the_test)
    try:
        Store(url).close()
        results.put("started")
    except Exception as err:  # noqa: BLE001 - the test reports it
        results.put(f"{type(err).__name__}: {err}")


def test_two_first_starts_on_an_empty_postgresql_database_migrate_one_after_the_other(postgres_url):
    """The first start is held inside its migration while a second one starts: the second waits, then finds the
    schema at head; neither fails."""
    import psycopg  # the postgres extra, which postgres_url needs too

    control = psycopg.connect(postgres_url.replace("postgresql+psycopg", "postgresql"), autocommit=True)
    control.execute("SELECT pg_advisory_lock(4242)")

    def waiting() -> int:
        row = control.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                              "AND wait_event_type = 'Lock'").fetchone()
        return row[0] if row else 0

    fork = multiprocessing.get_context("fork")
    results = fork.Queue()
    first = fork.Process(target=first_start, args=(postgres_url, True, results))
    second = fork.Process(target=first_start, args=(postgres_url, False, results))
    try:
        first.start()
        wait_for(lambda: waiting() == 1, 30, "the first start held inside its migration")
        second.start()
        wait_for(lambda: waiting() == 2 or not second.is_alive(), 30, "the second start waiting or done")
        control.execute("SELECT pg_advisory_unlock(4242)")
        outcomes = [results.get(timeout=60) for _ in range(2)]
        assert outcomes == ["started", "started"]
        versions = control.execute("SELECT version_num FROM alembic_version").fetchall()
        assert versions == [(ScriptDirectory(str(MIGRATIONS)).get_current_head(),)]
    finally:
        for process in (first, second):
            process.join(30)
        control.close()


def test_kill_9_and_a_stall_of_the_leader_between_two_servers(postgres_url, tmp_path):
    (tmp_path / "box.yaml").write_text(
        "pools:\n  - {name: box, count: 1, cpu: 64, memory: 256Gi, gpu: {model: A100, count: 8}}\n")
    options = ("--cluster", "box.yaml", "--lease-ttl", "2")
    a, b = ServeProcess(postgres_url, tmp_path, extra=options), ServeProcess(postgres_url, tmp_path, extra=options)
    a.start()
    b.start()
    try:
        assert a.ready() and not b.ready()
        admin = bearer(a.token)

        def submit(server, duration):
            body = {**job_body(gpus=8), "duration": duration}
            reply = httpx.post(f"{server.url}{API}/jobs", json=body, headers=admin, timeout=10)
            assert reply.status_code == 201, reply.text
            return reply.json()["id"]

        def job(server, job_id):
            return httpx.get(f"{server.url}{API}/jobs/{job_id}", headers=admin, timeout=10).json()

        short, waiting = submit(a, 3), submit(a, 600)
        a.signal(signal.SIGSTOP)  # the leader stalls; its short job ends while it sleeps
        wait_for(b.ready, 60, "the standby takes over")
        wait_for(lambda: job(b, waiting)["state"] == "running", 60, "the new leader starts the waiting job")
        stale = [e for e in stored_events(postgres_url) if e[1] == 1]
        a.signal(signal.SIGCONT)  # it wakes with the short job due and the waiting job to place
        wait_for(lambda: "stepped down" in "".join(a.output), 60, "the stale leader steps down")
        assert not a.ready() and [e for e in stored_events(postgres_url) if e[1] == 1] == stale
        assert job(a, short)["state"] == "succeeded"
        b.kill()
        wait_for(a.ready, 60, "the first server takes over again")
        third = submit(a, 600)
        running = httpx.get(f"{a.url}{API}/jobs", params={"state": "running"}, headers=admin, timeout=10).json()
        assert [j["id"] for j in running] == [waiting]  # 8 GPUs: never two 8-GPU jobs at once
        assert job(a, third)["state"] == "pending"
        assert epochs_in_commit_order(postgres_url)
    finally:
        for server in (a, b):
            if server.proc is not None and server.proc.poll() is None:
                server.signal(signal.SIGCONT)
                server.kill()


def test_the_two_replica_manifest_routes_to_the_leader_only():
    import yaml

    docs = {d["kind"]: d for d in yaml.safe_load_all((REPO / "deploy/service-ha.yaml").read_text())}
    deployment, service = docs["Deployment"], docs["Service"]
    assert deployment["spec"]["replicas"] == 2
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    args = container["args"]
    assert args[args.index("--db") + 1] == "$(QUASCHED_DB)" and "--advertise-url" in args
    assert "postgresql" in docs["Secret"]["stringData"]["url"]
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]


def test_a_leader_paused_inside_a_write_does_not_block_the_take_over(postgres_url, tmp_path):
    from sqlalchemy import insert

    leader = pg_app(postgres_url, tmp_path)
    standby = pg_app(postgres_url, tmp_path, name="b").state.service
    store_a = leader.state.service.store
    conn = store_a.engine.connect()
    write = conn.begin()
    store_a.fence(conn)  # the leader pauses here, holding the lease row's share lock
    conn.execute(insert(EVENTS).values(time=0.0, kind="stale", job_id=None, node="", data={}, epoch=1))
    # no renewals (no lifespan): the lease runs out after its 3 s while the write stays open

    def attempt() -> bool:
        try:
            standby.elector.round()
        except Exception:  # lock_timeout: the paused write still holds the row; PostgreSQL ends it soon
            pass
        return standby.leading

    wait_for(attempt, 60, "the standby takes over")
    with pytest.raises(Exception):
        write.commit()  # the paused leader wakes: its session was ended, nothing of it is stored
    assert "stale" not in [kind for _, _, kind, _ in stored_events(postgres_url)]
    conn.close()
    store_a.close()
    standby.store.close()
