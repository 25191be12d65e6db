"""Durable state of the service: jobs, events, nodes, queues and API tokens (docs/service.md, "Store contract").

SQLAlchemy 2 on SQLite (WAL, the default) or PostgreSQL (``postgresql+psycopg://``).
The schema is owned by the Alembic migrations in ``migrations/``, applied on open.
One :class:`~sqlalchemy.Engine` per store and a short session per call, so a
store may be shared by the threads of a web server.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Callable, NamedTuple, cast
from urllib.parse import unquote

from alembic import command
from alembic.config import Config
from sqlalchemy import (JSON, Boolean, ColumnElement, Connection, Double, Engine, Integer, MetaData, String, Table,
                        bindparam, create_engine, delete, event, extract, func, insert, make_url, select, update)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from quasched.extras import require
from quasched.service.domain import Event, Job, JobSpec, JobState, NodeRecord, PendingReason, QueueSpec, Reason

from .leadership import Fenced, FileLock, Holder

MIGRATIONS = Path(__file__).parent / "migrations"
#: PostgreSQL ends a session idle this long inside a transaction (ms): a paused writer cannot hold the lease row
IDLE_IN_TX_MS = 5000
#: a take-over waits this long (ms) for a write under way to commit, then tries again at its next round
LOCK_WAIT_MS = 1000
#: the PostgreSQL advisory lock key held while migrating ("quasched" in ASCII)
MIGRATION_LOCK = int.from_bytes(b"quasched", "big")
#: jobs that :meth:`Store.load` hands back to the controller
UNFINISHED = (JobState.PENDING, JobState.RUNNING, JobState.PREEMPTING, JobState.STOPPING)
#: what becomes of jobs just inserted, written in their insert's transaction (:meth:`Store.insert_jobs`)
Changes = Callable[[list[Job]], tuple[Iterable[Job], Iterable[Event]]]


class Base(DeclarativeBase):
    """Declarative base of the tables, with named constraints (stable migrations)."""
    metadata = MetaData(naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_name)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "pk": "pk_%(table_name)s",
    })


class JobRow(Base):
    """A :class:`~quasched.service.domain.Job` with its spec flattened into columns."""

    __tablename__ = "jobs"
    __table_args__ = {"sqlite_autoincrement": True}  # never reuse an id

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    seq: Mapped[int] = mapped_column(index=True)
    # spec
    name: Mapped[str] = mapped_column(String(256))
    team: Mapped[str] = mapped_column(String(128), index=True)
    cpu_milli: Mapped[int]
    memory_mib: Mapped[int]
    num_gpu: Mapped[int]
    gpu_milli: Mapped[int]
    gpu_model: Mapped[str] = mapped_column(String(128))
    pods: Mapped[int]
    user: Mapped[str] = mapped_column(String(128))
    app: Mapped[str] = mapped_column(String(256))
    max_per_node: Mapped[int]
    priority_class: Mapped[str] = mapped_column(String(64))
    duration_s: Mapped[float | None] = mapped_column(Double)
    client_token: Mapped[str | None] = mapped_column(String(256), unique=True)
    command: Mapped[list[str]] = mapped_column(JSON)
    env: Mapped[dict[str, str]] = mapped_column(JSON)
    workdir: Mapped[str] = mapped_column(String)
    time_limit_s: Mapped[float | None] = mapped_column(Double)
    # state
    priority: Mapped[int]
    submitted_at: Mapped[float] = mapped_column(Double)
    state: Mapped[str] = mapped_column(String(16), index=True)
    started_at: Mapped[float | None] = mapped_column(Double)
    finished_at: Mapped[float | None] = mapped_column(Double)
    #: ``[{"node": name, "devices": [index, ...]}, ...]``, one entry per pod
    placement: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    reason_code: Mapped[str | None] = mapped_column(String(32))
    reason_message: Mapped[str | None] = mapped_column(String)
    reason_evidence: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    quota_model: Mapped[str] = mapped_column(String(128))
    preempt_at: Mapped[float | None] = mapped_column(Double)
    solver: Mapped[str] = mapped_column(String(64))
    gap: Mapped[float | None] = mapped_column(Double)
    restarts: Mapped[int]
    exit_code: Mapped[int | None]
    wall_s: Mapped[float] = mapped_column(Double)
    gpu_hours: Mapped[float] = mapped_column(Double)


class EventRow(Base):
    """One event; its id is the live stream's cursor."""
    __tablename__ = "events"
    __table_args__ = {"sqlite_autoincrement": True}  # ids are the stream's cursor: never reuse one

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    time: Mapped[float] = mapped_column(Double)
    kind: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[int | None] = mapped_column(index=True)
    node: Mapped[str] = mapped_column(String(256))
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: the lease epoch of the leader that wrote it
    epoch: Mapped[int | None]


