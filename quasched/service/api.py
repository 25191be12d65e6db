"""The HTTP API of ``quasched serve`` (FastAPI): jobs, queues, nodes, snapshot, events, live stream, metrics.

One :class:`Service` per app holds the :class:`~.store.Store`, the
:class:`~.controller.Controller` and one lock. Every mutation runs, under the
lock: validate → store write → controller call → scheduling cycle →
``store.save(*ctl.drain_changes())``; the events are then published to the
live-stream subscribers. A background thread fires the controller's timers
(completions by duration, grace-period ends) at :meth:`Controller.next_timer`
or every half second. Routes and shapes: docs/service.md.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import tempfile
import threading
import time
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, AsyncIterator, Callable, TypeVar

from fastapi import Body, FastAPI, Header, HTTPException, Path as PathParam, Query, Request, Response, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from quasched.model.cluster import NodeSpec, PlacementError
from quasched.service.auth import Admin, Reader, StreamReader, TeamOrAdmin
from quasched.service.controller import Controller, LoopOptions, SpecError, records_of
from quasched.service.domain import Event, Job, JobState, NodeRecord, QueueSpec
from quasched.service.metrics import RequestTimer, ServiceMetrics
from quasched.service.schemas import (MAX_ID, TEAM_PATTERN, ClusterYaml, DeviceHealth, EventOut, JobComplete,
                                      JobDetail, JobOut, JobSubmit, NodeIn, NodeOut, NodePatch, QueueOut, QueuePut,
                                      SampleOut, SnapshotOut, TokenCreate, TokenOut, WhoAmI)

if TYPE_CHECKING:
    from quasched.kube.extender import KubeOptions

API = "/api/v1"
DASHBOARD = Path(__file__).parent / "dashboard"
#: seconds between keep-alive comments on an idle live stream
HEARTBEAT_S = 15.0
#: events a slow live-stream subscriber may lag behind before it is disconnected (it reconnects and replays)
STREAM_BACKLOG = 1000
#: longest wait of the timer thread between ticks
TICK_S = 0.5
#: the queue created on a fresh database, so a new service accepts jobs at once
DEFAULT_QUEUE = "default"

T = TypeVar("T")


def default_cluster() -> NodeSpec:
    """The built-in cluster: the simulator's synthetic default (120 openb-like GPU nodes)."""
    from quasched.traces.synthetic import synthetic_cluster

    return synthetic_cluster()


def sqlite_file(db_url: str) -> Path | None:
    """The database file of a SQLite URL (None for other databases)."""
    prefix = "sqlite:///"
    if not db_url.startswith(prefix):
        return None
    path = db_url[len(prefix):].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def write_token_file(path: Path, secret: str) -> None:
    """Write ``secret`` to ``path``, readable by its owner only (mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secret + "\n")
    os.chmod(path, 0o600)


# ---------------------------------------------------------------- live stream
class _Subscriber:
    def __init__(self, loop: asyncio.AbstractEventLoop, maxsize: int) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize)
        self.closed = False

    def offer(self, events: list[Event | None]) -> None:
        """In the subscriber's loop: queue ``events``; on overflow end the stream (the client replays)."""
        for ev in events:
            if self.closed:
                return
            if ev is not None and self.queue.qsize() >= self.queue.maxsize - 1:
                ev = None
            if ev is None:
                self.closed = True
            self.queue.put_nowait(ev)


