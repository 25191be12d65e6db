"""The room-maker of the service's loop (:class:`RoomMaker`, docstring of :mod:`.controller` for the cycle):
it owns the nominations (a job that preempted, what it awaits and its victims), the claims (victims
promised to a preempting job) and the window of recent migrations.

Preemption (``preemption=True``)
    A job blocked by capacity may stop running jobs: of lower priority, or —
    when the job is within its queue's nominal quota — jobs of queues in its
    cohort that borrow. Victim order: borrowing queues first (the one
    borrowing most first), then lowest
    priority, then the largest (fewest victims free the room), then the most
    recently started (least work lost); per node the set is minimised by
    reprieve, as kube-scheduler does, and the node needing the fewest
    victims wins. Victims get ``grace_s`` seconds
    (state ``preempting``) and are then requeued with their original order.
    A blocked job that the victims already stopping leave room for (after
    the jobs that chose them take theirs) waits for them: no new victims.

Defragmentation (``defrag_per_hour = K > 0``)
    When a multi-GPU job is pending as ``Fragmented``, up to K running jobs
    per hour may be migrated off one node (each re-placed by the policy on
    another node) so the waiting job fits; a trial that does not free enough
    is rolled back exactly. Every migration is an event.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from quasched.model.workload import Pod
from quasched.service.domain import Job, JobState, PendingReason, Reason
from quasched.service.loop.state import LoopState, utc
from quasched.service.loop.timers import TimerKind
from quasched.service.rules.defrag import try_moves
from quasched.service.rules.preemption import cheapest_node, reclaims, room_after, victim_order

HOUR = 3600.0


class RoomMaker:
    """Preemption and job swapping on ``state`` (module docstring)."""

    def __init__(self, state: LoopState) -> None:
        self.state = state
        self._claimed: set[int] = set()  # victims already promised to a preempting job
        #: job that preempted -> (queue, milli-GPU it awaits, its victims)
        self._nominated: dict[int, tuple[str, int, tuple[int, ...]]] = {}
        self._migrations: deque[float] = deque()

    def victims_of(self, job_id: int) -> tuple[int, ...] | None:
        """The victims job ``job_id`` preempted and awaits (None: it is not nominated)."""
        entry = self._nominated.get(job_id)
        return None if entry is None else entry[2]

    def nominated_first(self, order: list[Job]) -> list[Job]:
        """``order`` with the jobs that preempted first: the room their victims leave is theirs."""
        if not self._nominated:
            return order
        return [j for j in order if j.id in self._nominated] + [j for j in order if j.id not in self._nominated]

    def released(self, job_id: int) -> None:
        """Job ``job_id`` freed its resources: it is no victim any more."""
        self._claimed.discard(job_id)

    def done(self, job_id: int) -> None:
        """Job ``job_id`` runs or ended: it awaits no victims."""
        self._nominated.pop(job_id, None)

    def preempt(self, blocked: list[Job], now: float) -> None:
        """Choose victims for blocked one-pod jobs, in order; a job whose kind found none stops its kind's search."""
        st, hopeless = self.state, set[tuple]()
        lowest = min((v.priority for v in st.jobs.values() if v.state in (JobState.RUNNING, JobState.PREEMPTING)),
                     default=None)  # only rises as victims are claimed
        for job in blocked:
            if job.state != JobState.PENDING or job.spec.pods != 1 or self.awaiting_victims(job):
                continue
            pod = st.pod(job.spec, job.id, 0, st.admissible(job))
            kind = (pod.fit_key, job.spec.team, job.priority)
            if kind not in hopeless and not self.preempt_for(job, pod, now, lowest):
                hopeless.add(kind)

    def awaiting_victims(self, job: Job) -> bool:
        """Whether ``job`` preempted and some of its victims still hold their resources."""
        jobs, victims = self.state.jobs, self.victims_of(job.id)
        return victims is not None and any(v in jobs and jobs[v].state.holds_resources for v in victims)

    def preempt_for(self, job: Job, pod: Pod, now: float, lowest: int | None = None) -> bool:
        """Start preempting the cheapest victim set that makes room for ``job``; False if there is none.
        A job that the evictions already under way make room for waits for them instead. ``lowest``: no running
        job has a lower priority."""
        st, grace = self.state, self.state.options.grace_s
        self._nominated.pop(job.id, None)  # its earlier victims left and it still did not fit: choose again
        stopping = self._room_in_flight(pod)
        if stopping:
            self._nominated[job.id] = (job.spec.team, job.gpu_total, stopping)
            st.set_reason(job, PendingReason(
                Reason.PREEMPTION_PENDING, f"evictions under way (jobs {', '.join(map(str, stopping))}) free "
                "enough room for it too", {"victims": list(stopping)}))
            return True
        promised = sum(milli for team, milli, _ in self._nominated.values() if team == job.spec.team)
        reclaim = job.gpu_total > 0 and reclaims(st.quota, st.cluster.models, job.spec.team, job.gpu_total + promised,
                                                 pod.gpu_model)
        running = (v for v in st.jobs.values() if v.state in (JobState.RUNNING, JobState.PREEMPTING)
                   and v.id not in self._claimed)
        victims = victim_order(st.quota, running, job.spec.team, job.priority, reclaim, lowest)
        best = cheapest_node(st.cluster, pod, victims) if victims else None
        if best is None:
            return False
        node, chosen = best
        self._nominated[job.id] = (job.spec.team, job.gpu_total, tuple(v.id for v in chosen))
        for victim in chosen:
            self._claimed.add(victim.id)
            if victim.state == JobState.RUNNING:
                self.stopping(victim, now, f"job {job.id} ({job.spec.team}, {job.spec.priority_class})", job.id, grace)
        st.set_reason(job, PendingReason(
            Reason.PREEMPTION_PENDING, f"{len(chosen)} job(s) on {st.cluster.names[node]} stop within "
            f"{grace:g} s to make room", {"node": str(st.cluster.names[node]), "victims": [v.id for v in chosen]}))
        return True

    def stopping(self, victim: Job, now: float, by: str, by_id: int | str, grace: float, timer: bool = True) -> None:
        """Running ``victim`` is preempted by ``by`` (``by_id``: its job id or pod) and stops within ``grace`` s:
        the loop requeues it then (``timer``), or its runtime stops it (an extension's: Kubernetes evicts it)."""
        st = self.state
        victim.state, victim.preempt_at = JobState.PREEMPTING, now + grace if timer else None
        if victim.preempt_at is not None:
            st.timers.arm(victim.preempt_at, victim.id, TimerKind.PREEMPT)
        victim.reason = PendingReason(Reason.PREEMPTED, f"preempted by {by} at {utc(now)}; stops within {grace:g} s",
                                      {"preempted_by": by_id, "preempted_at": now})
        st.changes.emit(now, "preempting", victim, by=by_id, grace_s=grace)

    def _room_in_flight(self, pod: Pod) -> tuple[int, ...]:
        """The jobs stopping for earlier preemptions, if ``pod`` fits once they are gone and the jobs waiting for
        them took their room (in nomination order); else ()."""
        if not self._claimed:
            return ()
        st = self.state
        stopping = [v for v in st.jobs.values() if v.id in self._claimed and v.state.holds_resources]
        waiting = [st.pod(w.spec, w.id, 0, st.admissible(w)) for w in (st.jobs[i] for i in self._nominated if i in st.jobs)
                   if w.state == JobState.PENDING]
        return tuple(sorted(v.id for v in stopping)) if stopping and room_after(st.cluster, stopping, waiting, pod) else ()

    # ------------------------------------------------------------ defragmentation
    def defragment_for(self, job: Job, now: float) -> None:
        """Migrate running jobs off one node so the fragmented ``job`` fits, within the hourly budget."""
        st, window = self.state, self._migrations
        while window and window[0] <= now - HOUR:
            window.popleft()
        budget = st.options.defrag_per_hour - len(window)
        if budget <= 0 or job.spec.pods != 1:
            return
        c = st.cluster
        pod = st.pod(job.spec, job.id, 0, st.admissible(job))
        room = c.schedulable & c.spec_mask(pod.gpu_model) & (c.gpu_healthy.sum(axis=1) >= pod.num_gpu)
        candidates = sorted(np.flatnonzero(room).tolist(), key=lambda n: (int(c.gpu_alloc[n].sum()), n))[:32]
        for node in candidates:
            movable = [j for j in st.jobs_on(node) if j.state == JobState.RUNNING and j.spec.pods == 1]
            moves = try_moves(c, st.scheduler, pod, node, sorted(movable, key=lambda j: (j.gpu_total, j.id))[:budget])
            if moves is not None:
                for moved_id, (src, dst) in moves.items():
                    moved = st.jobs[moved_id]
                    window.append(now)
                    st.changes.emit(now, "migrated", moved, node=dst[0], source=src[0], devices=list(dst[1]))
                    moved.placement = [dst]
                    moved.restarts += 1
                    st.changes.touch(moved)
                st.dirty = True
                return
