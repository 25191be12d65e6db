"""The cluster's read-only views (``/snapshot``, ``/timeseries``, ``/events``) and the live stream ``/stream``:
Server-Sent Events from the :class:`~quasched.service.broker.Broker`, with a replay of what a reconnecting client
missed."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Annotated, AsyncIterator

from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from quasched.service.auth import Reader, StreamReader
from quasched.service.broker import STREAM_BACKLOG
from quasched.service.domain import Event
from quasched.service.routing import API
from quasched.service.schemas import MAX_ID, EventOut, SampleOut, SnapshotOut

if TYPE_CHECKING:
    from quasched.service.runtime import Service

#: seconds between keep-alive comments on an idle live stream
HEARTBEAT_S = 15.0


def sse(ev: Event) -> str:
    """One event as a server-sent-events frame (``id``, ``event``, ``data``)."""
    data = json.dumps(EventOut.of(ev).model_dump(mode="json"), separators=(",", ":"))
    head = f"id: {ev.id}\n" if ev.id is not None else ""
    return f"{head}event: {ev.kind}\ndata: {data}\n\n"


def add_cluster_routes(app: FastAPI, service: Service) -> None:
    """Register the cluster views and the live stream of ``service`` on ``app``."""
    lock = service.lock

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
        """Live events (SSE). A reconnecting client (`Last-Event-ID`) first gets what it missed. On a standby the
        first event is `role` (`{"role": "standby", "leader": {holder, url, epoch, since} | null}`); a server
        sends `role` whenever it takes over or steps down."""
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
                if not service.leading:  # a standby's stream is quiet until it takes over: say so, and who leads
                    yield sse(service.role_event(await run_in_threadpool(service.store.leader)))
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
