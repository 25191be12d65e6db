"""The jobs that stand for Kubernetes pods: found by the pod's uid (in the job's client token), booked
durably as running jobs on a node, and released when a pod succeeds, fails or goes away.

A booking is kube-scheduler's assume-then-bind: the pod's devices are first *assumed* in the service's loop
under its uid (:meth:`Controller.assume <quasched.service.loop.controller.Controller.assume>`: taken, by no job),
on quasched's pick from filter (a :class:`Hold`, at most :data:`ASSUME_TTL_S` until bind, in memory only) or
by the checked bind path; then its job is stored running on them outside the lock and takes the assumption's
place in the loop (:meth:`Service.insert_placed <quasched.service.runtime.service.Service.insert_placed>`, the
service's one write path for such a booking)."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
from fastapi import HTTPException

from quasched.kube.convention import PodError, job_spec, pod_key, pod_priority, pod_token, token_uid
from quasched.kube.verdicts import UNKNOWN_NODE, verdicts
from quasched.model.workload import Pod
from quasched.policies.framework import Decision
from quasched.service.domain import Event, Job, JobSpec, JobState
from quasched.service.loop.assumed import Assumption
from quasched.service.loop.controller import Controller
from quasched.service.loop.state import job_pod

if TYPE_CHECKING:
    from quasched.service.runtime.service import Service

#: longest hold of an assumed pod (filter → bind), s; kube-scheduler binds within milliseconds
ASSUME_TTL_S = 30.0


@dataclass
class Hold:
    """A pod whose devices are assumed in the loop under its uid until its job is stored: ``pod`` as filter (or the
    API server) gave it, as quasched sees it (``qpod``, ``spec``), the ``assumption``; ``binding``: a bind of it is
    in flight; its ``node`` and ``devices`` are the assumption's."""

    pod: Mapping[str, Any]
    qpod: Pod
    spec: JobSpec
    assumption: Assumption
    binding: bool = False

    @property
    def node(self) -> str:
        return self.assumption.node

    @property
    def devices(self) -> tuple[int, ...]:
        return self.assumption.devices


def requeue(client: Any, pods: Sequence[tuple[str, str, str, Mapping[str, str]]],
            gone: Callable[[str], None] | None = None, name: str = "quasched-requeue") -> None:
    """Annotate the held ``pods`` (namespace, name, uid, annotations) in a thread, best effort (the caller, under the
    service lock, does not wait): a pod's update makes kube-scheduler try it at once, instead of after its back-off.

    ``gone``: each pod is read first, and one that went away (not found, another uid, being deleted, bound) is
    reported to ``gone(uid)`` instead of annotated; no watch reports an unbound pod's deletion."""
    if client is None or not pods:
        return

    def annotate() -> None:
        for namespace, pod_name, uid, annotations in pods:
            try:
                if gone is not None and not unbound(client, namespace, pod_name, uid):
                    gone(uid)
                    continue
                client.annotate_pod(namespace, pod_name, annotations)
            except Exception:  # best effort: the pod is tried after its back-off anyway
                pass

    threading.Thread(target=annotate, name=name, daemon=True).start()


def unbound(client: Any, namespace: str, name: str, uid: str) -> bool:
    """Whether pod ``uid`` still exists unbound and not being deleted (True when the API server cannot say)."""
    try:
        pod = client.get_pod(namespace, name)
    except LookupError:
        return False
    except Exception as err:
        return getattr(err, "status", None) != 404
    return pod_key(pod)[2] == uid and not (pod.get("metadata") or {}).get("deletionTimestamp") and \
        not (pod.get("spec") or {}).get("nodeName")