class Broker:
    """Fan-out of persisted events to live-stream subscribers, fed from any thread."""

    def __init__(self, maxsize: int = STREAM_BACKLOG) -> None:
        self.maxsize = maxsize
        self._subscribers: set[_Subscriber] = set()
        self._lock = threading.Lock()

    def subscribe(self) -> _Subscriber:
        """A new live-stream subscriber on the running event loop."""
        sub = _Subscriber(asyncio.get_running_loop(), self.maxsize)
        with self._lock:
            self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: _Subscriber) -> None:
        """Stop sending events to ``sub``."""
        with self._lock:
            self._subscribers.discard(sub)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def publish(self, events: list[Event | None]) -> None:
        """Offer ``events`` to every subscriber (thread-safe; a subscriber whose loop closed is dropped)."""
        if not events:
            return
        with self._lock:
            subscribers = list(self._subscribers)
        for sub in subscribers:
            try:
                sub.loop.call_soon_threadsafe(sub.offer, list(events))
            except RuntimeError:  # its event loop is closed
                self.unsubscribe(sub)

    def close(self) -> None:
        """End every stream."""
        self.publish([None])


def sse(ev: Event) -> str:
    """One event as a server-sent-events frame (``id``, ``event``, ``data``)."""
    data = json.dumps(EventOut.of(ev).model_dump(mode="json"), separators=(",", ":"))
    head = f"id: {ev.id}\n" if ev.id is not None else ""
    return f"{head}event: {ev.kind}\ndata: {data}\n\n"


# ---------------------------------------------------------------- the service
class Service:
    """Store + controller + one lock, and the timer thread (module docstring)."""

    def __init__(self, store: Any, cluster: NodeSpec | None, options: LoopOptions,
                 clock: Callable[[], float] = time.time, token_file: Path | None = None) -> None:
        self.store = store
        self.clock = clock
        self.options = options
        self.lock = threading.RLock()
        self.metrics = ServiceMetrics()
        self.broker = Broker()
        self.token_file = token_file
        self.new_admin_token: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._teams: dict[int, str] = {}
        with self.lock:
            self.records, self.ctl = self._restore(cluster)
            self._ensure_admin_token()

    # ------------------------------------------------------------ start
    def _restore(self, cluster: NodeSpec | None) -> tuple[dict[str, NodeRecord], Controller]:
        """Controller rebuilt from the store; on a fresh store register ``cluster`` and a default queue."""
        records, queues, jobs = self.store.load()
        if not records:
            records = records_of(cluster if cluster is not None else default_cluster())
            for record in records:
                self.store.put_node(record)
        if not queues:
            queues = [QueueSpec(DEFAULT_QUEUE)]
            self.store.put_queue(queues[0])
        ctl = Controller.rebuilt(records, queues, jobs, self.options)
        self._teams.update((job.id, job.spec.team) for job in jobs)
        now = self.clock()
        ctl.cycle(now)
        self._persist(ctl)
        return {r.name: r for r in records}, ctl

    def _ensure_admin_token(self) -> None:
        """Create the first admin token, print it and write it to the token file, unless one exists."""
        if self.store.has_admin_token():
            return
        secret = self.store.add_token("admin", None, True)
        self.new_admin_token = secret
        where = ""
        if self.token_file is not None:
            write_token_file(self.token_file, secret)
            where = f" (written to {self.token_file})"
        print(f"quasched: created admin token {secret}{where}", file=sys.stderr)

    def lookup_token(self, secret: str) -> Any:
        """Who holds the API token ``secret`` (None if unknown)."""
        return self.store.token(secret)

    # ------------------------------------------------------------ timer thread
    def start(self) -> None:
        """Start the timer thread (completions by duration, grace periods) if it is not running."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run_timers, name="quasched-timers", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the timer thread and close the live streams."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.broker.close()

    def _run_timers(self) -> None:
        while not self._stop.is_set():
            try:
                wait = self.tick()
            except Exception as err:  # keep the loop alive; the next tick retries
                print(f"quasched: timer tick failed: {err!r}", file=sys.stderr)
                wait = TICK_S
            self._stop.wait(wait)

    def tick(self) -> float:
        """Fire due timers and run a cycle; seconds until the next timer (at most :data:`TICK_S`)."""
        with self.lock:
            now = self.clock()
            events = self._cycle(now)
            nxt = self.ctl.next_timer()
        self.broker.publish(list(events))
        return TICK_S if nxt is None else min(TICK_S, max(0.001, nxt - now))

    # ------------------------------------------------------------ mutations
    def _persist(self, ctl: Controller) -> list[Event]:
        jobs, events = ctl.drain_changes()
        if jobs or events:
            try:
                self.store.save(jobs, events)
            except Exception as err:  # memory ran ahead of the database: forget it, rebuild from what is stored
                records, queues, unfinished = self.store.load()
                self.ctl = Controller.rebuilt(records, queues, unfinished, self.options)
                raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                    f"the database refused the change, nothing was applied: {err}") from err
            self._teams.update((job.id, job.spec.team) for job in jobs)
            self.metrics.count(events, self._teams)
            for job in jobs:
                if job.state.finished:
                    self._teams.pop(job.id, None)
        return events

    def mutate(self, change: Callable[[Controller, float], T]) -> T:
        """Under the lock: ``change(ctl, now)``, a scheduling cycle, persist; then publish the events."""
        with self.lock:
            now = self.clock()
            result = change(self.ctl, now)
            events = self._cycle(now)
        self.broker.publish(list(events))
        return result

    def _cycle(self, now: float) -> list[Event]:
        """A timed scheduling cycle and its persisted changes (caller holds the lock)."""
        start = time.perf_counter()
        self.ctl.cycle(now)
        self.metrics.decision.observe(time.perf_counter() - start)
        return self._persist(self.ctl)

    # ------------------------------------------------------------ views
    def job_out(self, job: Job) -> JobOut:
        """The API view of ``job`` (its live state when unfinished, with its queue position)."""
        live = self.ctl.jobs.get(job.id)
        return JobOut.of(live if live is not None else job, self.ctl.position.get(job.id))

    def node_out(self, raw: dict[str, Any]) -> NodeOut:
        """The API view of one node of the controller's snapshot."""
        record = self.records.get(raw["name"])
        return NodeOut(num_gpus=len(raw["gpu_used_milli"]), labels=dict(record.labels) if record else {}, **raw)

    def nodes_out(self, names: set[str] | None = None) -> list[NodeOut]:
        """The API view of the nodes named in ``names`` (all when None)."""
        return [self.node_out(n) for n in self.ctl.snapshot()["nodes"] if names is None or n["name"] in names]


