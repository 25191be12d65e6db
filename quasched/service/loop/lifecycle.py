"""How a job leaves or re-enters the service's loop: it ends (its resources freed, its usage booked), a
stopping one ends as its stop says, it is requeued (preempted, evicted), and a running job's timers are
armed (completion by duration, time limit, grace-period end)."""

from __future__ import annotations

from typing import Any

from quasched.service.domain import MAX_GANG, Job, JobState, PendingReason, Reason
from quasched.service.loop.room import RoomMaker
from quasched.service.loop.state import LoopState, carried
from quasched.service.loop.timers import TimerKind

#: how a stopping job ends, by its reason (a failed one keeps the reason)
STOP_OUTCOME = {Reason.CANCELLING: JobState.CANCELLED, Reason.TIME_LIMIT: JobState.FAILED}


class Lifecycle:
    """Ending, requeueing and arming the jobs of ``state``; ``room`` learns which job ran, ended or freed room."""

    def __init__(self, state: LoopState, room: RoomMaker) -> None:
        self.state = state
        self.room = room

    def end(self, job_id: int, now: float, state: JobState, reason: PendingReason | None = None) -> Job:
        """End job ``job_id`` as ``state`` (with ``reason``); its resources are freed."""
        job = self.state.job(job_id)
        if job.state.finished:
            raise ValueError(f"job {job_id} already {job.state}")
        if job.state.holds_resources:
            self.release(job, now)
        job.state, job.finished_at, job.reason = state, now, reason
        self.state.position.pop(job_id, None)
        self.room.done(job_id)
        self.state.changes.emit(now, state.value, job)
        self.state.dirty = True
        return job

    def end_stopping(self, job: Job, now: float) -> Job:
        """End a stopping job as its reason says (cancelled, or failed past its time limit)."""
        state = STOP_OUTCOME[job.reason.code] if job.reason is not None else JobState.CANCELLED
        return self.end(job.id, now, state, job.reason if state == JobState.FAILED else None)

    def release(self, job: Job, now: float) -> None:
        """Free the job's pods and book the run's usage."""
        job.wall_s, job.gpu_hours = job.usage(now)
        self.room.released(job.id)
        c, quota = self.state.cluster, self.state.quota
        for k in range(job.spec.pods):
            placement = c.remove(job.id * MAX_GANG + k)
            quota.charge(job.spec.team, str(c.models[c.model_id[placement.node]]), -job.spec.gpu_request)
        job.placement = []

    def requeue(self, job: Job, now: float, kind: str, **data: Any) -> None:
        """Put a running job back in the queue (event ``kind``); a stopping one ends instead."""
        if job.state == JobState.STOPPING:  # cancelled or past its limit: it ends rather than runs again
            self.end_stopping(job, now)
            return
        self.release(job, now)
        job.state, job.started_at, job.preempt_at = JobState.PENDING, None, None
        job.restarts += 1
        job.reason = carried(job.reason, PendingReason(Reason.QUEUED, f"requeued ({kind})"))
        self.state.fresh.add(job.id)
        self.state.changes.emit(now, kind, job, **data)
        self.state.dirty = True

    def arm(self, job: Job) -> None:
        """The timers of a job entering the loop running: grace-period end, completion by duration, time limit."""
        timers = self.state.timers
        if job.state in (JobState.PREEMPTING, JobState.STOPPING) and job.preempt_at is not None:
            kind = TimerKind.PREEMPT if job.state == JobState.PREEMPTING else TimerKind.STOP
            timers.arm(job.preempt_at, job.id, kind)
        for seconds, kind in ((job.spec.duration_s, TimerKind.FINISH), (job.spec.time_limit_s, TimerKind.LIMIT)):
            if seconds is not None and job.started_at is not None:
                timers.arm(job.started_at + seconds, job.id, kind)

    def finished_by_duration(self, job: Job, t: float) -> None:
        """Timer FINISH: the job ran its ``duration_s`` (if it still runs that run) and succeeds."""
        if job.state.holds_resources and job.started_at is not None and job.spec.duration_s is not None \
                and job.started_at + job.spec.duration_s == t:
            self.end(job.id, t, JobState.SUCCEEDED)

    def grace_over(self, job: Job, t: float) -> None:
        """Timer PREEMPT: a preempting job's grace period is over; it is requeued."""
        if job.state == JobState.PREEMPTING and job.preempt_at == t:
            self.requeue(job, t, "preempted")
