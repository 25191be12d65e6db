"""The front's HTTP API (``/api/v1``, bearer tokens as ``serve``'s: admin tokens do everything, a team token acts for
its team, any valid token reads the scheduling facts): submit, list, read and cancel jobs; members; zones; carbon."""

from __future__ import annotations

import math
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

from fastapi import FastAPI, HTTPException, Query, Response, status
from fastapi.responses import PlainTextResponse
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, model_validator

from quasched.front.front import ENDED, HORIZON_H, Front, Sending, Standby
from quasched.front.members import MemberError
from quasched.front.page import add_page_routes
from quasched.front.store import Dispatch, FrontStore
from quasched.service.api.app import MAX_BODY
from quasched.service.api.routing import API, JobId, field_error, not_found, validation_error
from quasched.service.domain import Job, JobState
from quasched.service.runtime.auth import Admin, Reader, TeamOrAdmin, TokenCache
from quasched.service.runtime.schemas import TEAM_PATTERN, JobSubmit, gpus_of, parse_duration
from quasched.service.runtime.service import write_token_file
from quasched.service.store.database import TokenInfo
from quasched.service.store.leadership import LEASE_TTL_S, Elector
from quasched.signals.base import HOUR_S


class FrontSubmit(JobSubmit):
    """A job for the front: the fields of ``serve``'s, with its flexibility: a ``deadline`` or a ``slack``. Its run
    time (``duration``, or ``time_limit`` for a command) is what the dispatcher plans with."""

    deadline: float | None = Field(None, gt=0, description="Latest end, epoch seconds (UTC).")
    slack: str | float | None = Field(None, description="How long its start may be deferred: seconds or 30m, 4h; "
                                      "0 or omitted (and no deadline): start at once.")

    @model_validator(mode="after")
    def _plannable(self) -> FrontSubmit:
        if self.duration is None and self.time_limit is None:
            raise ValueError("duration: give duration (or time_limit for a command): the dispatcher plans with it")
        if self.deadline is not None and self.slack is not None:
            raise ValueError("slack: give a deadline or a slack, not both")
        if self.slack is not None and self.slack not in (0, "0"):
            parse_duration(self.slack)
        return self

    def run_s(self) -> float:
        return parse_duration(self.duration if self.duration is not None else self.time_limit)  # type: ignore[arg-type]

    def latest_end(self, now: float) -> float:
        if self.deadline is not None:
            return float(self.deadline)
        slack = 0.0 if self.slack in (None, 0, "0") else parse_duration(self.slack)  # type: ignore[arg-type]
        return now + slack + self.run_s()


class FrontJobOut(BaseModel):
    """A front job: its request, state (its member's), where and when it goes and why, its energy and carbon."""
    id: int
    name: str
    team: str
    state: JobState
    gpus: float
    pods: int
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    deadline: float
    member: str = Field(description="The member it goes to (empty: not decided yet).")
    release_at: float | None = Field(description="When it is sent, epoch s (deferred: later than submitted_at).")
    why: str = Field(description="Where and when, in words: the intensity then and now.")
    remote: str | None = Field(description="Its name on the member (a serve member's job id, a Kubernetes member's "
                                           "namespace/pod), once sent.")
    sent_at: float | None = Field(description="When it was sent to its member, epoch s.")
    kwh: float | None = Field(description="Modelled dynamic IT energy of its run, kWh (once ended).")
    kg: float | None = Field(description="kg CO2e: that energy x the hours' intensity x PUE (once ended).")
    baseline_member: str = Field(description="The least loaded member when it arrived.")
    baseline_kg: float | None = Field(description="kg CO2e of the same run at once on that member (once ended).")
    note: str = Field("", description="While its member does not answer: since when, and that its state is the last "
                      "known (such jobs are reported, not sent elsewhere: they may still run there).")


def job_out(job: Job, dispatch: Dispatch, note: str = "") -> FrontJobOut:
    return FrontJobOut(note=note, id=job.id, name=job.spec.name, team=job.spec.team, state=job.state,
                       gpus=gpus_of(job.spec.num_gpu, job.spec.gpu_milli), pods=job.spec.pods,
                       submitted_at=job.submitted_at, started_at=job.started_at, finished_at=job.finished_at,
                       exit_code=job.exit_code, deadline=dispatch.deadline, member=dispatch.member,
                       release_at=dispatch.release_at, why=dispatch.why, remote=dispatch.remote,
                       sent_at=dispatch.sent_at,
                       kwh=dispatch.kwh, kg=dispatch.kg, baseline_member=dispatch.baseline_member,
                       baseline_kg=dispatch.baseline_kg)