class LeaseRow(Base):
    """The one writer's lease (a single row, ``id`` 1): epoch, holder, its URL, since, expiry (database clock,
    epoch seconds; NULL: held until released, SQLite's file lock guards it)."""
    __tablename__ = "lease"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    epoch: Mapped[int]
    holder: Mapped[str] = mapped_column(String(256))
    url: Mapped[str] = mapped_column(String(1024))
    since: Mapped[float] = mapped_column(Double)
    expires_at: Mapped[float | None] = mapped_column(Double)


class TermRow(Base):
    """One term of the lease: the epoch, who took it and when."""
    __tablename__ = "leader_terms"

    epoch: Mapped[int] = mapped_column(Integer, primary_key=True)
    holder: Mapped[str] = mapped_column(String(256))
    url: Mapped[str] = mapped_column(String(1024))
    since: Mapped[float] = mapped_column(Double)


JOBS = cast(Table, JobRow.__table__)  # Core handles for the hot path
EVENTS = cast(Table, EventRow.__table__)
LEASE = cast(Table, LeaseRow.__table__)
TERMS = cast(Table, TermRow.__table__)


class NodeRow(Base):
    """A :class:`~quasched.service.domain.NodeRecord`; ``id`` keeps the registration order."""

    __tablename__ = "nodes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(256), unique=True)
    cpu_milli: Mapped[int]
    memory_mib: Mapped[int]
    num_gpus: Mapped[int]
    gpu_model: Mapped[str] = mapped_column(String(128))
    labels: Mapped[dict[str, str]] = mapped_column(JSON)
    cordoned: Mapped[bool] = mapped_column(Boolean)
    unhealthy: Mapped[list[int]] = mapped_column(JSON)


NODES = cast(Table, NodeRow.__table__)


class QueueRow(Base):
    """A team's queue: quota per GPU model, cohort, borrowing limit, weight."""
    __tablename__ = "queues"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    quota: Mapped[dict[str, float]] = mapped_column(JSON)
    cohort: Mapped[str] = mapped_column(String(128))
    borrowing_limit: Mapped[float | None] = mapped_column(Double)
    weight: Mapped[float] = mapped_column(Double)


QUEUES = cast(Table, QueueRow.__table__)


class TokenRow(Base):
    """An API token: only the SHA-256 of its secret is kept."""

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    team: Mapped[str | None] = mapped_column(String(128))
    admin: Mapped[bool] = mapped_column(Boolean)
    expires_at: Mapped[float | None] = mapped_column(Double)
    revoked_at: Mapped[float | None] = mapped_column(Double)


class DispatchRow(Base):
    """A federation front's job (``job_id``: its row in ``jobs``): its deadline and planned run time, the member and
    time the dispatcher chose and why, the member's name of it once sent, its energy and carbon once it ended, and the
    carbon of its baseline (at once on the least loaded member)."""
    __tablename__ = "dispatches"

    job_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    deadline: Mapped[float] = mapped_column(Double)
    run_s: Mapped[float] = mapped_column(Double)
    member: Mapped[str] = mapped_column(String(128))
    release_at: Mapped[float | None] = mapped_column(Double)
    why: Mapped[str] = mapped_column(String)
    remote: Mapped[str | None] = mapped_column(String(256))
    baseline_member: Mapped[str] = mapped_column(String(128))
    baseline_kg: Mapped[float | None] = mapped_column(Double)
    sent_at: Mapped[float | None] = mapped_column(Double)
    kwh: Mapped[float | None] = mapped_column(Double)
    kg: Mapped[float | None] = mapped_column(Double)


class TeamUsage(NamedTuple):
    """A team's jobs, wall seconds run and GPU-hours booked."""
    team: str
    jobs: int
    wall_s: float
    gpu_hours: float


