"""The :class:`Broker`: fans persisted events out to live-stream subscribers, from any thread, and ends the
streams (the live stream, a followed log) whose token stopped working."""

from __future__ import annotations

import asyncio
import threading
from typing import Callable

from fastapi import HTTPException, status

from quasched.service.domain import Event

#: events a slow live-stream subscriber may lag behind before it is disconnected (it reconnects and replays)
STREAM_BACKLOG = 1000
#: most streams (live events and followed logs) one token may hold open at once; one more is 429
MAX_STREAMS_PER_TOKEN = 32


class _Subscriber:
    def __init__(self, loop: asyncio.AbstractEventLoop, maxsize: int, token: str, events: bool) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize)
        self.closed = False
        #: the token of the stream (it ends once the token stops working); whether it gets the events
        self.token, self.events = token, events

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

    def subscribe(self, token: str = "", events: bool = True) -> _Subscriber:
        """A new subscriber on the running event loop, for a stream opened with ``token``; without ``events`` it
        is only told the end (``closed``: the server stops or the token stopped working), e.g. a followed log. 429
        when ``token`` holds :data:`MAX_STREAMS_PER_TOKEN` streams already."""
        sub = _Subscriber(asyncio.get_running_loop(), self.maxsize, token, events)
        with self._lock:
            held = sum(1 for other in self._subscribers if other.token == token) if token else 0
            if held >= MAX_STREAMS_PER_TOKEN:
                raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, (
                    f"this token holds {held} open streams (live events and followed logs), the most one may "
                    f"({MAX_STREAMS_PER_TOKEN}): close one first"))
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
        if events:
            self._offer(lambda sub: sub.events, list(events))
            if None in events:
                self._offer(lambda sub: not sub.events, [None])

    def end_unless(self, works: Callable[[str], bool]) -> None:
        """End the streams whose token no longer ``works`` (revoked or expired); one check per token."""
        with self._lock:
            tokens = {sub.token for sub in self._subscribers if sub.token}
        stopped = {token for token in tokens if not works(token)}
        if stopped:
            self._offer(lambda sub: sub.token in stopped, [None])

    def _offer(self, to: Callable[[_Subscriber], bool], events: list[Event | None]) -> None:
        with self._lock:
            subscribers = [sub for sub in self._subscribers if to(sub)]
        for sub in subscribers:
            try:
                sub.loop.call_soon_threadsafe(sub.offer, list(events))
            except RuntimeError:  # its event loop is closed
                self.unsubscribe(sub)

    def close(self) -> None:
        """End every stream."""
        self.publish([None])