class PodJobs:
    """The jobs standing for pods, and the pods held but not bound yet (the base of :class:`~.extender.Bridge`)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        #: pod uid → its hold (filter's pick, not bound yet; under the lock)
        self.holds: dict[str, Hold] = {}
        #: pod uid → its jobs in the controller ``_indexed``, in the order they entered it (:meth:`job_of`)
        self._by_uid: dict[str, list[Job]] = {}
        self._indexed: Controller | None = None

    # ------------------------------------------------------------ jobs of pods
    def job_of(self, uid: str) -> Job | None:
        """The unfinished stored job standing for pod ``uid`` (call under the service lock).

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
        """``job`` entered the controller indexed: find it by its pod (other jobs are not indexed)."""
        key = token_uid(job.spec.client_token)
        if key is not None and self._indexed is self.service.ctl:
            self._by_uid.setdefault(key, []).append(job)

    def pod_jobs(self) -> dict[str, Job]:
        """Pod uid → unfinished stored job, for every job standing for a pod (call under the lock)."""
        out: dict[str, Job] = {}
        for job in self.service.ctl.jobs.values():
            uid = token_uid(job.spec.client_token)
            if uid is not None and not job.state.finished:
                out[uid] = job
        return out

    # ------------------------------------------------------------ holds
    def decide(self, qpod: Pod, slots: Sequence[int]) -> Decision:
        """The loop's one cycle for ``qpod`` among the node slots ``slots`` (kube-scheduler's candidates): the
        policy's host and its Reserve's devices, not bound; the stream's cycle hook does not run (call under the
        lock)."""
        return self.service.ctl.scheduler.decide(qpod, np.asarray(slots, dtype=np.int64), counted=False)

    def hold(self, pod: Mapping[str, Any], qpod: Pod, node: str, devices: tuple[int, ...]) -> None:
        """Hold the pod's GPUs ``devices`` on quasched's pick (:meth:`decide`) until bind confirms it
        (kube-scheduler's *assumed* pod), assumed in the loop for :data:`ASSUME_TTL_S`.

        kube-scheduler starts the next pod's cycle while this one's bind is in flight; holding the devices now
        keeps the next pods' filter on the state kube-scheduler assumes. Released when bind goes elsewhere,
        when the pod's next cycle starts, after the TTL without a bind, or when the loop loses the assumption
        (its node or a device under it went) (call under the lock)."""
        try:
            spec = job_spec(pod)
        except PodError:
            return
        self._assume(pod, qpod, spec, node, devices)

    def _assume(self, pod: Mapping[str, Any], qpod: Pod, spec: JobSpec, node: str,
                devices: tuple[int, ...], ttl_s: float = ASSUME_TTL_S) -> Hold | None:
        """Assume the pod's ``devices`` on ``node`` in the loop for ``ttl_s`` and hold them; None (nothing held) if
        the node is unknown or they do not fit (under the lock)."""
        ctl, uid = self.service.ctl, pod_key(pod)[2]
        self.drop_hold(uid)
        if not ctl.assume(uid, qpod, node, tuple(devices), ttl_s, self.service.clock(), self._lost):
            return None
        assumption = ctl.assumed(uid)
        assert assumption is not None
        held = self.holds[uid] = Hold(pod, qpod, spec, assumption)
        return held

    def _lost(self, uid: str) -> None:
        """The loop lost pod ``uid``'s assumption (expired, its node or a device under it gone): its hold ends."""
        self.holds.pop(uid, None)

    def drop_hold(self, uid: str) -> Hold | None:
        """End pod ``uid``'s hold, if any; its devices are free again (under the lock)."""
        held = self.holds.pop(uid, None)
        if held is not None and self.service.ctl.assumed(uid) is held.assumption:
            self.service.ctl.forget(uid)
        return held

    def expire_holds(self) -> None:
        """End the holds whose assumption's TTL ran out (none while being bound) and those a controller rebuilt
        from the store does not have (under the lock)."""
        ctl = self.service.ctl
        ctl.expire(self.service.clock())
        for uid in [u for u, h in self.holds.items() if not h.binding and ctl.assumed(u) is not h.assumption]:
            del self.holds[uid]

    def start_binding(self, held: Hold) -> None:
        """A bind of ``held`` starts: it is in flight, and its assumption no longer expires (under the lock)."""
        held.binding = True
        self.service.ctl.assumptions.binding(pod_key(held.pod)[2])

    def confirm(self, held: Hold) -> tuple[Job, tuple[int, ...]]:
        """Hold ``held`` becomes a stored running job on the held devices (durable), as bind's first step.

        The job is stored running outside the lock (the assumption keeps the devices meanwhile, so filter never
        waits on the database), then takes the assumption's place in the loop. :class:`PodError` when it cannot
        (the stored job cancelled): the hold was dropped meanwhile (the pod ended, or the sync adopted it bound:
        its job stands for it; or its node or a device under it went), or a controller rebuilt from the store
        meanwhile gave the devices to another pod; the hold is left (binding) to the caller to drop."""
        service, uid = self.service, pod_key(held.pod)[2]
        spec = replace(held.spec, client_token=pod_token(uid, str(time.time_ns())))  # the pod read once, by filter
        quota_model = held.assumption.model if spec.gpu_request else ""
        solver = f"kube-scheduler+{service.ctl.options.policy}"
        taken = f"quasched: cannot reserve on {held.node}: devices {list(held.devices)} taken"

        def placed(job: Job) -> list[Event]:
            running(job, held.node, held.devices, quota_model, solver)
            return placed_events(job.submitted_at, job)

        def enter(ctl: Controller, job: Job, now: float) -> tuple[Job, str]:
            """The stored job takes the hold's place in the loop: '', or why not (the job ends cancelled)."""
            known = ctl.jobs.get(job.id)  # (a controller rebuilt from the store meanwhile has it already)
            if self.holds.get(uid) is not held:
                why = f"quasched: the pod's hold on {held.node} was released while its bind was under way"
            elif known is not None:
                why = "" if known.state == JobState.RUNNING and known.placement == job.placement else taken
            else:
                if ctl.assumed(uid) is not held.assumption and \
                        ctl.assume(uid, held.qpod, held.node, held.devices, math.inf, now, self._lost):
                    held.assumption = ctl.assumed(uid) or held.assumption  # rebuilt meanwhile: taken again if free
                why = "" if ctl.confirm(uid, job) else taken
            if why and known is not None:
                ctl.cancel(job.id, now)
            elif why:
                ctl.reject(job, now)
            elif known is None:
                self._index(job)
            return known or job, why

        try:
            job, why = service.insert_placed(spec, pod_priority(held.pod), placed, enter)
        except HTTPException as err:  # e.g. fenced or unreachable: nothing is stored, kube-scheduler retries
            raise PodError(f"quasched: cannot store the reservation: {err.detail}") from err
        if why:
            raise PodError(why)
        return job, held.devices

    # ------------------------------------------------------------ stored jobs
    def reserve(self, pod: Mapping[str, Any], node: str, devices: tuple[int, ...] | None = None,
                adopt: bool = False) -> tuple[Job, tuple[int, ...]]:
        """Make ``pod`` a running job on ``node`` (the policy's Reserve picks devices unless given); durable:
        assumed, then stored and confirmed as a held pod is (:meth:`confirm`).

        ``adopt``: the pod already runs there (sync): a cordon does not stop it. Returns the existing
        job if the pod already runs there. :class:`PodError` when it cannot."""
        uid = pod_key(pod)[2]
        service = self.service
        with service.lock:
            self.drop_hold(uid)
            c = service.ctl.cluster
            cordoned = adopt and node in service.records and bool(c.cordoned[c.node(node)])
            if cordoned:
                c.uncordon(node)
            try:
                held = self._assume_checked(pod, node, devices)
            finally:
                if cordoned:
                    c.cordon(node)
            if not isinstance(held, Hold):  # the pod's job runs there already
                return held
            self.start_binding(held)
        try:
            return self.confirm(held)
        finally:
            with service.lock:
                if self.holds.get(uid) is held:
                    self.drop_hold(uid)

    def _assume_checked(self, pod: Mapping[str, Any], node: str,
                        devices: tuple[int, ...] | None) -> Hold | tuple[Job, tuple[int, ...]]:
        """:meth:`reserve`'s checks, then its hold (or the pod's job already running on ``node``, and its devices)."""
        uid, service = pod_key(pod)[2], self.service
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
        [slot] = service.ctl.cluster.slots_of([node])
        if slot is None:
            raise PodError(f"{UNKNOWN_NODE}: {node}")
        spec = job_spec(pod)
        qpod = qpod or job_pod(spec, local_node=service.ctl.options.local_node)
        if devices is None:  # the node fits (above): the policy's Reserve picks its devices in the loop's cycle
            devices = self.decide(qpod, [slot]).devices
        held = self._assume(pod, qpod, spec, node, devices)
        if held is None:
            raise PodError(f"quasched: cannot reserve on {node}: devices {list(devices or ())} taken")
        return held

    def _drop_pending(self, uid: str) -> None:
        """A job of pod ``uid`` left pending (e.g. requeued with its node): cancel it, best effort, so the service's
        own loop never places a pod Kubernetes did not bind."""
        def cancel(ctl: Controller, now: float) -> None:
            for job in [j for j in ctl.jobs.values() if j.state == JobState.PENDING]:
                if token_uid(job.spec.client_token) == uid:
                    ctl.cancel(job.id, now)

        try:
            self.service.mutate(cancel)
        except HTTPException:  # refused: the next sync or bind of the pod ends it
            pass

    def evicted(self, uid: str) -> tuple[str, float] | None:
        """Whom pod ``uid``'s eviction, posted and not recorded yet, is for, and its grace (None: none is; under the
        lock)."""
        return None

    def release(self, uid: str, outcome: str, why: str = "") -> Job | None:
        """End the hold and the job standing for pod ``uid``: ``succeeded``, ``failed`` or ``cancelled`` (durable); a
        job whose pod was evicted for a preemptor ends cancelled, reason ``Preempted``, however its container exited
        (also when its pod went before its eviction was recorded: :meth:`evicted`)."""
        def end(ctl: Controller, now: float) -> Job | None:
            job = self.job_of(uid)
            if job is None:
                return None
            evicted = self.evicted(uid)
            if job.state == JobState.RUNNING and evicted is not None:  # gone before its eviction was recorded
                ctl.preempting(job.id, now, *evicted)
            if job.state == JobState.PREEMPTING and job.preempt_at is None:  # evicted for a preemptor
                return ctl.preempted(job.id, now)
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
