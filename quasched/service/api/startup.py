"""A server that answers while it starts: ``quasched serve`` listens first, then builds the app (opens and migrates
the database, rebuilds the loop) and runs its lifespan (the service's threads, the kube sync's first list).
:class:`Starting` is the ASGI app the server runs meanwhile: every request is answered at once, 503 with
``Retry-After`` and ``{"detail", "reason": "starting"}`` (``/healthz``, liveness: 200 ``{"status": "starting"}``),
until the built app has started; from then on it is that app."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: seconds a client is told to wait before it retries a server still starting
RETRY_S = 1
#: the liveness probe's path: 200 ``{"status": "starting"}`` while starting (a probe must not kill a server that is
#: merely starting; readiness, ``/readyz``, is 503 until it serves)
LIVENESS = "/healthz"


class Starting:
    """The ASGI app of a server whose app ``build()`` makes (in a worker thread, once the server has started);
    ``failure`` says why the build or the app's start-up failed, after which ``on_failure()`` is called (e.g. to
    stop the server) and requests are answered 503 ``"reason": "failed"``."""

    def __init__(self, build: Callable[[], ASGIApp], on_failure: Callable[[], None] = lambda: None) -> None:
        self.build, self.on_failure = build, on_failure
        self.app: ASGIApp | None = None
        self.failure: str | None = None
        self._start: asyncio.Task[None] | None = None
        self._lifespan: Lifespan | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(scope, receive, send)
        elif self.app is not None:
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            await self._answer(scope["path"])(scope, receive, send)

    def _answer(self, path: str) -> JSONResponse:
        """The answer to a request for ``path`` before the app has started: alive on :data:`LIVENESS`, else 503."""
        if self.failure is not None:
            body = {"detail": f"this server failed to start: {self.failure}", "reason": "failed"}
        elif path == LIVENESS:
            return JSONResponse({"status": "starting"})
        else:
            body = {"detail": "this server is starting; retry shortly", "reason": "starting"}
        return JSONResponse(body, status_code=503, headers={"Retry-After": str(RETRY_S)})

    async def _serve_lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The server's lifespan: started at once (the build runs in the background), stopped after the app."""
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._start = asyncio.create_task(self._build_and_start(scope))
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._start is not None:
                    await self._start
                if self._lifespan is not None and self.app is not None:
                    await self._lifespan.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _build_and_start(self, scope: Scope) -> None:
        try:
            app = await run_in_threadpool(self.build)
            self._lifespan = Lifespan(app, scope)
            await self._lifespan.start()
        except Exception as err:  # the caller stops the server and reports it
            self.failure = str(err) or type(err).__name__
            self.on_failure()
            return
        self.app = app


class Lifespan:
    """An ASGI app's lifespan (``scope``: the server's), driven as a server drives it: :meth:`start`, then
    :meth:`stop`."""

    def __init__(self, app: ASGIApp, scope: Scope) -> None:
        self.app, self.scope = app, {**scope, "state": {}}
        self._inbox: asyncio.Queue[Message] = asyncio.Queue()
        self._replies: asyncio.Queue[Message] = asyncio.Queue()
        self._task: asyncio.Task[Any] | None = None

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self.app(self.scope, self._inbox.get, self._replies.put))
        await self._exchange("lifespan.startup")

    async def stop(self) -> None:
        await self._exchange("lifespan.shutdown")

    async def _exchange(self, kind: str) -> None:
        """Send ``kind`` and wait for its answer; raise if it failed or the app's lifespan ended with an error."""
        assert self._task is not None
        await self._inbox.put({"type": kind})
        reply = asyncio.ensure_future(self._replies.get())
        await asyncio.wait([reply, self._task], return_when=asyncio.FIRST_COMPLETED)
        if not reply.done():
            reply.cancel()
            self._task.result()  # the lifespan's exception
            raise RuntimeError(f"the app's lifespan ended without answering {kind}")
        if reply.result()["type"].endswith(".failed"):
            await asyncio.wait([self._task])
            self._task.result()  # the exception (Starlette raises it once it has answered)
            raise RuntimeError(f"{kind} failed")
