"""Routes of what jobs run here: a job's log (whole, its last lines, or followed while it runs) and
each team's usage (jobs, wall time, GPU-hours booked)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, AsyncIterator

from fastapi import FastAPI, Query, Request
from fastapi.responses import PlainTextResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from quasched.service.api.routing import API, JobId, not_found
from quasched.service.executor import joblog
from quasched.service.runtime.auth import Reader
from quasched.service.runtime.schemas import UsageOut
from quasched.service.store.database import TeamUsage

if TYPE_CHECKING:
    from quasched.service.runtime.service import Service

#: most bytes of a log's end read for ``tail``; seconds between reads when following
MAX_LOG_BYTES = 8 << 20
FOLLOW_S = 0.2
CHUNK = 64 << 10


def add_run_routes(app: FastAPI, service: Service) -> None:
    """Register the log and usage routes of ``service`` on ``app``."""
    lock = service.lock

    def log_of(job_id: int, who: Reader) -> Path:
        with lock:
            job = service.store.job(job_id)
        if job is None:
            raise not_found(f"job {job_id}")
        who.require_reader(job.spec.team)
        if service.executor is None or not job.spec.command:
            raise not_found(f"log of job {job_id}: it runs no command on this machine")
        return service.executor.log_path(job_id)

    def finished(job_id: int) -> bool:  # one dict lookup: no lock (it would stall the event loop)
        return job_id not in service.ctl.jobs

    @app.get(f"{API}/jobs/{{job_id}}/logs", tags=["jobs"], response_class=PlainTextResponse,
             responses={404: {"description": "No such job, or it runs no command here."}})
    async def logs(job_id: JobId, who: Reader, request: Request,
                   follow: Annotated[bool, Query(description="Send what the job writes until it ends.")] = False,
                   tail: Annotated[int | None, Query(ge=0, le=1_000_000, description="Only the last lines.")] = None,
                   ) -> StreamingResponse:
        """The job's stdout and stderr (its team or an admin) as kept (its head, a marker where bytes were dropped,
        its tail: :mod:`quasched.service.executor.joblog`): whole, its last lines, or followed while it runs."""
        path = await run_in_threadpool(log_of, job_id, who)
        first, offset = (b"", 0) if tail is None else await run_in_threadpool(joblog.tail, path, MAX_LOG_BYTES, tail)
        stop = None if follow else await run_in_threadpool(joblog.end, path)
        watch = service.broker.subscribe(who.secret, events=False) if follow else None  # ends with the token

        async def body() -> AsyncIterator[bytes]:
            nonlocal offset
            try:
                yield first
                while stop is not None and offset < stop:  # the view as it stands, in chunks
                    chunk, offset = await run_in_threadpool(joblog.read, path, offset, min(CHUNK, stop - offset))
                    if not chunk:
                        return
                    yield chunk
                while watch is not None and not watch.closed and not await request.is_disconnected():
                    done = finished(job_id)  # read after: what was written before it ended is sent
                    chunk, offset = joblog.read(path, offset, CHUNK)
                    if chunk:
                        yield chunk
                    elif done:
                        return
                    else:
                        await asyncio.sleep(FOLLOW_S)
            finally:
                if watch is not None:
                    service.broker.unsubscribe(watch)

        return StreamingResponse(body(), media_type="text/plain; charset=utf-8",
                                 headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})

    @app.get(f"{API}/usage", response_model=list[UsageOut], tags=["jobs"])
    def usage(who: Reader, since: Annotated[float | None, Query(ge=0, le=1e11, description=(
            "Only jobs submitted at or after this time (seconds since the epoch)."))] = None) -> list[UsageOut]:
        """Per team: jobs, running now, wall seconds run and GPU-hours booked (the runs so far, the current
        included)."""
        with lock:
            now = service.clock()
            stored = {u.team: u for u in service.store.usage(since)}
            live = [j for j in service.ctl.jobs.values() if j.state.holds_resources
                    and (since is None or j.submitted_at >= since)]
            teams = sorted(set(stored) | set(service.ctl.quota.queues))
        out = []
        for team in teams:
            mine = [j for j in live if j.spec.team == team]
            row = stored.get(team) or TeamUsage(team, 0, 0.0, 0.0)
            wall = row.wall_s + sum(j.usage(now)[0] - j.wall_s for j in mine)
            gpu = row.gpu_hours + sum(j.usage(now)[1] - j.gpu_hours for j in mine)
            out.append(UsageOut(team=team, jobs=row.jobs, running=len(mine), wall_s=wall, gpu_hours=gpu))
        return out