class TokenInfo(NamedTuple):
    """A stored token's name, team and admin flag, when it expires and when it was revoked (never the secret)."""
    name: str
    team: str | None
    admin: bool
    expires_at: float | None = None
    revoked_at: float | None = None


def token_info(row: TokenRow) -> TokenInfo:
    """The :class:`TokenInfo` of a row."""
    return TokenInfo(row.name, row.team, row.admin, row.expires_at, row.revoked_at)


# -- rows <-> domain (the only place each way) --------------------------------------------------

SPEC_COLUMNS = ("name", "team", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_model", "pods", "user",
                "app", "max_per_node", "priority_class", "duration_s", "client_token", "workdir", "time_limit_s")
JOB_COLUMNS = ("id", "seq", "priority", "submitted_at", "started_at", "finished_at", "quota_model", "preempt_at",
               "solver", "gap", "restarts", "exit_code", "wall_s", "gpu_hours")


def job_values(job: Job) -> dict[str, Any]:
    """The column values of ``job``'s row."""
    reason = job.reason
    return {**{c: getattr(job.spec, c) for c in SPEC_COLUMNS}, **{c: getattr(job, c) for c in JOB_COLUMNS},
            "command": list(job.spec.command), "env": dict(job.spec.env), "state": job.state.value,
            "placement": [{"node": node, "devices": list(devices)} for node, devices in job.placement],
            "reason_code": reason and reason.code.value, "reason_message": reason and reason.message,
            "reason_evidence": reason and reason.evidence}


def to_job(row: JobRow) -> Job:
    """The domain :class:`Job` of a row."""
    reason = None if row.reason_code is None else PendingReason(
        Reason(row.reason_code), row.reason_message or "", row.reason_evidence or {})
    spec = JobSpec(**{c: getattr(row, c) for c in SPEC_COLUMNS}, command=tuple(row.command),
                   env=tuple(sorted(row.env.items())))
    return Job(spec=spec, **{c: getattr(row, c) for c in JOB_COLUMNS},
               state=JobState(row.state), reason=reason,
               placement=[(p["node"], tuple(p["devices"])) for p in row.placement])


def node_values(node: NodeRecord) -> dict[str, Any]:
    """Column values of a node record."""
    return {"name": node.name, "cpu_milli": node.cpu_milli, "memory_mib": node.memory_mib, "num_gpus": node.num_gpus,
            "gpu_model": node.gpu_model, "labels": dict(node.labels), "cordoned": node.cordoned,
            "unhealthy": list(node.unhealthy)}


def to_node(row: NodeRow) -> NodeRecord:
    """The :class:`NodeRecord` of a row."""
    return NodeRecord(row.name, row.cpu_milli, row.memory_mib, row.num_gpus, row.gpu_model, dict(row.labels),
                      row.cordoned, tuple(row.unhealthy))


def queue_values(queue: QueueSpec) -> dict[str, Any]:
    """Column values of a queue spec."""
    return {"name": queue.name, "quota": dict(queue.quota), "cohort": queue.cohort,
            "borrowing_limit": queue.borrowing_limit, "weight": queue.weight}


def to_queue(row: QueueRow) -> QueueSpec:
    """The :class:`QueueSpec` of a row."""
    return QueueSpec(row.name, dict(row.quota), row.cohort, row.borrowing_limit, row.weight)


def event_values(ev: Event) -> dict[str, Any]:
    """Column values of an event (the id is the database's)."""
    return {"time": ev.time, "kind": ev.kind, "job_id": ev.job_id, "node": ev.node, "data": dict(ev.data)}


def to_event(row: EventRow) -> Event:
    """The :class:`Event` of a row, with its id."""
    return Event(row.time, row.kind, row.job_id, row.node, dict(row.data), row.id)


def digest(secret: str) -> str:
    """SHA-256 of a token secret (only digests are stored)."""
    return hashlib.sha256(secret.encode()).hexdigest()


# -- the store ---------------------------------------------------------------------------------

def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=10000"):
        cursor.execute(f"PRAGMA {pragma}")
    cursor.close()


