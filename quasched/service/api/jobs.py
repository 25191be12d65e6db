"""Routes of jobs and queues: submit (idempotent by ``client_token``), list, get, cancel,
complete; list queues, create or change a team's queue."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Callable

from fastapi import Body, FastAPI, HTTPException, Path as PathParam, Query, Response, status

from quasched.service.api.routing import API, JobId, field_error, not_found
from quasched.service.domain import Job, JobState
from quasched.service.loop.controller import Controller
from quasched.service.loop.state import MAX_UNFINISHED_PER_TEAM, SpecError
from quasched.service.runtime.auth import Admin, Reader, TeamOrAdmin
from quasched.service.runtime.schemas import (MAX_ID, TEAM_PATTERN, EventOut, JobComplete, JobDetail, JobOut, JobSubmit,
                                              QueueOut, QueuePut)

if TYPE_CHECKING:
    from quasched.service.runtime.service import Service

def add_job_routes(app: FastAPI, service: Service) -> None:
    """Register the job and queue routes of ``service`` on ``app``."""
    lock = service.lock

    # ------------------------------------------------------------ jobs
    @app.post(f"{API}/jobs", status_code=201, response_model=JobOut, tags=["jobs"],
              responses={200: {"model": JobOut, "description": "An earlier job with the same client_token."},
                         409: {"description": "The client_token names an earlier, different job."},
                         429: {"description": f"The team has {MAX_UNFINISHED_PER_TEAM:,} unfinished jobs already."},
                         422: {"description": "Bad field, unknown team or GPU model, or a job no node can host."}})
    async def submit(body: JobSubmit, who: TeamOrAdmin, response: Response) -> JobOut:
        """Submit a job to its team's queue; it is scheduled at once if it fits."""
        who.require_team(body.team)
        try:
            view, new = await service.submit.submit(body.to_spec())  # grouped with concurrent submissions
        except SpecError as err:
            raise field_error(err.field, err.message, code=err.status) from None
        if not new:  # an earlier job with this client_token
            response.status_code = status.HTTP_200_OK
        return view

    @app.get(f"{API}/jobs", response_model=list[JobOut], tags=["jobs"])
    def list_jobs(who: Reader, state: JobState | None = None,
                  team: Annotated[str | None, Query(max_length=63)] = None,
                  limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                  offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0) -> list[JobOut]:
        """Jobs, newest first (another team's without their private fields)."""
        with lock:
            return [service.job_out(j, who.may_read(j.spec.team))
                    for j in service.store.jobs(state=state, team=team, limit=limit, offset=offset)]

    @app.get(f"{API}/jobs/{{job_id}}", response_model=JobDetail, tags=["jobs"])
    def get_job(job_id: JobId, who: Reader) -> JobDetail:
        """A job and its events (another team's without their private fields)."""
        with lock:
            job = service.store.job(job_id)
            if job is None:
                raise not_found(f"job {job_id}")
            events = service.store.events(job_id=job_id, limit=1000)
            private = who.may_read(job.spec.team)
            return JobDetail(**service.job_out(job, private).model_dump(),
                             events=[EventOut.of(e, private=private) for e in events])

    def end_job(job_id: int, who: Any, end: Callable[[Controller, Job, float], Any]) -> JobOut:
        with lock:
            job = service.store.job(job_id)
            if job is None:
                raise not_found(f"job {job_id}")
            who.require_team(job.spec.team)
            if job.state.finished or job.id not in service.ctl.jobs:
                raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id} already {job.state.value}")
            service.mutate(lambda ctl, now: end(ctl, ctl.job(job_id), now))
            return service.job_out(service.store.job(job_id) or job, who.may_read(job.spec.team))

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
        """Create or change a team's queue (admin); a quota names GPU models of the cluster (or '*')."""
        spec = body.to_spec(name)
        with lock:
            try:
                service.ctl.validate_queue(spec)
            except SpecError as err:
                raise field_error(err.field, err.message) from None

            def change(ctl: Controller, now: float) -> None:
                ctl.put_queue(spec)
                service.keep_queue(spec)

            service.mutate(change)
            return next(QueueOut(**q) for q in service.ctl.queue_status() if q["name"] == name)
