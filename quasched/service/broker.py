"""The :class:`Broker`: fans persisted events out to live-stream subscribers, from any thread."""

from __future__ import annotations

import asyncio
import threading

from quasched.service.domain import Event

#: events a slow live-stream subscriber may lag behind before it is disconnected (it reconnects and replays)
STREAM_BACKLOG = 1000


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