def alembic_config(connection: Connection) -> Config:
    """Alembic's configuration for the packaged migrations, run on ``connection``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def migrate(engine: Engine) -> None:
    """Bring the database's schema to the newest migration (Alembic ``upgrade head``), in one transaction.

    On PostgreSQL the transaction first takes an advisory lock, so servers starting at once on a new database
    migrate one after the other (the next finds the schema at head). The lock is transaction-level: released at
    commit or rollback, it needs no session of its own (it works through transaction-pooling proxies) and a server
    stalled while migrating loses it with its transaction (``idle_in_transaction_session_timeout``).
    """
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(select(func.pg_advisory_xact_lock(MIGRATION_LOCK)))
        command.upgrade(alembic_config(connection), "head")


#: the user and password of a database URL: ``scheme://user:password@...``
_CREDENTIALS = re.compile(r"(?<=://)([^:/@]*):([^@/]*)@")


def shown_url(url: str) -> str:
    """``url`` as the service prints it (banner, logs, errors): its password as ``***``."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ValueError:  # SQLAlchemy's ArgumentError is one; so is a port that is not a number
        return _CREDENTIALS.sub(r"\1:***@", url)


def without_password(text: str, url: str) -> str:
    """``text`` (an error) with the password of ``url``, as written in it or decoded, as ``***``."""
    found = _CREDENTIALS.search(url)
    text = text.replace(url, shown_url(url))
    for secret in {found.group(2), unquote(found.group(2))} - {""} if found else ():
        text = text.replace(secret, "***")
    return text