# ---------------------------------------------------------------- errors
def field_error(field: str, message: str, code: int = status.HTTP_422_UNPROCESSABLE_CONTENT,
                where: str = "body") -> HTTPException:
    """An error in FastAPI's shape naming ``field`` (``{"detail": [{"loc": [where, field], "msg": ...}]}``)."""
    loc = [int(part) if part.isdigit() else part for part in field.split(".")]
    return HTTPException(code, [{"loc": [where, *loc], "msg": message, "type": "value_error"}])


def not_found(what: str) -> HTTPException:
    """A 404 saying ``no <what>``."""
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no {what}")


def _safe(value: Any) -> Any:
    """``value`` with non-finite floats as strings and anything else JSON cannot hold as text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_safe(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422, safe for inputs JSON cannot encode (NaN, Infinity)."""
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    detail = [{k: _safe(v) for k, v in err.items() if k != "url"} for err in errors]
    return JSONResponse(jsonable_encoder({"detail": detail}), status_code=422)


# ---------------------------------------------------------------- the app
def create_app(db_url: str = "sqlite:///quasched.db", cluster: NodeSpec | None = None, *, policy: str = "fgd",
               token_file: Path | None = None, options: LoopOptions | None = None,
               clock: Callable[[], float] = time.time, store: Any = None,
               kube: KubeOptions | None = None) -> FastAPI:
    """The service's FastAPI app on the database ``db_url``.

    ``cluster`` is registered when the database has no nodes (default: the
    built-in synthetic cluster); ``options`` configure the scheduling loop
    (default: ``LoopOptions(policy=policy)``). The first admin token is
    written to ``token_file`` (default: ``quasched.token`` beside a SQLite
    database). ``store`` replaces the :class:`~.store.Store` of ``db_url``.
    ``kube`` mounts the kube-scheduler extender (:mod:`quasched.kube`, docs/kubernetes.md).
    """
    db_file = sqlite_file(db_url)
    if store is None:
        from quasched.service.store import Store

        if db_file is not None:
            db_file.parent.mkdir(parents=True, exist_ok=True)
        store = Store(db_url)
    if token_file is None and db_file is not None:
        token_file = db_file.parent / "quasched.token"
    service = Service(store, cluster, options or LoopOptions(policy=policy), clock, token_file)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.start()
        sync = getattr(app.state, "kube", None) and app.state.kube.sync
        if sync is not None:
            await run_in_threadpool(sync.start)
        try:
            yield
        finally:
            if sync is not None:
                sync.stop()
            service.stop()

    app = FastAPI(
        title="quasched", version="1", lifespan=lifespan,
        description="GPU-cluster scheduler: submit jobs, watch queues and nodes (docs/service.md).",
        openapi_tags=[{"name": "jobs"}, {"name": "queues"}, {"name": "nodes"}, {"name": "cluster"},
                      {"name": "admin"}],
    )
    app.state.service = service
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_middleware(RequestTimer, metrics=service.metrics, skip=("/stream",))
    add_routes(app, service)
    if kube is not None:
        from quasched.kube.extender import mount

        app.state.kube = mount(app, service, kube)
    return app


