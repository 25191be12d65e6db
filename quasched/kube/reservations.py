"""The jobs that stand for Kubernetes pods: found by the pod's uid (in the job's client token),
reserved durably as running jobs on a node (the policy's Reserve picks the devices unless given),
*assumed* on quasched's pick from prioritize until bind confirms it (kube-scheduler's cache, at most
:data:`ASSUME_TTL_S`), and released when a pod succeeds, fails or goes away."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping

from quasched.model.cluster import PlacementError
from quasched.policies.base import CycleState
from quasched.service.controller import Controller
from quasched.service.domain import Event, Job, JobState
from quasched.kube.convention import PodError, job_spec, pod_key, token_uid
from quasched.kube.verdicts import UNKNOWN_NODE, pod_of, verdicts

if TYPE_CHECKING:
    from quasched.service.runtime import Service

#: longest hold of an assumed pod (prioritize → bind), s; kube-scheduler binds within milliseconds
ASSUME_TTL_S = 30.0


class PodJobs:
    """The jobs standing for pods, and the pods assumed but not bound yet (the base of :class:`~.extender.Bridge`)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        #: pod uid → monotonic time it was held (prioritize), for the pods not bound yet (under the lock)
        self._assumed: dict[str, float] = {}
        #: pod uid → its job, for the controller ``_indexed`` up to job id ``_indexed_up_to`` (:meth:`job_of`)
        self._by_uid: dict[str, list[Job]] = {}
        self._indexed: Any = None
        self._indexed_up_to = -1

    # ------------------------------------------------------------ jobs of pods
    def job_of(self, uid: str) -> Job | None:
        """The unfinished job standing for pod ``uid`` (call under the service lock).

        Indexed by uid: job ids grow, so only the jobs that entered the controller since the last call are
        read (newest first, down to the last id read); a rebuilt controller is read in full, and so is the
        controller once the index holds many more pods than it has jobs (the rest finished)."""
        ctl = self.service.ctl
        if ctl is not self._indexed or len(self._by_uid) > 2 * len(ctl.jobs) + 1024:
            self._by_uid, self._indexed, self._indexed_up_to = {}, ctl, -1
        newest, fresh = self._indexed_up_to, []
        for job_id in reversed(ctl.jobs):
            if job_id <= self._indexed_up_to:
                break
            newest = max(newest, job_id)
            fresh.append(ctl.jobs[job_id])
        self._indexed_up_to = newest
        for job in reversed(fresh):  # in the controller's order, as a full scan reads them
            key = token_uid(job.spec.client_token)
            if key is not None:
                self._by_uid.setdefault(key, []).append(job)
        jobs = [j for j in self._by_uid.get(uid, ()) if not j.state.finished and ctl.jobs.get(j.id) is j]
        if jobs:
            self._by_uid[uid] = jobs
        else:
            self._by_uid.pop(uid, None)
        return jobs[0] if jobs else None

    def pod_jobs(self) -> dict[str, Job]:
        """Pod uid → unfinished job, for every job standing for a pod (call under the lock)."""
        out: dict[str, Job] = {}
        for job in self.service.ctl.jobs.values():
            uid = token_uid(job.spec.client_token)
            if uid is not None and not job.state.finished:
                out[uid] = job
        return out

    # ------------------------------------------------------------ assume
    def assume(self, pod: Mapping[str, Any], node: str) -> None:
        """Hold the pod's GPUs on quasched's pick until bind confirms it (kube-scheduler's *assumed* pod).

        kube-scheduler starts the next pod's cycle while this one's bind is in flight; holding the
        devices now keeps filter and prioritize of the next pods on the state kube-scheduler assumes.
        Released when bind goes elsewhere, when the pod's next cycle starts, or after
        :data:`ASSUME_TTL_S` without a bind."""
        uid = pod_key(pod)[2]
        try:
            self._reserve(pod, node, None, "started")
        except PodError:  # e.g. the database refused: bind reserves instead
            return
        self._assumed[uid] = time.monotonic()

    def expire_assumed(self) -> None:
        """Release the pods assumed more than :data:`ASSUME_TTL_S` ago and never bound (under the lock)."""
        limit = time.monotonic() - ASSUME_TTL_S
        for uid in [u for u, at in self._assumed.items() if at < limit]:
            self.release(uid, "cancelled")

    def reserve(self, pod: Mapping[str, Any], node: str, devices: tuple[int, ...] | None = None,
                adopt: bool = False) -> tuple[Job, tuple[int, ...]]:
        """Make ``pod`` a running job on ``node`` (the policy's Reserve picks devices unless given); durable.

        ``adopt``: the pod already runs there (sync): a cordon does not stop it. Returns the existing
        job if the pod already runs there. :class:`PodError` when it cannot."""
        service = self.service
        with service.lock:
            c = service.ctl.cluster
            cordoned = adopt and node in service.records and bool(c.cordoned[c.node(node)])
            if cordoned:
                c.uncordon(node)
            try:
                return self._reserve(pod, node, devices, "started")
            finally:
                if cordoned:
                    c.cordon(node)

    def _reserve(self, pod: Mapping[str, Any], node: str, devices: tuple[int, ...] | None,
                 kind: str) -> tuple[Job, tuple[int, ...]]:
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
            if existing is not None and uid in self._assumed:  # held elsewhere: kube-scheduler chose another node
                self.release(uid, "cancelled")
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
            job = service.store.insert_job(spec, ctl.options.priority_classes.get(spec.priority_class, 100), now)
            c = ctl.cluster
            job.state, job.started_at = JobState.RUNNING, now
            job.placement = [(node, tuple(int(d) for d in devices))]
            job.quota_model = str(c.models[c.model_id[slot]]) if spec.gpu_request else ""
            job.solver = "kube-scheduler+" + ctl.options.policy
            job.reason = None
            ctl.restore([job], observe=False)  # its shape was learned when the pod arrived (filter)
            if job.state != JobState.RUNNING:  # the books refused the placement: leave no pending copy behind
                ctl.cancel(job.id, now)
                service.store.save(*ctl.drain_changes())
                raise PodError(f"quasched: cannot reserve on {node}: devices {list(devices)} taken")
            data = {"devices": [list(job.placement[0][1])], "pod": spec.name, "via": "kubernetes"}
            events = [Event(now, "submitted", job.id, data={"pod": spec.name}), Event(now, kind, job.id, node, data)]
            try:
                service.store.save([job], events)
            except Exception as err:  # memory ran ahead of the database: rebuild from what is stored (as the API does)
                records, queues, unfinished = service.store.load()
                service.ctl = Controller.rebuilt(records, queues, unfinished, service.options)
                self._drop_pending(uid)
                raise PodError(f"quasched: the database refused the reservation: {err}") from err
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
        """End the job standing for pod ``uid``: ``succeeded``, ``failed`` or ``cancelled`` (durable)."""
        self._assumed.pop(uid, None)
        def end(ctl: Any, now: float) -> Job | None:
            job = self.job_of(uid)
            if job is None:
                return None
            if outcome in ("succeeded", "failed") and job.state.holds_resources:
                return ctl.finish(job.id, now, failed=outcome == "failed")
            return ctl.cancel(job.id, now)

        with self.service.lock:
            if self.job_of(uid) is None:
                return None
            return self.service.mutate(end)
