"""What the service's loop changed since it was last asked: the jobs changed (each once, last state)
and the events, in order, that the caller persists (:meth:`Changes.drain`)."""

from __future__ import annotations

from typing import Any

from quasched.service.domain import Event, Job


class Changes:
    """The change log of one loop: jobs changed and events since the last :meth:`drain`."""

    def __init__(self) -> None:
        self._jobs: dict[int, Job] = {}
        self._events: list[Event] = []

    def touch(self, job: Job) -> None:
        """``job`` changed (no event says how: a pending reason, a placement moved)."""
        self._jobs[job.id] = job

    def emit(self, now: float, kind: str, job: Job, node: str = "", **data: Any) -> None:
        """``job`` changed: event ``kind`` at ``now`` (on ``node``, with ``data``)."""
        self._jobs[job.id] = job
        self._events.append(Event(now, kind, job.id, node, data))

    def note(self, event: Event) -> None:
        """An event of no job (a node's)."""
        self._events.append(event)

    def drain(self) -> tuple[list[Job], list[Event]]:
        """The jobs changed and the events since the last drain; the log is empty after."""
        jobs, events = list(self._jobs.values()), self._events
        self._jobs, self._events = {}, []
        return jobs, events
