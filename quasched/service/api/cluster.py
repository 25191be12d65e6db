"""The cluster's read-only views (``/snapshot``, ``/timeseries``, ``/events``) and the live stream ``/stream``:
Server-Sent Events from the :class:`~quasched.service.runtime.broker.Broker`, with a replay of what a reconnecting client
missed. A job's run details in an event (its exit) are shown to its readers only (:mod:`quasched.service.rules.reasons`)."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Annotated, AsyncIterator

from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from quasched.service.api.routing import API
from quasched.service.domain import Event
from quasched.service.rules.reasons import RUN_DETAILS
from quasched.service.runtime.auth import Principal, Reader, StreamReader
from quasched.service.runtime.broker import STREAM_BACKLOG
from quasched.service.runtime.schemas import MAX_ID, EventOut, SampleOut, SnapshotOut

if TYPE_CHECKING:
    from quasched.service.runtime.service import Service

#: seconds between keep-alive comments on an idle live stream
HEARTBEAT_S = 15.0


def sse(ev: EventOut) -> str:
    """One event as a server-sent-events frame (``id``, ``event``, ``data``)."""
    data = json.dumps(ev.model_dump(mode="json"), separators=(",", ":"))
    head = f"id: {ev.id}\n" if ev.id is not None else ""
    return f"{head}event: {ev.kind}\ndata: {data}\n\n"


def has_run_details(ev: Event) -> bool:
    """Whether ``ev`` tells what its job's run left (shown to the job's readers only)."""
    return ev.job_id is not None and not RUN_DETAILS.isdisjoint(ev.data)


def add_cluster_routes(app: FastAPI, service: Service) -> None:
    """Register the cluster views and the live stream of ``service`` on ``app``."""
    lock = service.lock

    def event_out(ev: Event, who: Principal) -> EventOut:
        """``ev`` as ``who`` sees it (reads the store for an event with run details: not on the event loop)."""
        if not has_run_details(ev):
            return EventOut.of(ev, private=True)
        assert ev.job_id is not None
        with lock:
            job = service.ctl.jobs.get(ev.job_id) or service.store.job(ev.job_id)
        return EventOut.of(ev, private=job is not None and who.may_read(job.spec.team))

    async def frame(ev: Event, who: Principal) -> str:
        """``ev`` as ``who`` sees it, as a stream frame."""
        return sse(await run_in_threadpool(event_out, ev, who) if has_run_details(ev) else event_out(ev, who))

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
        """The audit log, oldest first; page on with `after` = the last id (another team's jobs without their run
        details)."""
        with lock:
            return [event_out(e, who) for e in service.store.events(job_id=job_id, after=after, limit=limit)]

    @app.get(f"{API}/stream", tags=["cluster"], response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}},
                              "description": "Server-Sent Events: `event: <kind>`, `data: <Event JSON>`."}})
    async def stream(request: Request, who: StreamReader,
                     after: Annotated[int | None, Query(ge=0, le=MAX_ID, description=(
                         "Replay stored events with a larger id first."))] = None,
                     last_event_id: Annotated[str | None, Header(max_length=32)] = None) -> StreamingResponse:
        """Live events (SSE). A reconnecting client (`Last-Event-ID`) first gets what it missed. On a standby the
        first event is `role` (`{"role": "standby", "leader": {holder, url, epoch, since} | null}`); a server
        sends `role` whenever it takes over or steps down."""
        start = after
        if start is None and last_event_id and last_event_id.isdigit():
            start = min(int(last_event_id), MAX_ID)
        sub = service.broker.subscribe(who.secret)

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
                        yield await frame(ev, who)
                if not service.leading:  # a standby's stream is quiet until it takes over: say so, and who leads
                    yield await frame(service.role_event(await run_in_threadpool(service.store.leader)), who)
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
                    yield await frame(item, who)
            finally:
                service.broker.unsubscribe(sub)

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