JobId = Annotated[int, PathParam(ge=0, le=MAX_ID, description="Job id.")]
NodeName = Annotated[str, PathParam(min_length=1, max_length=253, description="Node name.")]


def add_routes(app: FastAPI, service: Service) -> None:
    """Register the ``/api/v1`` routes of ``service`` on ``app``."""
    lock = service.lock

    # ------------------------------------------------------------ jobs
    @app.post(f"{API}/jobs", status_code=201, response_model=JobOut, tags=["jobs"],
              responses={200: {"model": JobOut, "description": "An earlier job with the same client_token."},
                         409: {"description": "The client_token names an earlier, different job."},
                         422: {"description": "Bad field, unknown team or GPU model, or a job no node can host."}})
    def submit(body: JobSubmit, who: TeamOrAdmin, response: Response) -> JobOut:
        """Submit a job to its team's queue; it is scheduled at once if it fits."""
        who.require_team(body.team)
        spec = body.to_spec()
        with lock:
            try:
                service.ctl.validate(spec)
            except SpecError as err:
                raise field_error(err.field, err.message) from None
            now = service.clock()
            job = service.store.insert_job(spec, service.options.priority_classes[spec.priority_class], now)
            if job.id in service.ctl.jobs or job.state != JobState.PENDING:  # a repeated client_token
                if job.spec != spec:
                    raise HTTPException(status.HTTP_409_CONFLICT, f"client_token {spec.client_token!r} was "
                                        f"used for job {job.id}, which asked for something else")
                response.status_code = status.HTTP_200_OK
                return service.job_out(job)
            live = service.mutate(lambda ctl, now: ctl.submit(job.id, spec, now, seq=job.seq))
            return service.job_out(live)

    @app.get(f"{API}/jobs", response_model=list[JobOut], tags=["jobs"])
    def list_jobs(who: Reader, state: JobState | None = None,
                  team: Annotated[str | None, Query(max_length=63)] = None,
                  limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                  offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0) -> list[JobOut]:
        """Jobs, newest first."""
        with lock:
            return [service.job_out(j) for j in service.store.jobs(state=state, team=team, limit=limit,
                                                                  offset=offset)]

    @app.get(f"{API}/jobs/{{job_id}}", response_model=JobDetail, tags=["jobs"])
    def get_job(job_id: JobId, who: Reader) -> JobDetail:
        """A job and its events."""
        with lock:
            job = service.store.job(job_id)
            if job is None:
                raise not_found(f"job {job_id}")
            events = service.store.events(job_id=job_id, limit=1000)
            return JobDetail(**service.job_out(job).model_dump(), events=[EventOut.of(e) for e in events])

    def end_job(job_id: int, who: Any, end: Callable[[Controller, Job, float], Any]) -> JobOut:
        with lock:
            job = service.store.job(job_id)
            if job is None:
                raise not_found(f"job {job_id}")
            who.require_team(job.spec.team)
            if job.state.finished or job.id not in service.ctl.jobs:
                raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id} already {job.state.value}")
            service.mutate(lambda ctl, now: end(ctl, ctl.job(job_id), now))
            return service.job_out(service.store.job(job_id) or job)

    @app.post(f"{API}/jobs/{{job_id}}/cancel", response_model=JobOut, tags=["jobs"],
              responses={409: {"description": "The job has finished."}})
    def cancel(job_id: JobId, who: TeamOrAdmin) -> JobOut:
        """Cancel a pending or running job (its team or an admin)."""
        return end_job(job_id, who, lambda ctl, job, now: ctl.cancel(job.id, now))

    @app.post(f"{API}/jobs/{{job_id}}/complete", response_model=JobOut, tags=["jobs"],
              responses={409: {"description": "The job is not running."}})
    def complete(job_id: JobId, who: TeamOrAdmin, body: Annotated[JobComplete | None, Body()] = None) -> JobOut:
        """The job's runtime reports that it succeeded (or failed)."""
        failed = body.failed if body is not None else False

        def end(ctl: Controller, job: Job, now: float) -> Any:
            if not job.state.holds_resources:
                raise HTTPException(status.HTTP_409_CONFLICT, f"job {job.id} is {job.state.value}, not running")
            return ctl.finish(job.id, now, failed=failed)

        return end_job(job_id, who, end)

    # ------------------------------------------------------------ queues
    @app.get(f"{API}/queues", response_model=list[QueueOut], tags=["queues"])
    def queues(who: Reader) -> list[QueueOut]:
        """Every queue: quota, usage, borrowed GPUs, fair share, pending and running jobs."""
        with lock:
            return [QueueOut(**q) for q in service.ctl.queue_status()]

    @app.put(f"{API}/queues/{{name}}", response_model=QueueOut, tags=["queues"])
    def put_queue(name: Annotated[str, PathParam(min_length=1, max_length=63, pattern=TEAM_PATTERN)],
                  body: QueuePut, who: Admin) -> QueueOut:
        """Create or change a team's queue (admin)."""
        spec = body.to_spec(name)
        with lock:
            service.store.put_queue(spec)
            service.mutate(lambda ctl, now: ctl.put_queue(spec))
            return next(QueueOut(**q) for q in service.ctl.queue_status() if q["name"] == name)

    # ------------------------------------------------------------ nodes
    @app.get(f"{API}/nodes", response_model=list[NodeOut], tags=["nodes"])
    def nodes(who: Reader) -> list[NodeOut]:
        """Every node with its occupancy."""
        with lock:
            return service.nodes_out()

    @app.post(f"{API}/nodes", status_code=201, response_model=list[NodeOut], tags=["nodes"],
              responses={409: {"description": "A node of that name exists."}})
    def add_nodes(body: list[NodeIn] | ClusterYaml, who: Admin) -> list[NodeOut]:
        """Register nodes (admin): a list of nodes, or `{"cluster_yaml": ...}` in the cluster-file format."""
        if isinstance(body, ClusterYaml):
            records = records_from_yaml(body.cluster_yaml)
        else:
            records = []
            for i, node in enumerate(body):
                try:
                    records.append(node.to_record())
                except ValueError as err:
                    raise field_error(f"{i}.gpu_model", str(err).split(": ", 1)[-1]) from None
        if not records:
            raise field_error("nodes", "no nodes given", where="body")
        names = [r.name for r in records]
        if len(set(names)) != len(names):
            raise field_error("name", "node names repeat within the request")
        with lock:
            taken = sorted(set(names) & set(service.records))
            if taken:
                raise HTTPException(status.HTTP_409_CONFLICT, f"nodes exist: {taken[:10]}")

            def add(ctl: Controller, now: float) -> None:
                for record in records:
                    ctl.add_node(record, now)
                    service.store.put_node(record)
                    service.records[record.name] = record

            service.mutate(add)
            return service.nodes_out(set(names))

    def record_of(name: str) -> NodeRecord:
        record = service.records.get(name)
        if record is None:
            raise not_found(f"node {name!r}")
        return record

    @app.patch(f"{API}/nodes/{{name}}", response_model=NodeOut, tags=["nodes"])
    def patch_node(name: NodeName, body: NodePatch, who: Admin) -> NodeOut:
        """Cordon (optionally draining its jobs back to the queue) or uncordon a node (admin)."""
        with lock:
            record = record_of(name)

            def change(ctl: Controller, now: float) -> None:
                if body.cordoned is True:
                    ctl.cordon(name, now, drain=body.drain)
                elif body.cordoned is False:
                    ctl.uncordon(name, now)
                elif body.drain:
                    ctl.drain(name, now)
                if body.cordoned is not None:
                    service.records[name] = updated = replace(record, cordoned=body.cordoned)
                    service.store.put_node(updated)

            service.mutate(change)
            return service.nodes_out({name})[0]

    @app.put(f"{API}/nodes/{{name}}/devices/{{device}}", response_model=NodeOut, tags=["nodes"])
    def device_health(name: NodeName, device: Annotated[int, PathParam(ge=0, le=1024)], body: DeviceHealth,
                      who: Admin) -> NodeOut:
        """Mark a GPU device healthy or failed (admin); jobs on a failed device go back to the queue."""
        with lock:
            record = record_of(name)
            if device >= record.num_gpus:
                raise not_found(f"GPU device {device} on node {name!r} (it has {record.num_gpus})")

            def change(ctl: Controller, now: float) -> None:
                ctl.set_device_health(name, device, body.healthy, now)
                unhealthy = set(record.unhealthy) - {device} | (set() if body.healthy else {device})
                service.records[name] = updated = replace(record, unhealthy=tuple(sorted(unhealthy)))
                service.store.put_node(updated)

            service.mutate(change)
            return service.nodes_out({name})[0]

    @app.delete(f"{API}/nodes/{{name}}", status_code=204, tags=["nodes"])
    def delete_node(name: NodeName, who: Admin) -> Response:
        """Remove a node (admin); its jobs go back to the queue."""
        with lock:
            record_of(name)

            def remove(ctl: Controller, now: float) -> None:
                ctl.remove_node(name, now)
                service.store.delete_node(name)
                del service.records[name]

            service.mutate(remove)
        return Response(status_code=204)

    # ------------------------------------------------------------ cluster
    @app.get(f"{API}/snapshot", response_model=SnapshotOut, tags=["cluster"])
    def snapshot(who: Reader) -> SnapshotOut:
        """Per node: GPU model, per-device milli used and health, cordon, jobs; totals, allocation, fragmentation."""
        with lock:
            snap = service.ctl.snapshot()
            return SnapshotOut(**{**snap, "nodes": [service.node_out(n) for n in snap["nodes"]]})

    @app.get(f"{API}/timeseries", response_model=list[SampleOut], tags=["cluster"])
    def timeseries(who: Reader, since: Annotated[float | None, Query(allow_inf_nan=False)] = None,
                   limit: Annotated[int, Query(ge=1, le=4096)] = 4096) -> list[SampleOut]:
        """Samples of GPU allocation, fragmentation and queue length (oldest first)."""
        with lock:
            samples = [s for s in service.ctl.samples if since is None or s[0] > since][-limit:]
        return [SampleOut(time=t, gpu_allocation_pct=a, fragmentation_pct=f, pending=p) for t, a, f, p in samples]

    @app.get(f"{API}/events", response_model=list[EventOut], tags=["cluster"])
    def events(who: Reader, job_id: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
               after: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
               limit: Annotated[int, Query(ge=1, le=1000)] = 200) -> list[EventOut]:
        """The audit log, oldest first; page on with `after` = the last id."""
        with lock:
            return [EventOut.of(e) for e in service.store.events(job_id=job_id, after=after, limit=limit)]

    @app.get(f"{API}/stream", tags=["cluster"], response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}},
                              "description": "Server-Sent Events: `event: <kind>`, `data: <Event JSON>`."}})
    async def stream(request: Request, who: StreamReader,
                     after: Annotated[int | None, Query(ge=0, le=MAX_ID, description=(
                         "Replay stored events with a larger id first."))] = None,
                     last_event_id: Annotated[str | None, Header(max_length=32)] = None) -> StreamingResponse:
        """Live events (SSE). A reconnecting client (`Last-Event-ID`) first gets what it missed."""
        start = after
        if start is None and last_event_id and last_event_id.isdigit():
            start = min(int(last_event_id), MAX_ID)
        sub = service.broker.subscribe()

        def replay(after_id: int) -> list[Event]:
            with lock:
                return list(service.store.events(after=after_id, limit=STREAM_BACKLOG))

        async def body() -> AsyncIterator[str]:
            try:
                yield "retry: 2000\n\n"
                seen = -1
                if start is not None:
                    for ev in await run_in_threadpool(replay, start):
                        seen = max(seen, ev.id or -1)
                        yield sse(ev)
                while True:
                    try:
                        item: Event | None = await asyncio.wait_for(sub.queue.get(), HEARTBEAT_S)
                    except TimeoutError:
                        yield ": keep-alive\n\n"
                        continue
                    if item is None:
                        return
                    if item.id is not None and item.id <= seen:
                        continue
                    yield sse(item)
            finally:
                service.broker.unsubscribe(sub)

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    # ------------------------------------------------------------ admin
    @app.post(f"{API}/tokens", status_code=201, response_model=TokenOut, tags=["admin"])
    def create_token(body: TokenCreate, who: Admin) -> TokenOut:
        """A new API token (admin); the secret is shown once."""
        if body.admin == (body.team is not None):
            raise field_error("team", "give a team for a team token, or admin=true without a team")
        with lock:
            secret = service.store.add_token(body.name, body.team, body.admin)
        return TokenOut(name=body.name, team=body.team, admin=body.admin, token=secret)

    @app.get(f"{API}/whoami", response_model=WhoAmI, tags=["admin"])
    def whoami(who: Reader) -> WhoAmI:
        """The caller's token: name, team, admin."""
        return WhoAmI(name=who.name, team=who.team, admin=who.admin)

    # ------------------------------------------------------------ unauthenticated
    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        with lock:
            service.metrics.refresh(service.ctl)
        return Response(service.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    if DASHBOARD.is_dir():
        from fastapi.staticfiles import StaticFiles

        app.mount("/static", StaticFiles(directory=DASHBOARD), name="static")

    @app.get("/", include_in_schema=False)
    def index() -> Response:
        page = DASHBOARD / "index.html"
        if page.is_file():
            return FileResponse(page, headers={"Cache-Control": "no-cache"})
        return RedirectResponse("/docs")


def records_from_yaml(text: str) -> list[NodeRecord]:
    """Nodes of a cluster file given as text (422 naming ``cluster_yaml`` if it does not load)."""
    from quasched.traces.cluster_file import load_cluster_file

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.yaml"
        path.write_text(text)
        try:
            nodes = load_cluster_file(path)
        except (ValueError, PlacementError) as err:
            raise field_error("cluster_yaml", str(err)) from None
        except Exception as err:  # YAML the parser cannot read at all
            raise field_error("cluster_yaml", f"not a cluster file: {err}") from None
    return records_of(nodes)
