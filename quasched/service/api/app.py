"""The HTTP API of ``quasched serve`` (FastAPI): :func:`create_app` builds the app around one
:class:`~quasched.service.runtime.service.Service` (store, controller, lock, timer thread) and registers the routes: jobs
and queues (:mod:`.jobs`), nodes (:mod:`.nodes`), the cluster views and live stream
(:mod:`.stream`), and here the admin routes (tokens, whoami), health and readiness, metrics and the
dashboard. Routes and shapes: docs/service.md. One server writes a database (:mod:`quasched.service.store.leadership`):
on a standby every write under ``/api/v1`` is 503 naming the leader, ``/readyz`` is 503.
"""

from __future__ import annotations

import os
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Protocol, Sequence

from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from quasched.model.nodes import NodeSpec
from quasched.service.api.cluster import add_cluster_routes
from quasched.service.api.docs import add_docs
from quasched.service.api.jobs import add_job_routes
from quasched.service.api.nodes import add_node_routes
from quasched.service.api.routing import API, validation_error
from quasched.service.api.runs import add_run_routes
from quasched.service.api.tokens import add_token_routes
from quasched.service.executor.gpustate import Limits
from quasched.service.executor.runas import RunAs, private_database
from quasched.service.loop.state import LoopOptions
from quasched.service.runtime.auth import Reader, reader
from quasched.service.runtime.metrics import RequestTimer
from quasched.service.runtime.schemas import WhoAmI
from quasched.service.runtime.service import Service
from quasched.service.store.leadership import LEASE_TTL_S, Elector, Fenced, identity

DASHBOARD = Path(__file__).parent / "dashboard"
#: what the dashboard's pages may load and do: only this origin's scripts, no framing, no type sniffing
DASHBOARD_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                                 b"img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
                                 b"frame-ancestors 'none'; form-action 'self'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
]
#: largest request body (bytes); a larger one is 413 before it is read
MAX_BODY = 1024 * 1024


class Lifecycle(Protocol):
    """A part of the app that starts after the service and stops before it."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


#: adds routes to the app of a service; returns what must start and stop with it, if anything
Extension = Callable[[FastAPI, Service], Lifecycle | None]


class DashboardHeaders:
    """ASGI middleware: :data:`DASHBOARD_HEADERS` on the dashboard's and the API docs' pages and assets: the paths
    ``pages`` and those under ``prefixes`` (default: ``/``, ``/static/...``, ``/docs``, ``/docs/...``)."""

    def __init__(self, app: ASGIApp, pages: tuple[str, ...] = ("/", "/docs"),
                 prefixes: tuple[str, ...] = ("/static/", "/docs/")) -> None:
        self.app, self.pages, self.prefixes = app, pages, prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path in self.pages or path.startswith(self.prefixes)):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *DASHBOARD_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def sqlite_file(db_url: str) -> Path | None:
    """The database file of a SQLite URL, symbolic links resolved (every name of a database has one token file and
    state directory, beside the file itself); None for other databases."""
    prefix = "sqlite:///"
    if not db_url.startswith(prefix):
        return None
    path = db_url[len(prefix):].split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    real = os.path.realpath(path)
    return Path(path if real == os.path.abspath(path) else real)  # as given unless a link leads elsewhere


#: methods that only read
READS = ("GET", "HEAD", "OPTIONS")


class StandbyGuard:
    """ASGI middleware: while ``service`` is a standby, a write under ``/api/v1`` is 503 naming the leader."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app, self.service = app, service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.service.leading and scope["method"] not in READS \
                and scope["path"].startswith(API):
            await refused(await run_in_threadpool(self.service.refusal))(scope, receive, send)
            return
        await self.app(scope, receive, send)


def refused(err: HTTPException) -> JSONResponse:
    return JSONResponse({"detail": err.detail}, status_code=err.status_code, headers=err.headers)


