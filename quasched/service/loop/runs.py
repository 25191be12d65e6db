"""The runs of commands under the service's loop: time limits, stopping within the grace period
(a cancel, a time limit), and how a process's end or loss ends its job (exit code 0: succeeded;
other: failed with the code and the log's last lines; no exit code after a restart: failed, ``Lost``).

Only jobs with a command placed on :attr:`LoopOptions.local_node` have a process; the executor
(:mod:`quasched.service.executor.commands`) starts and signals it and reports its end here (:class:`Runs`)."""

from __future__ import annotations

from quasched.service.domain import Job, JobState, PendingReason, Reason
from quasched.service.loop.lifecycle import Lifecycle
from quasched.service.loop.state import LoopState
from quasched.service.loop.timers import TimerKind


class Runs:
    """Stopping and ending the jobs of ``state`` that run a command; ``life`` ends and requeues them."""

    def __init__(self, state: LoopState, life: Lifecycle) -> None:
        self.state = state
        self.life = life

    def runs_here(self, job: Job) -> bool:
        """Whether ``job`` runs a process on this machine: it has a command and holds its local node."""
        local = self.state.options.local_node
        return bool(job.spec.command) and local is not None and job.state.holds_resources \
            and any(node == local for node, _ in job.placement)

    def stop(self, job: Job, now: float, code: Reason, message: str) -> None:
        """Give a running job the grace period to stop, then end it as ``code`` says."""
        grace = self.state.options.grace_s
        job.state, job.preempt_at = JobState.STOPPING, now + grace
        job.reason = PendingReason(code, message)
        self.state.timers.arm(job.preempt_at, job.id, TimerKind.STOP)
        self.state.changes.emit(now, "stopping", job, reason=code.value, grace_s=grace)

    def stopped(self, job: Job, t: float) -> None:
        """Timer STOP: a stopping job's grace period is over; it ends as its stop says."""
        if job.state == JobState.STOPPING and job.preempt_at == t:
            self.life.end_stopping(job, t)

    def over_limit(self, job: Job, t: float) -> None:
        """Timer LIMIT: a running job reached its time limit; its process is stopped, else it fails now."""
        if job.state == JobState.RUNNING and job.started_at is not None \
                and job.spec.time_limit_s is not None and job.started_at + job.spec.time_limit_s == t:
            message = f"stopped: it exceeded its time limit of {job.spec.time_limit_s:g} s"
            if self.runs_here(job):
                self.stop(job, t, Reason.TIME_LIMIT, message)
            else:
                self.life.end(job.id, t, JobState.FAILED, PendingReason(Reason.TIME_LIMIT, message))

    def exited(self, job_id: int, now: float, exit_code: int, log_tail: str = "",
               ran: tuple[float, float] | None = None, oom: bool = False) -> Job | None:
        """The job's process ended with ``exit_code``: succeeded (0) or failed (``OutOfMemory`` when ``oom``: the
        kernel killed a process of its cgroup); a stopping job ends as its stop says, a preempting one is
        requeued at once. ``ran``: the run's own start and end (the wrapper's clock), its usage and end time.
        None if the job no longer holds resources."""
        job = self.state.jobs.get(job_id)
        if job is None or not job.state.holds_resources:
            return None
        job.exit_code = exit_code
        if ran is not None:
            job.started_at, now = ran[0], min(now, max(ran))
        if job.state == JobState.STOPPING:
            return self.life.end_stopping(job, now)
        if job.state == JobState.PREEMPTING:
            self.life.requeue(job, now, "preempted", exit_code=exit_code)
            return job
        if exit_code == 0:
            return self.life.end(job_id, now, JobState.SUCCEEDED)
        if oom:
            return self.life.end(job_id, now, JobState.FAILED, PendingReason(
                Reason.OUT_OF_MEMORY, f"the command ran out of memory: the kernel killed it past its memory request "
                f"of {job.spec.memory_mib} MiB", {"exit_code": exit_code, "memory_mib": job.spec.memory_mib,
                                                  "log_tail": log_tail}))
        how = f"killed by signal {-exit_code}" if exit_code < 0 else f"exited with code {exit_code}"
        return self.life.end(job_id, now, JobState.FAILED, PendingReason(
            Reason.EXIT_CODE, f"the command {how}", {"exit_code": exit_code, "log_tail": log_tail}))

    def lost(self, job_id: int, now: float, why: str) -> Job | None:
        """The job's process ended while nobody watched and left no exit code: failed, ``Lost``."""
        job = self.state.jobs.get(job_id)
        if job is None or not job.state.holds_resources:
            return None
        return self.life.end(job_id, now, JobState.FAILED, PendingReason(Reason.LOST, why))
