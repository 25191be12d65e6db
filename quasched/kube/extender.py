"""quasched as a kube-scheduler extender: filter, prioritize and bind GPU pods (docs/kubernetes.md).

Routes under :data:`PREFIX` (``POST /k8s/scheduler/{filter,prioritize,bind}``), in the
``extender/v1`` wire format (:mod:`.wire`). The extender owns whole and fractional GPU
placement (``managedResources: nvidia.com/gpu, ignoredByScheduler: true``):

- **filter** runs the one fit rule (:func:`quasched.model.fit.fit_checks`, as the service's
  loop does) on the controller's cluster for the names given and answers the first failing
  check per node as one of a few stable reason strings (:data:`REASONS`), so they aggregate
  in the pod's ``FailedScheduling`` event;
- **prioritize** scores the fitting nodes with the service's policy: 10 for the node quasched's
  own host selection picks (so that, with kube-scheduler's in-tree scores off as in ``deploy/``,
  Kubernetes places every pod where ``quasched replay`` would), ``min(9, round(score / 10))`` for
  the others (the policy's 0..100 score); nodes that do not fit get 0. The pick's devices are
  reserved at once, the pod *assumed* there as in kube-scheduler's cache (:meth:`Bridge.assume`),
  since kube-scheduler runs the next pod's cycle while this one's bind is in flight;
- **bind** confirms the assumed reservation (or reserves with the policy's Reserve step if the
  node differs or nothing is held): the pod is a running quasched job on that node (stored, on
  the dashboard), its devices are written to the pod (annotation ``quasched.io/gpu-devices``),
  then the Binding is created through the API server; if either call fails, the reservation is
  rolled back (the job is cancelled).

A pod's first filter is its arrival: the policy's typical pods learn its shape then, as they
do on a submission to ``quasched serve``.

There is no preempt verb: kube-scheduler computes preemption victims with its in-tree
filters, which ignore ``nvidia.com/gpu`` here, and the extender's ProcessPreemption can only
narrow that set, never add the victims a GPU shortage needs (docs/kubernetes.md).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

import numpy as np
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from quasched.model.cluster import PlacementError, accessible
from quasched.model.fit import APP_DENSITY, GPU_DEVICES, GPU_MODEL, UNSCHEDULABLE, Demand, fit_checks
from quasched.model.workload import Pod
from quasched.policies.base import CycleState
from quasched.service.controller import Controller
from quasched.service.domain import Event, Job, JobSpec, JobState
from quasched.kube import wire
from quasched.kube.convention import (DEVICES_ANNOTATION, PodError, devices_text, is_managed, job_spec, pod_key,
                                      token_uid)

if TYPE_CHECKING:
    from quasched.service.runtime import Service

PREFIX = "/k8s/scheduler"
#: the stable FailedNodes strings (what users see, aggregated, in the FailedScheduling event)
NO_GPU = "quasched: not enough free GPU"
MODEL_MISMATCH = "quasched: GPU model mismatch"
UNKNOWN_NODE = "quasched: node cordoned or unknown"
OVER_QUOTA = "quasched: queue over GPU quota"
UNKNOWN_QUEUE = "quasched: unknown queue"
INVALID = "quasched: invalid GPU request"
APP_LIMIT = "quasched: app density limit"
REASONS = (NO_GPU, MODEL_MISMATCH, UNKNOWN_NODE, OVER_QUOTA, UNKNOWN_QUEUE, INVALID, APP_LIMIT,
           "quasched: insufficient cpu", "quasched: insufficient memory")
#: pods remembered from filter/prioritize for bind (which only sends the pod's name)
POD_CACHE = 4096
#: longest hold of an assumed pod (prioritize → bind), s; kube-scheduler binds within milliseconds
ASSUME_TTL_S = 30.0


class KubeClient(Protocol):
    """What the extender and the sync need from the API server (:mod:`.client` talks to a real one)."""

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None: ...

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None: ...

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]: ...

    def list_pods(self) -> tuple[list[dict[str, Any]], str]: ...

    def watch_nodes(self, resource_version: str, timeout_s: float) -> Any: ...

    def watch_pods(self, resource_version: str, timeout_s: float) -> Any: ...


@dataclass(frozen=True)
class KubeOptions:
    """The extender's configuration: the API server client and whether to mirror the cluster.

    ``client`` (None = none: bind fails with an error, sync is off) is what the extender
    binds through; ``sync`` lists and watches nodes and pods (:mod:`.sync`);
    ``resync_s`` is the longest watch before a full re-list.
    """

    client: KubeClient | None = None
    sync: bool = False
    resync_s: float = 300.0


class Bridge:
    """The extender's state beside the service: the pods seen by filter, the jobs standing for pods."""

    def __init__(self, service: Service, options: KubeOptions) -> None:
        self.service = service
        self.options = options
        self.client = options.client
        self._pods: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._pods_lock = threading.Lock()
        #: pod uid → monotonic time it was held (prioritize), for the pods not bound yet (under the lock)
        self._assumed: dict[str, float] = {}
        self.sync: Any = None

    # ------------------------------------------------------------ pods seen
    def remember(self, pod: dict[str, Any]) -> bool:
        """Cache ``pod`` for bind; True the first time its uid is seen (its arrival, for quasched)."""
        uid = pod_key(pod)[2]
        if not uid:
            return False
        with self._pods_lock:
            first = uid not in self._pods
            self._pods[uid] = pod
            self._pods.move_to_end(uid)
            while len(self._pods) > POD_CACHE:
                self._pods.popitem(last=False)
        return first

    def recall(self, uid: str) -> dict[str, Any] | None:
        """The last pod object seen with ``uid`` (None if never seen)."""
        with self._pods_lock:
            return self._pods.get(uid)

    # ------------------------------------------------------------ jobs of pods
    def job_of(self, uid: str) -> Job | None:
        """The unfinished job standing for pod ``uid`` (call under the service lock)."""
        for job in self.service.ctl.jobs.values():
            if not job.state.finished and token_uid(job.spec.client_token) == uid:
                return job
        return None

    def pod_jobs(self) -> dict[str, Job]:
        """Pod uid → unfinished job, for every job standing for a pod (call under the lock)."""
        out: dict[str, Job] = {}
        for job in self.service.ctl.jobs.values():
            uid = token_uid(job.spec.client_token)
            if uid is not None and not job.state.finished:
                out[uid] = job
        return out

    def _pod_of(self, spec: JobSpec, uid: int = 0) -> Pod:
        return Pod(uid=uid, name=spec.name, cpu_milli=spec.cpu_milli, memory_mib=spec.memory_mib,
                   num_gpu=spec.num_gpu, gpu_milli=spec.gpu_milli, gpu_spec=spec.gpu_model, team=spec.team,
                   user=spec.user)

    # ------------------------------------------------------------ filter
    def verdicts(self, pod: Mapping[str, Any], names: Sequence[str]) -> tuple[dict[str, str], Pod | None, list[int]]:
        """Per failing node its reason; the quasched pod; the slots of the fitting nodes (under the lock).

        A pod quasched does not manage (no GPU request) fits every node (pod None)."""
        if not is_managed(pod):
            return {}, None, []
        try:
            spec = job_spec(pod)
        except PodError:
            return {n: INVALID for n in names}, None, []
        ctl = self.service.ctl
        if spec.team not in ctl.quota.queues:
            return {n: UNKNOWN_QUEUE for n in names}, None, []
        c = ctl.cluster
        models = [m for m in c.models if m and accessible(m, spec.gpu_model)]
        admitted = [m for m in models if ctl.quota.admits(spec.team, m, spec.gpu_request)]
        qpod = self._pod_of(spec)
        if len(admitted) != len(models):
            qpod = replace(qpod, gpu_spec="|".join(admitted) or "\0none")
        failed: dict[str, str] = {}
        slots: list[int] = []
        wanted: list[str] = []
        for name in names:
            try:
                slots.append(c.node(name))
                wanted.append(name)
            except PlacementError:
                failed[name] = UNKNOWN_NODE
        if not slots:
            return failed, qpod, []
        idx = np.asarray(slots, dtype=np.int64)
        pending = np.ones(len(idx), dtype=bool)
        for check, ok in fit_checks(c, Demand.of([qpod]), idx, detail=True):
            failing = pending & ~ok[0]
            for i in np.flatnonzero(failing).tolist():
                failed[wanted[i]] = self._reason(check, qpod, spec, int(idx[i]))
            pending &= ok[0]
        return failed, qpod, idx[pending].tolist()

    def _reason(self, check: str, qpod: Pod, spec: JobSpec, slot: int) -> str:
        c = self.service.ctl.cluster
        if check == UNSCHEDULABLE:
            return UNKNOWN_NODE
        if check == GPU_MODEL:
            if c.num_gpus[slot] == 0:
                return NO_GPU
            model = str(c.models[c.model_id[slot]])
            return OVER_QUOTA if accessible(model, spec.gpu_model) else MODEL_MISMATCH
        if check == GPU_DEVICES:
            return NO_GPU
        if check == APP_DENSITY:
            return APP_LIMIT
        return f"quasched: insufficient {check}"

    def filter(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """kube-scheduler's Filter call: the nodes where quasched's fit rule places the pod, and why the others fail."""
        pod = wire.object_of(args, "Pod")
        assert pod is not None
        names, items = wire.node_names(args)
        first = self.remember(pod)
        with self.service.lock:
            self.expire_assumed()
            uid = pod_key(pod)[2]
            if uid in self._assumed:  # a new cycle for a pod whose last one never bound
                self.release(uid, "cancelled")
            failed, qpod, _ = self.verdicts(pod, names)
            if first and qpod is not None:  # the pod arrives: the policy's typical pods learn it, as on submit
                self.service.ctl.observe(qpod)
        passed = [n for n in names if n not in failed]
        keep = set(passed)
        nodes = None if items is None else {"metadata": {}, "items": [
            n for n in items if (n.get("metadata") or {}).get("name") in keep]}
        return {"Nodes": nodes, "NodeNames": passed, "FailedNodes": failed, "FailedAndUnresolvableNodes": {},
                "Error": ""}

    # ------------------------------------------------------------ prioritize
    def prioritize(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        """kube-scheduler's Prioritize call: the service policy's scores on kube-scheduler's 0..10 scale
        (:func:`extender_scores`: quasched's own pick alone at 10), whose GPUs are held until bind."""
        pod = wire.object_of(args, "Pod")
        assert pod is not None
        names, _ = wire.node_names(args)
        self.remember(pod)
        scores = dict.fromkeys(names, 0)
        with self.service.lock:
            _, qpod, fitting = self.verdicts(pod, names)
            if qpod is not None and fitting:
                c, scheduler = self.service.ctl.cluster, self.service.ctl.scheduler
                idx = np.asarray(sorted(fitting), dtype=np.int64)
                raw = np.asarray(scheduler.policy.score(c, qpod, idx, CycleState()), dtype=float)
                weight = sum(abs(w) for _, w in scheduler.policy.plugins) or 1.0
                pick = int(np.searchsorted(idx, scheduler.select(idx, raw)))
                for slot, score in zip(idx.tolist(), extender_scores(raw / weight, pick).tolist()):
                    scores[str(c.names[slot])] = int(score)
                self.assume(pod, str(c.names[idx[pick]]))
        return [{"Host": n, "Score": s} for n, s in scores.items()]

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

    # ------------------------------------------------------------ bind
    def bind(self, args: Mapping[str, Any]) -> dict[str, str]:
        """kube-scheduler's Bind call: reserve the pod's devices and bind it through the API server."""
        name = wire.text_of(args, "PodName")
        namespace = wire.text_of(args, "PodNamespace")
        uid = wire.text_of(args, "PodUID", required=False)
        node = wire.text_of(args, "Node")
        if self.client is None:
            return {"Error": "quasched: no Kubernetes API client configured (start with --kubeconfig or in-cluster)"}
        pod = self.recall(uid) if uid else None
        if pod is None:
            try:
                pod = self.client.get_pod(namespace, name)
            except Exception as err:
                return {"Error": f"quasched: cannot read pod {namespace}/{name}: {err}"}
            uid = uid or pod_key(pod)[2]
        if not is_managed(pod):
            return self._create_binding(namespace, name, uid, node, None)
        try:
            job, devices = self.reserve(pod, node)
        except PodError as err:
            return {"Error": str(err)}
        except Exception as err:  # e.g. the database is unreachable: the pod stays unbound, kube-scheduler retries
            return {"Error": f"quasched: cannot reserve on {node}: {err}"}
        return self._create_binding(namespace, name, uid, node, (job, devices))

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
            failed, qpod, _ = self.verdicts(pod, [node])
            if qpod is None and node not in failed:
                raise PodError("quasched: pod requests no GPU")
            if node in failed and devices is None:
                raise PodError(f"{failed[node]} on {node}")
            assert qpod is not None or devices is not None
            ctl, now = service.ctl, service.clock()
            spec = job_spec(pod, attempt=str(time.time_ns()))
            if qpod is None:
                qpod = self._pod_of(spec)
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

    def _create_binding(self, namespace: str, name: str, uid: str, node: str,
                        reserved: tuple[Job, tuple[int, ...]] | None) -> dict[str, str]:
        assert self.client is not None
        try:
            if reserved is not None and reserved[0].spec.num_gpu:
                self.client.annotate_pod(namespace, name, {DEVICES_ANNOTATION: devices_text(reserved[1])})
            self.client.bind_pod(namespace, name, uid, node)
        except Exception as err:
            if reserved is not None:
                self.release(uid, "cancelled")
            return {"Error": f"quasched: binding {namespace}/{name} to {node} failed: {err}"}
        with self.service.lock:
            self._assumed.pop(uid, None)
        return {"Error": ""}


def extender_scores(normalised: np.ndarray, pick: int) -> np.ndarray:
    """Scores 0..10 for kube-scheduler: ``min(9, round(s / 10))`` for a policy score ``s`` in 0..100,
    and 10 for ``pick``, the node quasched's own host selection chooses (its highest score, ties to its
    tie-break rank), so that node stays the unique best after the rounding to kube-scheduler's scale."""
    tens = np.clip(np.rint(np.nan_to_num(normalised) / 10), 0, 9).astype(np.int64)
    tens[pick] = 10
    return tens


# ---------------------------------------------------------------- routes
def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"Error": message, "detail": message}, status_code=status)