def create_app(db_url: str = "sqlite:///quasched.db", cluster: NodeSpec | None = None, *,
               token_file: Path | None = None, options: LoopOptions | None = None,
               clock: Callable[[], float] = time.time, store: Any = None,
               extensions: Sequence[Extension] = (), state_dir: Path | None = None,
               advertise_url: str = "", lease_ttl_s: float = LEASE_TTL_S, metrics_public: bool = False,
               run_as: RunAs | None = None, jobs_dir: Path | None = None, gpu_limits: Limits = Limits()) -> FastAPI:
    """The service's FastAPI app on the database ``db_url``.

    ``cluster`` is registered when the database has no nodes (default: the
    built-in synthetic cluster); ``options`` configure the scheduling loop
    (default: ``LoopOptions()``, policy :data:`~quasched.service.domain.DEFAULT_POLICY`). The first admin token is
    written to ``token_file`` (default: ``quasched.token`` beside a SQLite
    database). ``store`` replaces the :class:`~quasched.service.store.database.Store` of ``db_url``.
    Each of ``extensions`` adds its routes to the app and may return a :class:`Lifecycle` that starts and
    stops with it (the kube-scheduler extender: :func:`quasched.kube.mount.extender`).
    With ``options.local_node`` set, the commands of jobs placed on that node run here; their logs and run
    records live under ``state_dir`` (default: ``quasched-state`` beside a SQLite database, else in the
    working directory); ``run_as`` says which account runs each team's commands (default: nobody's run) and
    ``jobs_dir`` where each job gets its working directory (:class:`~quasched.service.executor.commands.Executor`).
    ``/metrics`` needs a token unless ``metrics_public``. ``gpu_limits``: when the GPUs' live state makes new pods
    avoid a device (:mod:`quasched.service.executor.gpustate`).
    One server writes a database: on SQLite a second one raises :class:`~quasched.service.store.leadership.LeaderHeld` naming the
    holder; on PostgreSQL it starts as a standby and takes the lease (time-to-live ``lease_ttl_s``) over when
    the leader's expires. ``advertise_url`` is this server's URL as standbys name it.
    """
    db_file = sqlite_file(db_url)
    if store is None:
        from quasched.service.store.database import Store

        if db_file is not None:
            db_file.parent.mkdir(parents=True, exist_ok=True)
        store = Store(db_url)
    if token_file is None and db_file is not None:
        token_file = db_file.parent / "quasched.token"
    if state_dir is None:
        state_dir = (db_file.parent if db_file is not None else Path()) / "quasched-state"
    epoch = store.acquire_lease(identity(), advertise_url, lease_ttl_s)
    private_database(db_file)  # with the token file and the state directory: the service's alone
    service = Service(store, cluster, options or LoopOptions(), clock, token_file, state_dir,
                      leading=epoch is not None, run_as=run_as, jobs_dir=jobs_dir, gpu_limits=gpu_limits)
    service.elector = Elector(store, service, advertise_url, lease_ttl_s, standby=store.file_lock is None)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.start()
        for part in parts:
            await run_in_threadpool(part.start)
        try:
            yield
        finally:
            for part in reversed(parts):
                part.stop()
            service.stop()

    app = FastAPI(
        title="quasched", version="1", lifespan=lifespan, max_body_size=MAX_BODY, docs_url=None, redoc_url=None,
        description="GPU-cluster scheduler: submit jobs, watch queues and nodes (docs/service.md). Every route "
                    "under `/api/v1` needs a bearer token; " + ("`/metrics`, " if metrics_public else "")
                    + "`/healthz`, `/readyz`, `/docs`, `/openapi.json` and the dashboard (`/`, `/static/...`) "
                    "need none" + ("." if metrics_public else "; `/metrics` needs one."),
        openapi_tags=[{"name": "jobs"}, {"name": "queues"}, {"name": "nodes"}, {"name": "cluster"},
                      {"name": "admin"}],
    )
    app.state.service = service
    app.add_exception_handler(RequestValidationError, validation_error)

    async def fenced(request: Request, exc: Exception) -> Response:
        service.step_down(str(exc))
        return refused(await run_in_threadpool(service.refusal))

    app.add_exception_handler(Fenced, fenced)
    app.add_middleware(StandbyGuard, service=service)
    app.add_middleware(RequestTimer, metrics=service.metrics, skip=("/stream",))
    app.add_middleware(DashboardHeaders)
    add_routes(app, service, metrics_public)
    parts = [part for part in (extend(app, service) for extend in extensions) if part is not None]
    return app


def add_routes(app: FastAPI, service: Service, metrics_public: bool = False) -> None:
    """Register the ``/api/v1`` routes of ``service`` on ``app``, and health, metrics and the dashboard."""
    lock = service.lock
    add_job_routes(app, service)
    add_node_routes(app, service)
    add_run_routes(app, service)
    add_cluster_routes(app, service)
    add_token_routes(app, service)
    add_docs(app)

    # ------------------------------------------------------------ admin
    @app.get(f"{API}/whoami", response_model=WhoAmI, tags=["admin"])
    def whoami(who: Reader) -> WhoAmI:
        """The caller's token: name, team, admin."""
        return WhoAmI(name=who.name, team=who.team, admin=who.admin)

    # ------------------------------------------------------------ health, metrics, dashboard
    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        """Alive (a leader or a standby)."""
        return {"status": "ok", "role": "leader" if service.leading else "standby"}

    @app.get("/readyz", include_in_schema=False)
    def readyz() -> Response:
        """200 when this server leads and schedules; 503 on a standby, naming the leader."""
        if service.leading:
            return JSONResponse({"status": "ready", "role": "leader", "epoch": service.store.epoch})
        holder = service.store.leader()
        leader = holder._asdict() if holder.alive else None
        return JSONResponse({"status": "standby", "role": "standby", "leader": leader}, status_code=503)

    @app.get("/metrics", include_in_schema=False, dependencies=[] if metrics_public else [Depends(reader)])
    def metrics() -> Response:
        with lock:
            service.metrics.refresh(service.ctl)
        return Response(service.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    add_dashboard(app)


def add_dashboard(app: FastAPI, page: Path = DASHBOARD / "index.html",
                  assets: Sequence[tuple[str, Path]] = ()) -> None:
    """Serve ``page`` at ``/`` (not cached; a redirect to ``/docs`` while it is missing) and the dashboard's folder
    at ``/static``; each of ``assets`` (a path under ``/static`` and a folder) is mounted before it, so its files
    win there. The pages' security headers are :class:`DashboardHeaders`'."""
    from fastapi.staticfiles import StaticFiles

    for prefix, folder in [*assets, ("/static", DASHBOARD)]:
        if folder.is_dir():
            app.mount(prefix, StaticFiles(directory=folder), name=prefix.strip("/").replace("/", "-"))

    @app.get("/", include_in_schema=False)
    def index() -> Response:
        if page.is_file():
            return FileResponse(page, headers={"Cache-Control": "no-cache"})
        return RedirectResponse("/docs")