class Store:
    """The service's database (see the module docstring); every method is one short transaction."""

    def __init__(self, url: str = "sqlite:///quasched.db") -> None:
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
            raise ValueError(f"in-memory SQLite is not supported ({shown_url(url)!r}): use a file, "
                             "e.g. sqlite:///quasched.db")
        sqlite = parsed.get_backend_name() == "sqlite"
        if parsed.get_backend_name() == "postgresql":
            require("psycopg", "postgres")
        # a paused writer's open transaction would hold the lease row's lock: PostgreSQL ends it after 5 s idle
        connect_args = {} if sqlite else {"options": f"-c idle_in_transaction_session_timeout={IDLE_IN_TX_MS}"}
        self.engine = create_engine(parsed, pool_pre_ping=not sqlite,  # a server may restart under us
                                    connect_args=connect_args)
        if parsed.get_backend_name() == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        migrate(self.engine)
        self._session = sessionmaker(self.engine, expire_on_commit=False)
        #: SQLite's writer lock (``<database>.lock`` beside the file itself, symbolic links resolved, so every name
        #: of the file takes the same lock); None: the lease expires (PostgreSQL)
        self.file_lock = FileLock(Path(f"{os.path.realpath(str(parsed.database))}.lock")) if sqlite else None
        #: the lease epoch this store writes under (None: unfenced, no lease taken)
        self.epoch: int | None = None

    def close(self) -> None:
        """Release the database connections and the SQLite writer lock."""
        if self.file_lock is not None:
            self.file_lock.release()
        self.engine.dispose()

    # the writer's lease (quasched.service.store.leadership)

    def _db_now(self) -> ColumnElement[float]:
        """The database's clock in epoch seconds (one clock for every replica)."""
        if self.file_lock is not None:
            return (func.julianday("now") - 2440587.5) * 86400.0
        return cast(ColumnElement[float], extract("epoch", func.clock_timestamp()))

    def acquire_lease(self, holder: str, url: str, ttl_s: float | None) -> int | None:
        """Take the lease if it is free or expired (SQLite: take the file lock, else raise
        :class:`~.leadership.LeaderHeld`); the new epoch, recorded as a term, or None if another holds it."""
        if self.file_lock is not None:
            self.file_lock.acquire(url)
        now = self._db_now()
        take = update(LEASE).where(LEASE.c.id == 1)
        if self.file_lock is None:  # NULL: held until released (never expires)
            take = take.where(LEASE.c.expires_at < now)
        expires = None if self.file_lock is not None or ttl_s is None else now + ttl_s
        with self.engine.begin() as conn:
            if self.file_lock is None:  # a write under way holds the row: wait for it, not for a paused one
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = {LOCK_WAIT_MS}")
            row = conn.execute(take.values(epoch=LEASE.c.epoch + 1, holder=holder, url=url, since=now,
                                           expires_at=expires).returning(LEASE.c.epoch, LEASE.c.since)).first()
            if row is None:
                if self.epoch is None:
                    self.epoch = 0  # a standby: fenced (no epoch is 0) until it wins one
                return None
            conn.execute(insert(TERMS).values(epoch=row.epoch, holder=holder, url=url, since=row.since))
        self.epoch = int(row.epoch)
        return self.epoch

    def lock_intact(self) -> bool:
        """SQLite: whether this store still holds the writer lock (its file not removed or replaced meanwhile),
        so the lease is this server's to take back (False on PostgreSQL)."""
        return self.file_lock is not None and self.file_lock.intact()

    def renew_lease(self, ttl_s: float | None) -> bool:
        """Extend the lease by ``ttl_s`` from now; False if its epoch is no longer this store's."""
        if self.epoch is None:
            return False
        with self.engine.begin() as conn:
            if self.file_lock is not None or ttl_s is None:
                return bool(conn.scalar(select(LEASE.c.epoch).where(LEASE.c.id == 1)) == self.epoch)
            renew = update(LEASE).where(LEASE.c.id == 1, LEASE.c.epoch == self.epoch)
            return bool(conn.execute(renew.values(expires_at=self._db_now() + ttl_s)).rowcount == 1)

    def release_lease(self) -> None:
        """Let the lease expire now (a standby takes over at its next attempt); keep the epoch (stay fenced)."""
        if self.epoch is not None:
            with self.engine.begin() as conn:
                conn.execute(update(LEASE).where(LEASE.c.id == 1, LEASE.c.epoch == self.epoch).values(expires_at=0.0))
        if self.file_lock is not None:
            self.file_lock.release()

    def leader(self) -> Holder:
        """The lease's holder (``alive``: it has not expired)."""
        with self.engine.connect() as conn:
            row = conn.execute(select(LEASE, self._db_now().label("now")).where(LEASE.c.id == 1)).one()
        alive = row.epoch > 0 and (row.expires_at is None or row.expires_at > row.now)
        return Holder(row.holder, row.url, row.since, row.epoch, alive)

    def terms(self) -> list[Holder]:
        """Every term of the lease, oldest first."""
        with self.engine.connect() as conn:
            return [Holder(r.holder, r.url, r.since, r.epoch) for r in conn.execute(select(TERMS).order_by(TERMS.c.epoch))]

    def fence(self, conn: Connection) -> None:
        """In a write transaction: lock the lease row (shared) and raise :class:`~.leadership.Fenced` unless
        its epoch is this store's; a take-over then waits for this transaction, which commits first or not at all."""
        if self.epoch is None:
            return
        current = conn.scalar(select(LEASE.c.epoch).where(LEASE.c.id == 1).with_for_update(read=True))
        if current != self.epoch:
            raise Fenced(f"another server took over (lease epoch {current}, this server's {self.epoch}); "
                         "nothing was written")

    # jobs

    def insert_job(self, spec: JobSpec, priority: int, now: float, then: Changes | None = None) -> Job:
        """Store a new pending job (its id and seq from the database), or the job of a repeated ``client_token``;
        ``then`` as in :meth:`insert_jobs`."""
        return self.insert_jobs([(spec, priority)], now, then)[0]

    def insert_jobs(self, specs: Sequence[tuple[JobSpec, int]], now: float, then: Changes | None = None) -> list[Job]:
        """Store new pending jobs (spec, priority) in one transaction (ids and seqs from the database, in order);
        a ``client_token`` already stored, or earlier in ``specs``, gives that first job instead.

        ``then(jobs)``, called once the jobs have their ids, returns (jobs, events) to :meth:`save` in the same
        transaction: the jobs are stored with what became of them, or not at all."""
        for retry in (False, True):
            try:
                with self.engine.begin() as conn:
                    self.fence(conn)
                    jobs = self._insert(conn, specs, now)
                    if then is not None:
                        self._save(conn, *then(jobs))
                    return jobs
            except IntegrityError:  # a concurrent insert of the same client_token won: look again
                if retry:
                    raise
        raise AssertionError("unreachable")

    def _insert(self, conn: Connection, specs: Sequence[tuple[JobSpec, int]], now: float) -> list[Job]:
        tokens = {spec.client_token for spec, _ in specs if spec.client_token is not None}
        first: dict[str | None, Job] = {}
        if tokens:  # a Core row has the fields of a JobRow
            first = {row.client_token: to_job(cast(JobRow, row))
                     for row in conn.execute(select(JOBS).where(JOBS.c.client_token.in_(tokens)))}
        new: list[Job] = []
        out: list[Job] = []
        for spec, priority in specs:
            if spec.client_token in first:
                out.append(first[spec.client_token])
                continue
            job = Job(0, spec, priority, now, 0)
            new.append(job)
            out.append(job)
            if spec.client_token is not None:
                first[spec.client_token] = job
        if new:  # Core: one INSERT ... RETURNING for all, then seq = id
            rows = [{k: v for k, v in job_values(job).items() if k != "id"} for job in new]
            ids = conn.scalars(insert(JOBS).returning(JOBS.c.id, sort_by_parameter_order=True), rows).all()
            for job, job_id in zip(new, ids):
                job.id = job.seq = job_id
            conn.execute(update(JOBS).where(JOBS.c.id.in_(ids)).values(seq=JOBS.c.id))
        return out

    def save(self, jobs: Iterable[Job], events: Iterable[Event], nodes: Mapping[str, NodeRecord | None] | None = None,
             queues: Iterable[QueueSpec] = ()) -> None:
        """Update ``jobs`` (made by :meth:`insert_job`), append ``events``, register or update ``nodes`` by name
        (``None``: forget it) and create or replace ``queues``, in one transaction.

        Each event gets its stored ``id``.
        """
        with self.engine.begin() as conn:  # Core statements: the hot path of every API mutation
            self.fence(conn)
            for name, node in (nodes or {}).items():
                if node is None:
                    conn.execute(delete(NODES).where(NODES.c.name == name))
                elif not conn.execute(update(NODES).where(NODES.c.name == name).values(node_values(node))).rowcount:
                    conn.execute(insert(NODES).values(node_values(node)))  # a new one: last in registration order
            for queue in queues:
                if not conn.execute(update(QUEUES).where(QUEUES.c.name == queue.name)
                                    .values(queue_values(queue))).rowcount:
                    conn.execute(insert(QUEUES).values(queue_values(queue)))
            self._save(conn, jobs, events)

    def _save(self, conn: Connection, jobs: Iterable[Job], events: Iterable[Event]) -> None:
        values, events = [job_values(job) for job in jobs], list(events)
        if values:
            updated = conn.execute(update(JOBS).where(JOBS.c.id == bindparam("job_id")),
                                   [{**{k: x for k, x in v.items() if k != "id"}, "job_id": v["id"]} for v in values]).rowcount
            if updated != len(values):  # rolls the transaction back
                ids = [v["id"] for v in values]
                known = set(conn.scalars(select(JobRow.id).where(JobRow.id.in_(ids))))
                raise ValueError(f"jobs {sorted(set(ids) - known)} are not in the store: "
                                 "create jobs with insert_job")
        if events:
            stored = conn.scalars(insert(EVENTS).returning(EVENTS.c.id, sort_by_parameter_order=True),
                                  [{**event_values(ev), "epoch": self.epoch} for ev in events]).all()
            for ev, event_id in zip(events, stored):
                ev.id = event_id

    def job(self, job_id: int) -> Job | None:
        """The stored job ``job_id`` (None if unknown)."""
        with self._session() as session:
            row = session.get(JobRow, job_id)
            return None if row is None else to_job(row)

    def jobs(self, state: JobState | str | None = None, team: str | None = None, limit: int = 100,
             offset: int = 0) -> list[Job]:
        """Jobs, newest first, optionally of one state and/or team."""
        query = select(JobRow).order_by(JobRow.id.desc()).limit(limit).offset(offset)
        if state is not None:
            query = query.where(JobRow.state == JobState(state).value)
        if team is not None:
            query = query.where(JobRow.team == team)
        with self._session() as session:
            return [to_job(row) for row in session.scalars(query)]

    def usage(self, since: float | None = None) -> list[TeamUsage]:
        """Per team: jobs submitted (since ``since``), wall seconds run and GPU-hours booked by runs that ended."""
        query = select(JobRow.team, func.count(), func.sum(JobRow.wall_s), func.sum(JobRow.gpu_hours)) \
            .group_by(JobRow.team).order_by(JobRow.team)
        if since is not None:
            query = query.where(JobRow.submitted_at >= since)
        with self._session() as session:
            return [TeamUsage(team, n, wall or 0.0, gpu or 0.0) for team, n, wall, gpu in session.execute(query)]

    def load(self) -> tuple[list[NodeRecord], list[QueueSpec], list[Job]]:
        """What the controller is rebuilt from: nodes (in registration order), queues, unfinished jobs by seq."""
        with self._session() as session:
            nodes = [to_node(r) for r in session.scalars(select(NodeRow).order_by(NodeRow.id))]
            queues = [to_queue(r) for r in session.scalars(select(QueueRow).order_by(QueueRow.name))]
            unfinished = select(JobRow).where(JobRow.state.in_([s.value for s in UNFINISHED]))
            jobs = [to_job(r) for r in session.scalars(unfinished.order_by(JobRow.seq, JobRow.id))]
        return nodes, queues, jobs

    # events

    def events(self, job_id: int | None = None, after: int = 0, limit: int = 200) -> list[Event]:
        """Events with ``id > after``, oldest first (page on with the last id)."""
        query = select(EventRow).where(EventRow.id > after).order_by(EventRow.id).limit(limit)
        if job_id is not None:
            query = query.where(EventRow.job_id == job_id)
        with self._session() as session:
            return [to_event(row) for row in session.scalars(query)]

    # nodes and queues

    def put_nodes(self, nodes: Sequence[NodeRecord], events: Iterable[Event] = ()) -> None:
        """Register new ``nodes`` and append ``events`` (their ``node-added``) in one transaction: all of them, or
        none if a name is stored already (ValueError) or another server took over (:class:`~.leadership.Fenced`)."""
        try:
            with self.engine.begin() as conn:
                self.fence(conn)
                conn.execute(insert(NODES), [node_values(node) for node in nodes])
                self._save(conn, [], events)
        except IntegrityError:
            with self.engine.connect() as conn:
                taken = conn.scalars(select(NODES.c.name).where(NODES.c.name.in_([n.name for n in nodes]))
                                     .order_by(NODES.c.name).limit(10)).all()
            raise ValueError(f"nodes exist: {list(taken)}") from None

    def put_node(self, node: NodeRecord) -> None:
        """Register ``node``, or update it in place (keeping its registration order)."""
        self.save((), (), {node.name: node})

    def delete_node(self, name: str) -> None:
        """Forget node ``name`` (no-op if it is not stored)."""
        self.save((), (), {name: None})

    def put_queue(self, queue: QueueSpec) -> None:
        """Create or replace a queue's row."""
        self.save((), (), queues=[queue])

    # tokens

    def add_token(self, name: str, team: str | None = None, admin: bool = False,
                  expires_at: float | None = None) -> str:
        """A new random API token; returns its secret (only its SHA-256 is stored). ValueError if a token of that
        name exists (revoked ones included)."""
        secret = secrets.token_urlsafe(32)
        with self._session.begin() as session:
            if session.scalar(select(TokenRow.id).where(TokenRow.name == name).limit(1)) is not None:
                raise ValueError(f"a token named {name!r} exists")
            session.add(TokenRow(name=name, sha256=digest(secret), team=team, admin=admin, expires_at=expires_at))
        return secret

    def tokens(self) -> list[TokenInfo]:
        """Every token, oldest first (never a secret)."""
        with self._session() as session:
            return [token_info(row) for row in session.scalars(select(TokenRow).order_by(TokenRow.id))]

    def revoke_token(self, name: str, now: float) -> TokenInfo | None:
        """Revoke the token ``name`` (it stops working at once); None if there is no such token."""
        with self._session.begin() as session:
            row = session.scalar(select(TokenRow).where(TokenRow.name == name))
            if row is None:
                return None
            if row.revoked_at is None:
                row.revoked_at = now
            return token_info(row)

    def has_admin_token(self) -> bool:
        """Whether any admin token exists (the first start creates one)."""
        with self._session() as session:
            return session.scalar(select(TokenRow.id).where(TokenRow.admin.is_(True)).limit(1)) is not None

    def token(self, secret: str, now: float | None = None) -> TokenInfo | None:
        """Who holds the API token ``secret``: None if it is not a stored token, is revoked, or expired by ``now``."""
        with self._session() as session:
            row = session.scalar(select(TokenRow).where(TokenRow.sha256 == digest(secret)))
            if row is None or row.revoked_at is not None or (
                    now is not None and row.expires_at is not None and row.expires_at <= now):
                return None
            return token_info(row)

