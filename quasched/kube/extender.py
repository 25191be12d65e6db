"""quasched as a kube-scheduler extender: filter, prioritize and bind GPU pods (docs/kubernetes.md).

Routes under :data:`PREFIX` (``POST /k8s/scheduler/{filter,prioritize,bind}``), in the
``extender/v1`` wire format (:mod:`.wire`). The extender owns whole and fractional GPU
placement (``managedResources: quasched.io/gpu-shares``, advertised by quasched's device plugin):

- **filter** runs the one fit rule (:func:`quasched.model.fit.fit_checks`, as the service's
  loop does) on the controller's cluster for the names given and answers the first failing
  check per node as one of a few stable reason strings (:data:`~.verdicts.REASONS`), so they aggregate
  in the pod's ``FailedScheduling`` event (:mod:`.verdicts`);
- **prioritize** scores the fitting nodes with the service's policy: 10 for the node quasched's
  own host selection picks (so that, with kube-scheduler's in-tree scores off as in ``deploy/``,
  Kubernetes places every pod where ``quasched replay`` would), ``min(9, round(score / 10))`` for
  the others (the policy's 0..100 score); nodes that do not fit get 0. The pick's devices are
  reserved at once, the pod *assumed* there as in kube-scheduler's cache (:meth:`~.reservations.PodJobs.assume`),
  since kube-scheduler runs the next pod's cycle while this one's bind is in flight;
- **bind** reads the pod from the API server and refuses what quasched must not bind (another
  scheduler's pod, a replaced uid, a pod without a GPU request; a standby replica whose kube-scheduler
  does not hold the leader Lease: :mod:`.admission`), then confirms the assumed reservation (or
  reserves with the policy's Reserve step if the node differs or nothing is held): the pod is a
  running quasched job on that node (stored, on the dashboard), its devices are written to the pod
  (annotations ``quasched.io/gpu-devices``, ``quasched.io/assume-time`` and ``quasched.io/assigned: "false"``,
  read by the device plugin's Allocate; on that uid only), then the Binding is created through the
  API server; if either call fails, the reservation is rolled back (the job is cancelled).

A pod's first filter is its arrival: the policy's typical pods learn its shape then, as they
do on a submission to ``quasched serve``.

There is no preempt verb: kube-scheduler computes preemption victims with its in-tree
filters, which count shares but not which device holds them, and the extender's ProcessPreemption
can only narrow that set, never add the victims a GPU shortage needs (docs/kubernetes.md).
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Protocol

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from quasched.policies.base import CycleState
from quasched.service.domain import Job
from quasched.kube import wire
from quasched.kube.admission import bind_refusal, held_by, lease_holder
from quasched.kube.convention import PodError, bind_annotations, devices_of, pod_key
from quasched.kube.reservations import PodJobs
from quasched.kube.verdicts import extender_scores, verdicts

if TYPE_CHECKING:
    from quasched.service.runtime import Service

PREFIX = "/k8s/scheduler"
#: pod uids remembered from filter/prioritize (a pod's first filter is its arrival)
POD_CACHE = 4096


class KubeClient(Protocol):
    """What the extender and the sync need from the API server (:mod:`.client` talks to a real one)."""

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str], uid: str = "") -> None: ...

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None: ...

    def get_lease(self, namespace: str, name: str) -> dict[str, Any]: ...

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]: ...

    def list_pods(self) -> tuple[list[dict[str, Any]], str]: ...

    def watch_nodes(self, resource_version: str, timeout_s: float) -> Any: ...

    def watch_pods(self, resource_version: str, timeout_s: float) -> Any: ...


@dataclass(frozen=True)
class KubeOptions:
    """The extender's configuration: the API server client and whether to mirror the cluster.

    ``client`` (None = none: bind fails with an error, sync is off) is what the extender
    binds through; ``sync`` lists and watches nodes and pods (:mod:`.sync`);
    ``resync_s`` is the longest watch before a full re-list; bind refuses pods whose
    ``schedulerName`` is not in ``scheduler_names``. ``lease`` (``namespace/name`` of
    kube-scheduler's leader Lease) makes bind refuse unless the Lease's holder is ``identity``
    (this replica's kube-scheduler: its host name); None: one replica, no fencing.
    ``verbs_port``: the verbs are answered only on this port over HTTPS (the mutual-TLS listener).
    """

    client: KubeClient | None = None
    sync: bool = False
    resync_s: float = 300.0
    scheduler_names: tuple[str, ...] = ("quasched",)
    lease: str | None = None
    identity: str = ""
    verbs_port: int | None = None


class Bridge(PodJobs):
    """The extender's state beside the service: the pods seen by filter, the jobs standing for pods."""

    def __init__(self, service: Service, options: KubeOptions) -> None:
        super().__init__(service)
        self.options = options
        self.client = options.client
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._pods_lock = threading.Lock()
        self.sync: Any = None
        #: whether this replica's kube-scheduler held the leader Lease when last checked
        self.active = False
        self._activation = threading.Lock()

    # ------------------------------------------------------------ pods seen
    def remember(self, pod: dict[str, Any]) -> bool:
        """Note pod ``pod``'s uid; True the first time it is seen (its arrival, for quasched)."""
        uid = pod_key(pod)[2]
        if not uid:
            return False
        with self._pods_lock:
            first = uid not in self._seen
            self._seen[uid] = None
            self._seen.move_to_end(uid)
            while len(self._seen) > POD_CACHE:
                self._seen.popitem(last=False)
        return first

    def standby(self) -> str | None:
        """None while this replica may bind (no Lease configured, or its own kube-scheduler holds it), else why not.

        Becoming active re-lists the cluster first: the sync's watch may lag what the last leader bound."""
        lease = self.options.lease
        if lease is None or self.client is None:
            return None
        namespace, _, name = lease.partition("/")
        try:
            holder = lease_holder(self.client.get_lease(namespace, name))
        except Exception as err:
            self.active = False
            return f"quasched: cannot read the leader Lease {lease}: {err}"
        if not held_by(holder, self.options.identity):
            self.active = False
            return (f"quasched: standby replica: the leader Lease {lease} is held by {holder or 'nobody'}, "
                    f"not by this replica's kube-scheduler ({self.options.identity})")
        with self._activation:
            if not self.active:
                try:
                    if self.sync is not None:
                        self.sync.resync()
                except Exception as err:
                    return f"quasched: becoming active, the re-list of the cluster failed: {err}"
                log(f"active: the leader Lease {lease} is held by {holder}")
                self.active = True
        return None

    def filter(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """kube-scheduler's Filter call: the nodes where quasched's fit rule places the pod, and why the others fail."""
        pod = wire.object_of(args, "Pod")
        assert pod is not None
        names, items = wire.node_names(args)
        first = self.remember(pod)
        if not self.active:
            self.standby()  # our kube-scheduler calls: it may just have become the leader
        with self.service.lock:
            self.expire_assumed()
            uid = pod_key(pod)[2]
            if uid in self._assumed:  # a new cycle for a pod whose last one never bound
                self.release(uid, "cancelled")
            failed, qpod, _ = verdicts(self.service.ctl, pod, names)
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
        scores: dict[str, int] = {}
        with self.service.lock:
            _, qpod, fitting = verdicts(self.service.ctl, pod, names)
            if qpod is not None and fitting:
                c, scheduler = self.service.ctl.cluster, self.service.ctl.scheduler
                idx = np.asarray(sorted(fitting), dtype=np.int64)
                raw = np.asarray(scheduler.policy.score(c, qpod, idx, CycleState()), dtype=float)
                weight = sum(abs(w) for _, w in scheduler.policy.plugins) or 1.0
                pick = int(np.searchsorted(idx, scheduler.select(idx, raw)))
                scores = dict(zip(c.names[idx].tolist(), extender_scores(raw / weight, pick).tolist()))
                self.assume(pod, str(c.names[idx[pick]]))
        return [{"Host": n, "Score": scores.get(n, 0)} for n in dict.fromkeys(names)]

    # ------------------------------------------------------------ bind
    def bind(self, args: Mapping[str, Any]) -> dict[str, str]:
        """kube-scheduler's Bind call: check the pod and this replica (:mod:`.admission`), reserve the pod's
        devices and bind it through the API server."""
        name = wire.text_of(args, "PodName")
        namespace = wire.text_of(args, "PodNamespace")
        uid = wire.text_of(args, "PodUID")
        node = wire.text_of(args, "Node")
        if self.client is None:
            return {"Error": "quasched: no Kubernetes API client configured (start with --kubeconfig or in-cluster)"}
        standby = self.standby()
        if standby:
            return {"Error": standby}
        refused = f"quasched: refused to bind {namespace}/{name} to {node}"
        try:
            pod = self.client.get_pod(namespace, name)
        except Exception as err:
            return {"Error": f"{refused}: cannot read the pod: {err}"}
        why = bind_refusal(pod, uid, node, self.options.scheduler_names)
        if why:
            return {"Error": f"{refused}: {why}"}
        try:
            if (pod.get("spec") or {}).get("nodeName") == node:  # a repeated bind that took effect: book it, once
                self.reserve(pod, node, devices_of(pod), adopt=True)
                return {"Error": ""}
            job, devices = self.reserve(pod, node)
        except PodError as err:
            return {"Error": str(err)}
        except Exception as err:  # e.g. the database is unreachable: the pod stays unbound, kube-scheduler retries
            return {"Error": f"quasched: cannot reserve on {node}: {err}"}
        return self._create_binding(namespace, name, uid, node, job, devices)

    def _create_binding(self, namespace: str, name: str, uid: str, node: str, job: Job,
                        devices: tuple[int, ...]) -> dict[str, str]:
        assert self.client is not None
        try:
            if job.spec.num_gpu:
                self.client.annotate_pod(namespace, name, bind_annotations(devices), uid=uid)
            self.client.bind_pod(namespace, name, uid, node)
        except Exception as err:
            self.release(uid, "cancelled")
            return {"Error": f"quasched: binding {namespace}/{name} to {node} failed: {err}"}
        with self.service.lock:
            self._assumed.pop(uid, None)
        return {"Error": ""}


# ---------------------------------------------------------------- routes
def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"Error": message, "detail": message}, status_code=status)


def router(bridge: Bridge) -> APIRouter:
    """The extender's routes ``filter``, ``prioritize`` and ``bind`` under :data:`PREFIX`, served by ``bridge``."""
    routes = APIRouter(prefix=PREFIX, tags=["kubernetes"])

    async def call(request: Request, verb: Any) -> Any:
        port = bridge.options.verbs_port
        if port is not None and (request.url.scheme != "https" or (request.scope.get("server") or ("", 0))[1] != port):
            return _error(403, f"quasched: the extender verbs are served over mutual TLS on port {port} only")
        try:
            args = wire.parse(await request.body())
            return JSONResponse(await run_in_threadpool(verb, args))  # plain json.dumps: no per-node encoder walk
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


def log(message: str) -> None:
    """One line on stderr prefixed ``quasched kube:``."""
    print(f"quasched kube: {message}", file=sys.stderr, flush=True)
