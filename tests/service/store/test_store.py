"""The durable store (docs/service.md, "Store contract") on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import dataclasses
import threading
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from hypothesis import HealthCheck, given, settings, strategies as st
from repo import REPO
from sqlalchemy import inspect, text

from quasched.service.domain import Event, Job, JobSpec, JobState, NodeRecord, PendingReason, QueueSpec, Reason
from quasched.service.store.database import MIGRATIONS, Base, Store, TokenInfo, alembic_config, migrate


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'quasched.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    store = Store(url)
    yield store
    store.close()


def spec(name: str = "train", **kw) -> JobSpec:
    return JobSpec(name=name, team=kw.pop("team", "vision"), cpu_milli=4000, memory_mib=16384, **kw)


def full_job(job: Job) -> Job:
    """``job`` running with every field set (placement, reason evidence, times, solver)."""
    return dataclasses.replace(
        job, state=JobState.RUNNING, started_at=12.5, placement=[("n1", (0, 1)), ("n2", ())],
        reason=PendingReason(Reason.FRAGMENTED, "no single node", {"free": 3.5, "nodes": ["n1", "n2"], "ok": True}),
        quota_model="A100", preempt_at=99.25, solver="milp", gap=0.01, restarts=2)


def test_round_trip_of_every_field(store: Store):
    first = store.insert_job(spec(num_gpu=2, gpu_milli=1000, gpu_model="A100", pods=2, user="ann", app="llm",
                                  max_per_node=1, priority_class="high", duration_s=3600.0, client_token="k1"),
                             1000, 10.0)
    assert (first.state, first.placement, first.reason, first.started_at) == (JobState.PENDING, [], None, None)
    assert store.job(first.id) == first
    job = full_job(first)
    store.save([job], [])
    assert store.job(job.id) == job
    assert store.load()[2] == [job]
    bare = store.insert_job(spec("bare"), 0, 11.0)  # None everywhere it may be
    assert (bare.spec.duration_s, bare.spec.client_token, bare.gap, bare.preempt_at) == (None, None, None, None)
    assert store.job(bare.id) == bare
    assert store.job(10_000) is None


def test_repeated_client_token_returns_the_first_job(store: Store):
    first = store.insert_job(spec(client_token="once"), 100, 1.0)
    again = store.insert_job(spec("other", client_token="once"), 0, 2.0)
    assert again == first
    assert [j.id for j in store.jobs()] == [first.id]
    assert store.insert_job(spec(), 100, 3.0).id != first.id  # jobs without a token are never merged


def test_an_insert_with_its_changes_is_one_transaction(store: Store):
    """``then`` sees the jobs with their ids; what it returns is stored with them, and if it fails, neither is."""
    def start(jobs: list[Job]) -> tuple[list[Job], list[Event]]:
        ran = dataclasses.replace(jobs[0], state=JobState.RUNNING, started_at=1.0, placement=[("n1", (1,))])
        return [ran], [Event(1.0, "started", jobs[0].id, "n1", {"devices": [[1]]})]

    job = store.insert_job(spec("bound"), 100, 1.0, then=start)
    stored = store.job(job.id)
    assert stored is not None and stored.state == JobState.RUNNING and stored.placement == [("n1", (1,))]
    assert [(e.kind, e.job_id, e.node) for e in store.events(job.id)] == [("started", job.id, "n1")]

    def refuse(jobs: list[Job]) -> tuple[list[Job], list[Event]]:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        store.insert_job(spec("refused"), 100, 2.0, then=refuse)
    assert [j.spec.name for j in store.jobs()] == ["bound"]


def test_a_group_insert_keeps_order_and_merges_repeated_tokens(store: Store):
    stored = store.insert_job(spec("old", client_token="old"), 100, 1.0)
    group = store.insert_jobs([(spec("a", client_token="a"), 100), (spec("again", client_token="old"), 0),
                               (spec("b"), 50), (spec("a2", client_token="a"), 0)], 2.0)
    assert group[1] == stored and group[3] is group[0]  # the first job of each token
    assert stored.id < group[0].id < group[2].id and [j.seq for j in group[::2]] == [j.id for j in group[::2]]
    assert [(j.spec.name, j.priority) for j in store.jobs()] == [("b", 50), ("a", 100), ("old", 100)]


def test_concurrent_inserts_of_one_client_token_make_one_row(store: Store):
    threads = 12
    barrier = threading.Barrier(threads)

    def submit(i: int) -> Job:
        barrier.wait()
        return store.insert_job(spec(f"try{i}", client_token="race"), 100, float(i))

    with ThreadPoolExecutor(threads) as pool:
        jobs = list(pool.map(submit, range(threads)))
    assert len({j.id for j in jobs}) == 1
    assert len(store.jobs()) == 1


def test_concurrent_inserts_get_distinct_increasing_ids(store: Store):
    with ThreadPoolExecutor(8) as pool:
        jobs = list(pool.map(lambda i: store.insert_job(spec(f"j{i}"), 100, float(i)), range(40)))
    assert len({j.id for j in jobs}) == 40
    assert all(j.seq == j.id for j in jobs)


def test_seq_is_monotonic(store: Store):
    seqs = [store.insert_job(spec(f"j{i}"), 100, float(i)).seq for i in range(5)]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5


def test_save_persists_transitions_and_appends_events(store: Store):
    job = store.insert_job(spec(), 100, 1.0)
    submitted = Event(1.0, "submitted", job.id)
    store.save([job], [submitted])
    running = full_job(job)
    store.save([running], [Event(2.0, "started", job.id, "n1", {"devices": [0, 1]})])
    assert store.job(job.id) == running
    done = dataclasses.replace(running, state=JobState.SUCCEEDED, finished_at=30.0, placement=[], reason=None)
    store.save([done], [Event(30.0, "finished", job.id, "n1")])
    assert store.job(job.id) == done
    events = store.events(job_id=job.id)
    assert [e.kind for e in events] == ["submitted", "started", "finished"]
    assert submitted.id == events[0].id  # save sets each event's id
    assert events[1] == Event(2.0, "started", job.id, "n1", {"devices": [0, 1]}, events[1].id)


def test_save_is_one_transaction(store: Store):
    job = store.insert_job(spec(), 100, 1.0)
    clash = store.insert_job(spec("other", client_token="taken"), 100, 1.0)
    bad = dataclasses.replace(job, spec=dataclasses.replace(job.spec, client_token="taken"), state=JobState.RUNNING)
    with pytest.raises(Exception):
        store.save([bad], [Event(2.0, "started", job.id)])
    assert store.job(job.id) == job and store.job(clash.id) == clash
    assert store.events() == []


def test_save_refuses_jobs_the_store_did_not_make(store: Store):
    job = store.insert_job(spec(), 100, 1.0)
    stranger = dataclasses.replace(job, id=job.id + 1)
    with pytest.raises(ValueError, match=rf"jobs \[{stranger.id}\] are not in the store"):
        store.save([job, stranger], [Event(1.0, "submitted", job.id)])
    assert store.events() == []


def test_load_returns_unfinished_jobs_in_seq_order(store: Store):
    jobs = [store.insert_job(spec(f"j{i}"), 100, float(i)) for i in range(6)]
    states = [JobState.SUCCEEDED, JobState.PENDING, JobState.RUNNING, JobState.FAILED, JobState.PREEMPTING,
              JobState.CANCELLED]
    changed = [dataclasses.replace(j, state=s) for j, s in zip(jobs, states)]
    changed[4].seq = 0  # seq, not id, orders them
    store.save(changed, [])
    assert [j.id for j in store.load()[2]] == [jobs[4].id, jobs[1].id, jobs[2].id]


def test_jobs_filter_and_page_newest_first(store: Store):
    jobs = [store.insert_job(spec(f"j{i}", team="ab"[i % 2]), 100, float(i)) for i in range(7)]
    store.save([dataclasses.replace(jobs[0], state=JobState.RUNNING)], [])
    ids = [j.id for j in reversed(jobs)]
    assert [j.id for j in store.jobs()] == ids
    assert [j.id for j in store.jobs(limit=3, offset=2)] == ids[2:5]
    assert [j.id for j in store.jobs(team="b")] == [j.id for j in reversed(jobs) if j.spec.team == "b"]
    assert [j.id for j in store.jobs(state="running")] == [jobs[0].id]
    assert [j.id for j in store.jobs(state=JobState.PENDING, team="a")] == [j.id for j in jobs[6:0:-2]]
    with pytest.raises(ValueError):
        store.jobs(state="sleeping")


def test_events_page_by_id(store: Store):
    store.save([], [Event(float(i), "node-added" if i % 3 else "submitted", i % 3 or None, f"n{i}") for i in range(25)])
    pages, after = [], 0
    while page := store.events(after=after, limit=10):
        pages.append(page)
        after = page[-1].id
    assert [len(p) for p in pages] == [10, 10, 5]
    seen = [e for p in pages for e in p]
    assert [e.time for e in seen] == [float(i) for i in range(25)]
    assert [e.id for e in seen] == sorted({e.id for e in seen})
    assert [e.time for e in store.events(job_id=1)] == [float(i) for i in range(25) if i % 3 == 1]
    assert store.events(job_id=1, after=seen[10].id, limit=2) == [seen[13], seen[16]]


def test_tokens_are_stored_hashed(store: Store):
    admin = store.add_token("root", None, True)
    team = store.add_token("ci", "vision", False)
    assert admin != team and len(admin) >= 40
    assert store.token(admin) == TokenInfo("root", None, True)
    assert store.token(team) == ("ci", "vision", False, None, None)
    assert store.token("nope") is None and store.token(admin[:-1]) is None
    with pytest.raises(ValueError, match="a token named 'ci' exists"):
        store.add_token("ci", "nlp")
    brief = store.add_token("brief", "vision", expires_at=100.0)
    assert store.token(brief, now=99.0) is not None and store.token(brief, now=100.0) is None
    assert store.revoke_token("ci", now=5.0) == ("ci", "vision", False, None, 5.0)
    assert store.token(team) is None and store.revoke_token("nobody", now=6.0) is None
    assert [t.name for t in store.tokens()] == ["root", "ci", "brief"]
    with store.engine.connect() as c:
        stored = " ".join(str(v) for row in c.execute(text("SELECT * FROM tokens")) for v in row)
    assert admin not in stored and team not in stored


def test_nodes_upsert_in_registration_order_and_delete(store: Store):
    a = NodeRecord("a", 64000, 262144, 8, "A100", {"zone": "z1"}, False, (3,))
    b = NodeRecord("b", 32000, 131072)
    store.put_node(a)
    store.put_node(b)
    a2 = dataclasses.replace(a, cordoned=True, unhealthy=(1, 5), labels={})
    store.put_node(a2)
    assert store.load()[0] == [a2, b]
    store.delete_node("a")
    store.delete_node("unknown")
    assert store.load()[0] == [b]
    store.put_node(a)
    assert store.load()[0] == [b, a]


def test_queues_upsert(store: Store):
    store.put_queue(QueueSpec("vision", {"A100": 8, "*": 2.5}, "research", 4.0, 2.0))
    store.put_queue(QueueSpec("audio"))
    store.put_queue(QueueSpec("vision", {"H100": 1}))
    assert store.load()[1] == [QueueSpec("audio"), QueueSpec("vision", {"H100": 1})]


def test_state_survives_reopening(url: str):
    store = Store(url)
    job = store.insert_job(spec(client_token="t"), 100, 1.0)
    store.put_node(NodeRecord("a", 1000, 1024))
    store.close()
    again = Store(url)  # the migration is already applied: a no-op
    assert again.load() == ([NodeRecord("a", 1000, 1024)], [], [job])
    assert again.insert_job(spec(client_token="t"), 0, 2.0) == job
    again.close()


def test_migration_matches_models(store: Store):
    with store.engine.connect() as c:
        assert compare_metadata(MigrationContext.configure(c), Base.metadata) == []


def test_migration_downgrades_to_nothing(store: Store):
    with store.engine.begin() as c:
        command.downgrade(alembic_config(c), "base")
        assert inspect(c).get_table_names() == ["alembic_version"]
    migrate(store.engine)
    assert store.jobs() == []


def test_sqlite_is_in_wal_mode(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'q.db'}")
    with store.engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert c.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() > 0
    store.close()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_in_memory_sqlite_is_refused(url: str):
    with pytest.raises(ValueError, match="use a file"):
        Store(url)


# -- property: any job survives save + load ----------------------------------------------------

names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)  # what a database stores
times = st.floats(allow_nan=False, allow_infinity=False)
json_values = st.none() | st.booleans() | st.integers(-2**53, 2**53) | times | names | st.lists(st.integers(0, 7))
specs = st.builds(JobSpec, name=names, team=names, cpu_milli=st.integers(0, 2**31 - 1),
                  memory_mib=st.integers(0, 2**31 - 1), num_gpu=st.integers(0, 8), gpu_milli=st.integers(0, 1000),
                  gpu_model=names, pods=st.integers(1, 1024), user=names, app=names, max_per_node=st.integers(-1, 8),
                  priority_class=names, duration_s=st.none() | times, client_token=st.none() | st.uuids().map(str))
reasons = st.none() | st.builds(PendingReason, st.sampled_from(Reason), names, st.dictionaries(names, json_values))
placements = st.lists(st.tuples(names, st.lists(st.integers(0, 15), max_size=8).map(tuple)), max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec_=specs, priority=st.integers(-2**31, 2**31 - 1), state=st.sampled_from(JobState), at=times,
       started=st.none() | times, finished=st.none() | times, placement=placements, reason=reasons,
       quota_model=names, preempt_at=st.none() | times, solver=names, gap=st.none() | times,
       restarts=st.integers(0, 1000))
def test_any_job_round_trips(store: Store, spec_, priority, state, at, started, finished, placement, reason,
                             quota_model, preempt_at, solver, gap, restarts):
    job = store.insert_job(spec_, priority, at)
    assert store.job(job.id) == job
    changed = dataclasses.replace(job, state=state, started_at=started, finished_at=finished, placement=placement,
                                  reason=reason, quota_model=quota_model, preempt_at=preempt_at, solver=solver,
                                  gap=gap, restarts=restarts)
    store.save([changed], [Event(at, "changed", job.id, solver, {"reason": reason and reason.evidence})])
    assert store.job(job.id) == changed
    assert store.events(job_id=job.id)[-1].data == {"reason": reason and reason.evidence}
    assert (changed in store.load()[2]) == (not state.finished)


def test_migrations_are_package_data():
    """Every migration file ships in the wheel (pyproject's package-data globs match it)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["quasched.service.store"]
    files = [p.relative_to(MIGRATIONS.parent) for p in MIGRATIONS.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts]
    assert files and all(any(f.match(g) for g in globs) for f in files), (files, globs)
