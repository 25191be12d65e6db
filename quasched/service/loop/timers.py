"""The timers of the service's loop: when a job's completion by duration, time limit, or grace period
(preempting, stopping) falls due. One heap, earliest first; at one time, by job id then kind."""

from __future__ import annotations

import heapq
from enum import IntEnum
from typing import Iterator, NamedTuple


class TimerKind(IntEnum):
    """What falls due (the order at equal time and job: completion, limit, preemption, stop)."""

    FINISH = 0  # the job's ``duration_s`` since it started: it succeeds
    LIMIT = 1  # its ``time_limit_s`` since it started: it is stopped or fails
    PREEMPT = 2  # a preempting job's grace period is over: it is requeued
    STOP = 3  # a stopping job's grace period is over: it ends as its stop says


class Timer(NamedTuple):
    """Timer ``kind`` of job ``job_id`` at ``at``."""

    at: float
    job_id: int
    kind: TimerKind


class Timers:
    """Timers, earliest first; a timer that no longer applies is the handler's to skip (the heap never
    removes one early)."""

    def __init__(self) -> None:
        self._heap: list[Timer] = []

    def __len__(self) -> int:
        return len(self._heap)

    def arm(self, at: float, job_id: int, kind: TimerKind) -> None:
        """Let timer ``kind`` of ``job_id`` fall due at ``at``."""
        heapq.heappush(self._heap, Timer(at, job_id, kind))

    @property
    def next_at(self) -> float | None:
        """Time of the earliest timer (None: there is none)."""
        return self._heap[0].at if self._heap else None

    def due(self, now: float) -> Iterator[Timer]:
        """Take the timers due at or before ``now``, earliest first, including those armed while iterating."""
        while self._heap and self._heap[0].at <= now:
            yield heapq.heappop(self._heap)