def router(bridge: Bridge) -> APIRouter:
    """The extender's routes ``filter``, ``prioritize`` and ``bind`` under :data:`PREFIX`, served by ``bridge``."""
    routes = APIRouter(prefix=PREFIX, tags=["kubernetes"])

    async def call(request: Request, verb: Any) -> Any:
        try:
            args = wire.parse(await request.body())
            return await run_in_threadpool(verb, args)
        except wire.BadRequest as err:
            return _error(400, str(err))

    @routes.post("/filter", summary="extender/v1 filter: the nodes that can host the pod's GPUs")
    async def filter_(request: Request) -> Any:
        return await call(request, bridge.filter)

    @routes.post("/prioritize", summary="extender/v1 prioritize: the policy's score per node, 0..10")
    async def prioritize(request: Request) -> Any:
        return await call(request, bridge.prioritize)

    @routes.post("/bind", summary="extender/v1 bind: reserve GPU devices, annotate the pod, create the Binding")
    async def bind(request: Request) -> Any:
        return await call(request, bridge.bind)

    return routes


def mount(app: FastAPI, service: Service, options: KubeOptions) -> Bridge:
    """Add the extender routes to ``app``; start/stop of the sync go with the app's lifespan."""
    bridge = Bridge(service, options)
    app.include_router(router(bridge))
    if options.sync and options.client is not None:
        from quasched.kube.sync import Sync

        bridge.sync = Sync(bridge, options.client, options.resync_s)
    return bridge


def log(message: str) -> None:
    """One line on stderr prefixed ``quasched kube:``."""
    print(f"quasched kube: {message}", file=sys.stderr, flush=True)