class TokenCreate(BaseModel):
    name: str = Field(min_length=1, max_length=63, pattern=TEAM_PATTERN)
    team: str | None = Field(None, min_length=1, max_length=63, pattern=TEAM_PATTERN)
    admin: bool = False


class Tokens:
    """What the shared auth dependencies ask of ``app.state.service``: the tokens, cached by the one writer."""

    def __init__(self, store: FrontStore) -> None:
        self.store, self.cache = store, TokenCache()

    def cached_token(self, secret: str) -> TokenInfo | None:
        return self.cache.get(secret, time.time())

    def lookup_token(self, secret: str) -> TokenInfo | None:
        generation = self.cache.generation
        found = self.store.token(secret, now=time.time())
        if found is not None:
            self.cache.put(secret, found, generation)
        return found


def create_front_app(front: Front, token_file: Path | None = None, tick_s: float = 1.0, advertise_url: str = "",
                     lease_ttl_s: float = LEASE_TTL_S) -> FastAPI:
    """The API of ``front``; its loop thread and its lease's elector run while the app does (SQLite: the sole writer
    takes the lease at start; PostgreSQL: a standby takes over when the leader's lease runs out). The first start
    creates an admin token (written to ``token_file``, mode 0600, when given)."""
    store = front.store
    elector = Elector(store, front, advertise_url, lease_ttl_s, standby=store.file_lock is None)
    if not store.has_admin_token():
        secret = store.add_token("admin", None, True)
        if token_file is not None:
            write_token_file(token_file, secret)
        front.new_admin_token = secret

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not front.leading:
            elector.start()
        front.start(tick_s)
        try:
            yield
        finally:
            elector.stop()
            front.stop()
            if front.leading:
                store.release_lease()

    app = FastAPI(title="quasched federate", version="1", lifespan=lifespan, max_body_size=MAX_BODY,
                  description="Federation front: jobs dispatched by carbon to member clusters (docs/federation.md).")
    app.state.service = Tokens(store)
    app.add_exception_handler(RequestValidationError, validation_error)
    add_page_routes(app, front)

    def found(job_id: int) -> tuple[Job, Dispatch, str]:
        """The job, its dispatch and the note on its member (the loop's copy if it holds the job, else the store's)."""
        with front.lock:
            index = front.index.get(job_id)
            if index is not None:
                job, dispatch = front.jobs[index], front.dispatch_of[index]
                return job, dispatch, "" if job.state in ENDED or dispatch.remote is None else \
                    front.unreachable(dispatch.member)
        stored = store.job(job_id)
        row = store.dispatches([job_id]).get(job_id) if stored is not None else None
        if stored is None or row is None:
            raise not_found(f"job {job_id}")
        return stored, row, ""

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    def readyz() -> Response:
        """200 while this front leads (a load balancer routes to it), else 503."""
        return Response(status_code=200 if front.leading else 503)

    @app.post(f"{API}/jobs", status_code=201, response_model=FrontJobOut, tags=["jobs"])
    def submit(body: FrontSubmit, who: TeamOrAdmin) -> FrontJobOut:
        """Submit a job; it is dispatched by carbon within its deadline (or slack)."""
        who.require_team(body.team)
        now = front.clock()
        deadline = body.latest_end(now)
        run_s = body.run_s()
        if not math.isfinite(deadline) or deadline < now + run_s:
            raise field_error("deadline", f"{deadline:g} leaves less than the run time ({run_s:g} s) from now")
        if deadline - front.epoch > HORIZON_H * HOUR_S:
            raise field_error("deadline", "beyond the front's planning horizon (a year from its start)")
        try:
            job, dispatch = front.submit(body.to_spec(), deadline, run_s, now)
        except Standby as err:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(err),
                                headers={"X-Quasched-Leader": err.leader.url, "Retry-After": "1"}) from None
        if job.spec.team != body.team:  # a client token another team used first
            raise field_error("client_token", "already used by another team's job", status.HTTP_409_CONFLICT)
        return job_out(job, dispatch)

    @app.get(f"{API}/jobs", response_model=list[FrontJobOut], tags=["jobs"])
    def list_jobs(who: Reader, state: JobState | None = None, team: str | None = Query(None, max_length=63),
                  limit: int = Query(100, ge=1, le=1000)) -> list[FrontJobOut]:
        jobs = store.jobs(state, team, limit)
        dispatches = store.dispatches([j.id for j in jobs])
        return [job_out(*found(j.id)) for j in jobs if j.id in dispatches]

    @app.get(f"{API}/jobs/{{job_id}}", response_model=FrontJobOut, tags=["jobs"])
    def get_job(job_id: JobId, who: Reader) -> FrontJobOut:
        return job_out(*found(job_id))

    @app.post(f"{API}/jobs/{{job_id}}/cancel", response_model=FrontJobOut, tags=["jobs"])
    def cancel(job_id: JobId, who: TeamOrAdmin) -> FrontJobOut:
        job, dispatch, _ = found(job_id)
        who.require_team(job.spec.team)
        if job.state not in ENDED:
            try:
                job = front.cancel(job_id)
            except Standby as err:
                raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(err),
                                    headers={"X-Quasched-Leader": err.leader.url, "Retry-After": "1"}) from None
            except Sending as err:
                raise HTTPException(status.HTTP_409_CONFLICT, str(err)) from None
            except MemberError as err:  # a member that cannot be reached: said, the job unchanged
                raise HTTPException(status.HTTP_502_BAD_GATEWAY, str(err)) from None
        return job_out(job, dispatch)

    @app.get(f"{API}/jobs/{{job_id}}/logs", tags=["jobs"], response_class=PlainTextResponse)
    def logs(job_id: JobId, who: Reader, tail: int = Query(200, ge=1, le=100_000)) -> str:
        """The job's output as its member keeps it, its last lines (its team or an admin): read from the member."""
        job, dispatch, _ = found(job_id)
        who.require_reader(job.spec.team)
        member = next((m for m in front.members if m.name == dispatch.member), None)
        if dispatch.remote is None or member is None:
            raise not_found(f"log of job {job_id}: not sent to a member yet")
        try:
            return member.logs(dispatch.remote, tail)
        except MemberError as err:
            raise HTTPException(status.HTTP_502_BAD_GATEWAY, str(err)) from None

    @app.get(f"{API}/members", tags=["federation"])
    def members(who: Reader) -> list[dict[str, Any]]:
        """Each member: zone, PUE, up, the last error, GPUs and GPU milli in use."""
        with front.lock:
            return [{"name": s.member.name, "zone": z.signal.zone, "pue": z.pue, "up": s.up, "error": s.error,
                     "gpus": int(s.cluster.num_gpus.sum()), "gpu_used_milli": float(s.used[0])}
                    for s, z in zip(front.sites, front.zones)]

    @app.get(f"{API}/zones", tags=["federation"])
    def zones(who: Reader, hours: int = Query(24, ge=1, le=72)) -> list[dict[str, Any]]:
        """Each member's zone: intensity x PUE now and the hours after (as the front holds them, hourly from
        ``start``, epoch s), any warning."""
        with front.lock:
            hour = max(front.observed, 0)
            return [{"member": s.member.name, "zone": z.signal.zone, "pue": z.pue, "start": front.epoch + hour * HOUR_S,
                     "now": float(front.view.intensity[c, hour]),
                     "next": front.view.intensity[c, hour:hour + hours].tolist(),
                     "warning": front.warnings.get(z.signal.zone)}
                    for c, (s, z) in enumerate(zip(front.sites, front.zones))]

    @app.get(f"{API}/carbon", tags=["federation"])
    def carbon(who: Reader) -> list[dict[str, Any]]:
        """Per team: jobs ended with a bill, kWh and kg CO2e; ``baseline_kg``, what the same runs would have cost at
        once on the least loaded member when each arrived, and ``saved_kg`` = baseline_kg - kg."""
        teams: dict[str, list[float]] = {}
        jobs = {j.id: j for j in store.jobs(limit=100_000)}
        for d in store.dispatches().values():
            if d.kg is not None and d.job_id in jobs:
                row = teams.setdefault(jobs[d.job_id].spec.team, [0, 0.0, 0.0, 0.0])
                row[0], row[1], row[2] = row[0] + 1, row[1] + (d.kwh or 0.0), row[2] + d.kg
                row[3] += d.kg if d.baseline_kg is None else d.baseline_kg
        return [{"team": t, "jobs": int(n), "kwh": kwh, "kg": kg, "baseline_kg": base, "saved_kg": base - kg}
                for t, (n, kwh, kg, base) in sorted(teams.items())]

    @app.post(f"{API}/tokens", status_code=201, tags=["admin"])
    def create_token(body: TokenCreate, who: Admin) -> dict[str, Any]:
        """A new token (admin): a team token, or an admin token; the secret is shown once."""
        if body.admin == (body.team is not None):
            raise field_error("team", "give a team for a team token, or admin=true without a team")
        try:
            secret = store.add_token(body.name, body.team, body.admin)
        except ValueError as err:
            raise HTTPException(status.HTTP_409_CONFLICT, str(err)) from None
        return {"name": body.name, "team": body.team, "admin": body.admin, "token": secret}

    return app
