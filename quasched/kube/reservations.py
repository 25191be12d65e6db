"""The jobs that stand for Kubernetes pods: found by the pod's uid (in the job's client token),
reserved durably as running jobs on a node (the policy's Reserve picks the devices unless given),
*held* on quasched's pick from filter until bind confirms it (kube-scheduler's assumed pod, at most
:data:`ASSUME_TTL_S`; in memory only), and released when a pod succeeds, fails or goes away."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping

from quasched.model.cluster import PlacementError
from quasched.model.workload import Pod
from quasched.policies.base import CycleState
from quasched.service.controller import Controller
from quasched.service.domain import Event, Job, JobState
from quasched.kube.convention import PodError, job_spec, pod_key, pod_token, token_uid
from quasched.kube.verdicts import UNKNOWN_NODE, pod_of, verdicts

if TYPE_CHECKING:
    from quasched.service.runtime import Service

#: longest hold of an assumed pod (filter → bind), s; kube-scheduler binds within milliseconds
ASSUME_TTL_S = 30.0


@dataclass
class Hold:
    """A pod assumed on quasched's pick: its devices taken in the controller by an in-memory job (negative id,
    never stored) until bind confirms it. ``binding``: a bind of it is in flight."""

    pod: Mapping[str, Any]
    node: str
    devices: tuple[int, ...]
    job: Job
    at: float
    binding: bool = False


class PodJobs:
    """The jobs standing for pods, and the pods held but not bound yet (the base of :class:`~.extender.Bridge`)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        #: pod uid → its hold (filter's pick, not bound yet; under the lock)
        self.holds: dict[str, Hold] = {}
        self._hold_ids = 0
        #: pod uid → its jobs in the controller ``_indexed``, in the order they entered it (:meth:`job_of`)
        self._by_uid: dict[str, list[Job]] = {}
        self._indexed: Any = None

    # ------------------------------------------------------------ jobs of pods
    def job_of(self, uid: str) -> Job | None:
        """The unfinished stored job standing for pod ``uid`` (call under the service lock; holds are not jobs).

        Indexed by uid: a pod's job enters the controller here (:meth:`_index`; binds store them concurrently,
        so not in id order), and a controller is read in full only when it is new (rebuilt from the store)
        or once the index holds many more pods than it has jobs (the rest finished)."""
        ctl = self.service.ctl
        if ctl is not self._indexed or len(self._by_uid) > 2 * len(ctl.jobs) + 1024:
            self._by_uid, self._indexed = {}, ctl
            for job in ctl.jobs.values():
                self._index(job)
        jobs = [j for j in self._by_uid.get(uid, ()) if not j.state.finished and ctl.jobs.get(j.id) is j]
        if jobs:
            self._by_uid[uid] = jobs
        else:
            self._by_uid.pop(uid, None)
        return jobs[0] if jobs else None

    def _index(self, job: Job) -> None:
        """``job`` entered the controller indexed: find it by its pod (holds and other jobs are not indexed)."""
        key = token_uid(job.spec.client_token)
        if key is not None and job.id >= 0 and self._indexed is self.service.ctl:
            self._by_uid.setdefault(key, []).append(job)

    def pod_jobs(self) -> dict[str, Job]:
        """Pod uid → unfinished stored job, for every job standing for a pod (call under the lock)."""
        out: dict[str, Job] = {}
        for job in self.service.ctl.jobs.values():
            uid = token_uid(job.spec.client_token)
            if uid is not None and job.id >= 0 and not job.state.finished:
                out[uid] = job
        return out

    # ------------------------------------------------------------ holds
    def hold(self, pod: Mapping[str, Any], qpod: Pod, node: str) -> None:
        """Hold the pod's GPUs on quasched's pick until bind confirms it (kube-scheduler's *assumed* pod), in
        memory: the policy's Reserve picks the devices and an unstored job takes them in the controller.

        kube-scheduler starts the next pod's cycle while this one's bind is in flight; holding the devices now
        keeps the next pods' filter on the state kube-scheduler assumes. Released when bind goes elsewhere,
        when the pod's next cycle starts, or after :data:`ASSUME_TTL_S` without a bind (call under the lock)."""
        ctl = self.service.ctl
        try:
            spec = job_spec(pod)
            slot = ctl.cluster.node(node)
        except (PodError, PlacementError):
            return
        devices = ctl.scheduler.policy.reserve(ctl.cluster, qpod, slot, CycleState()) if qpod.is_gpu else ()
        self._hold_ids -= 1
        job = Job(self._hold_ids, spec, ctl.options.priority_classes.get(spec.priority_class, 100),
                  self.service.clock(), self._hold_ids)
        if self._run(job, node, slot, devices):
            self.holds[pod_key(pod)[2]] = Hold(pod, node, job.placement[0][1], job, time.monotonic())

    def _run(self, job: Job, node: str, slot: int, devices: tuple[int, ...]) -> bool:
        """Make ``job`` run on ``node`` with ``devices`` in the controller; False (and nothing held) if they are taken."""
        ctl = self.service.ctl
        c = ctl.cluster
        running(job, node, devices, str(c.models[c.model_id[slot]]) if job.spec.gpu_request else "",
                "kube-scheduler+" + ctl.options.policy)
        ctl.restore([job], observe=False)  # its shape was learned when the pod arrived (filter)
        if job.state == JobState.RUNNING:
            self._index(job)
            return True
        self._forget(job) if job.id < 0 else ctl.cancel(job.id, job.submitted_at)
        return False

    def _forget(self, job: Job) -> None:
        """Take hold ``job`` out of the controller, leaving no trace: it was never stored (under the lock)."""
        ctl = self.service.ctl
        if ctl.jobs.get(job.id) is not job:  # e.g. the controller was rebuilt from the store
            return
        ctl.cancel(job.id, self.service.clock())
        jobs, events = ctl.drain_changes()
        jobs, events = [j for j in jobs if j.id >= 0], [e for e in events if (e.job_id or 0) >= 0]
        if jobs or events:  # other changes drained with it (none are expected): persist them as the loop would
            self.service.store.save(jobs, events)

    def drop_hold(self, uid: str) -> Hold | None:
        """End pod ``uid``'s hold, if any; its devices are free again (under the lock)."""
        held = self.holds.pop(uid, None)
        if held is not None:
            self._forget(held.job)
        return held

    def expire_holds(self) -> None:
        """Release the holds taken more than :data:`ASSUME_TTL_S` ago and not being bound (under the lock)."""
        limit = time.monotonic() - ASSUME_TTL_S
        for uid in [u for u, h in self.holds.items() if h.at < limit and not h.binding]:
            self.drop_hold(uid)

    def confirm(self, held: Hold) -> tuple[Job, tuple[int, ...]]:
        """Hold ``held`` becomes a stored running job on the held devices (durable), as bind's first step.

        The job is stored running outside the lock (the hold keeps the devices meanwhile, so filter never
        waits on the database), then takes the hold's place in the controller. :class:`PodError` when it
        cannot (the stored job cancelled): the devices went to another job of a rebuilt controller, or the hold
        was dropped meanwhile (the pod ended, or the sync adopted it bound: its job stands for it); the hold is
        left (binding) to the caller to drop."""
        service, hold, uid = self.service, held.job, pod_key(held.pod)[2]
        spec = replace(hold.spec, client_token=pod_token(uid, str(time.time_ns())))  # the pod read once, by filter
        now = service.clock()
        events: list[Event] = []

        def started(jobs: list[Job]) -> tuple[list[Job], list[Event]]:
            job = jobs[0]
            running(job, held.node, held.devices, hold.quota_model, hold.solver)
            events[:] = placed_events(now, job)
            return [job], events

        try:
            job = service.store.insert_job(spec, hold.priority, now, then=started)
        except Exception as err:  # e.g. fenced or unreachable: nothing is stored, kube-scheduler retries
            raise PodError(f"quasched: the database refused the reservation: {err}") from err
        with service.lock:
            ctl = service.ctl
            if ctl.jobs.get(job.id) is None:  # (a controller rebuilt from the store meanwhile has it already)
                self._forget(hold)
                ctl.restore([job], observe=False)
                self._index(job)
            dropped = self.holds.get(uid) is not held
            if dropped or ctl.jobs[job.id].state != JobState.RUNNING:
                ctl.cancel(job.id, now)
                service.store.save(*ctl.drain_changes())
                raise PodError(f"quasched: the pod's hold on {held.node} was released while its bind was under way"
                               if dropped else
                               f"quasched: cannot reserve on {held.node}: devices {list(held.devices)} taken")
            service.metrics.count(events, {job.id: spec.team})
        service.broker.publish(list(events))
        return job, held.devices

    # ------------------------------------------------------------ stored jobs
    def reserve(self, pod: Mapping[str, Any], node: str, devices: tuple[int, ...] | None = None,
                adopt: bool = False) -> tuple[Job, tuple[int, ...]]:
        """Make ``pod`` a running job on ``node`` (the policy's Reserve picks devices unless given); durable.

        ``adopt``: the pod already runs there (sync): a cordon does not stop it. Returns the existing
        job if the pod already runs there. :class:`PodError` when it cannot."""
        service = self.service
        with service.lock:
            self.drop_hold(pod_key(pod)[2])
            c = service.ctl.cluster
            cordoned = adopt and node in service.records and bool(c.cordoned[c.node(node)])
            if cordoned:
                c.uncordon(node)
            try:
                return self._reserve(pod, node, devices)
            finally:
                if cordoned:
                    c.cordon(node)

    def _reserve(self, pod: Mapping[str, Any], node: str,
                 devices: tuple[int, ...] | None) -> tuple[Job, tuple[int, ...]]:
        uid = pod_key(pod)[2]
        service = self.service
        with service.lock:
            existing = self.job_of(uid)
            if existing is not None and existing.state.holds_resources and existing.placement \
                    and existing.placement[0][0] == node:
                return existing, existing.placement[0][1]
            if existing is not None and existing.state == JobState.PENDING:
                self._drop_pending(uid)
                existing = None
            if existing is not None:
                raise PodError(f"quasched: pod already placed on {existing.placement[0][0] if existing.placement else '?'}")
            failed, qpod, _ = verdicts(service.ctl, pod, [node])
            if qpod is None and node not in failed:
                raise PodError("quasched: pod requests no GPU")
            if node in failed and devices is None:
                raise PodError(f"{failed[node]} on {node}")
            assert qpod is not None or devices is not None
            ctl, now = service.ctl, service.clock()
            spec = job_spec(pod, attempt=str(time.time_ns()))
            if qpod is None:
                qpod = pod_of(spec)
            try:
                slot = ctl.cluster.node(node)
            except PlacementError:
                raise PodError(f"{UNKNOWN_NODE}: {node}") from None
            if devices is None:
                devices = ctl.scheduler.policy.reserve(ctl.cluster, qpod, slot, CycleState()) if qpod.is_gpu else ()
            events: list[Event] = []

            def place(jobs: list[Job]) -> tuple[list[Job], list[Event]]:
                """The new job runs on the devices, stored in its insert's transaction (or, refused, cancelled)."""
                job = jobs[0]
                if not self._run(job, node, slot, devices):  # the books refused the placement: no pending copy left
                    return ctl.drain_changes()
                events[:] = placed_events(now, job)
                return [job], events

            try:
                job = service.store.insert_job(spec, ctl.options.priority_classes.get(spec.priority_class, 100), now,
                                               then=place)
            except Exception as err:  # memory ran ahead of the database: rebuild from what is stored (as the API does)
                records, queues, unfinished = service.store.load()
                service.ctl = Controller.rebuilt(records, queues, unfinished, service.options)
                self.holds.clear()  # their jobs were in the old controller
                self._drop_pending(uid)
                raise PodError(f"quasched: the database refused the reservation: {err}") from err
            if not events:
                raise PodError(f"quasched: cannot reserve on {node}: devices {list(devices)} taken")
            service.metrics.count(events, {job.id: spec.team})
        service.broker.publish(list(events))
        return job, job.placement[0][1]

    def _drop_pending(self, uid: str) -> None:
        """A job of pod ``uid`` left pending (its row stored, the reservation not): cancel it, best effort,
        so the service's own loop never places a pod Kubernetes did not bind."""
        ctl = self.service.ctl
        for job in list(ctl.jobs.values()):
            if job.state == JobState.PENDING and token_uid(job.spec.client_token) == uid:
                ctl.cancel(job.id, self.service.clock())
        try:
            self.service.store.save(*ctl.drain_changes())
        except Exception:  # still refused: the next sync or bind of the pod ends it
            pass

    def release(self, uid: str, outcome: str, why: str = "") -> Job | None:
        """End the hold and the job standing for pod ``uid``: ``succeeded``, ``failed`` or ``cancelled`` (durable)."""
        def end(ctl: Any, now: float) -> Job | None:
            job = self.job_of(uid)
            if job is None:
                return None
            if outcome in ("succeeded", "failed") and job.state.holds_resources:
                return ctl.finish(job.id, now, failed=outcome == "failed")
            return ctl.cancel(job.id, now)

        with self.service.lock:
            self.drop_hold(uid)
            if self.job_of(uid) is None:
                return None
            return self.service.mutate(end)


def running(job: Job, node: str, devices: tuple[int, ...], quota_model: str, solver: str) -> None:
    """Mark ``job`` running on ``node``'s ``devices`` since its submission (the controller is not told)."""
    job.state, job.started_at = JobState.RUNNING, job.submitted_at
    job.placement = [(node, tuple(int(d) for d in devices))]
    job.quota_model, job.solver, job.reason = quota_model, solver, None


def placed_events(now: float, job: Job) -> list[Event]:
    """The events of a pod's job stored already running: ``submitted``, then ``started`` on its node."""
    node, devices = job.placement[0]
    return [Event(now, "submitted", job.id, data={"pod": job.spec.name}),
            Event(now, "started", job.id, node, {"devices": [list(devices)], "pod": job.spec.name, "via": "kubernetes"})]
