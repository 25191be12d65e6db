"""quasched as a kube-scheduler extender: filter (which decides) and bind GPU pods (docs/kubernetes.md).

Routes under :data:`PREFIX` (``POST /k8s/scheduler/{filter,bind}``), in the ``extender/v1`` wire
format (:mod:`.wire`). The extender owns whole and fractional GPU placement (``managedResources:
quasched.io/gpu-shares``, advertised by quasched's device plugin):

- **filter** runs the one fit rule (:func:`quasched.model.fit.fit_checks`, as the service's loop does)
  on the controller's cluster for the names given, then the loop's own cycle among the fitting ones
  (:meth:`Scheduler.decide <quasched.policies.framework.Scheduler.decide>`: the policy's host, ties to its
  rank, and its Reserve's devices), and answers **that node alone**: kube-scheduler
  skips scoring when one node is feasible, so the pod lands where ``quasched replay`` would place it,
  with one call per pod. The pick's devices are held at once (:meth:`~.reservations.PodJobs.hold`: assumed
  in the service's loop, in memory, by no job), since kube-scheduler runs the next pod's cycle while this one's
  bind is in flight.
  When no node fits, every node gets the first failing check as one of a few stable reason strings
  (:data:`~.verdicts.REASONS`), so they aggregate in the pod's ``FailedScheduling`` event;
- **bind** of a held pod on its node creates one Binding carrying the device annotations
  (``quasched.io/gpu-devices``, ``quasched.io/assume-time``, ``quasched.io/assigned: "false"``, read by
  the device plugin's Allocate; the API server writes them with ``spec.nodeName`` in one update) and
  the pod's uid, checked on the pod kube-scheduler sent to filter, once the hold became a stored
  running job (its assumption confirmed). Any other bind (not held, another node, the fast Binding
  refused) takes the checked path: the pod read from the API server must be quasched's to bind
  (:mod:`.admission`), the policy's Reserve picks devices, assumed then booked durably as a hold's, then
  the same Binding; if it fails the job is cancelled. A standby
  replica whose kube-scheduler does not hold the leader Lease binds nothing.

A pod's first filter is its arrival: the policy's typical pods learn its shape then, as they
do on a submission to ``quasched serve``.

When no node fits, quasched may preempt (:mod:`.preemption`: its own victims, through the Eviction API);
**preempt** answers kube-scheduler's ProcessPreemption with no victims, so kube-scheduler's own preemption,
which counts shares but not which device holds them, never stops GPU pods (docs/kubernetes.md).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Protocol

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from quasched.kube import log, wire
from quasched.kube.admission import bind_refusal, held_by, lease_holder
from quasched.kube.convention import PodError, bind_annotations, devices_of, is_managed, job_spec, pod_key
from quasched.kube.gangs import GroupRef, group_of
from quasched.kube.preemption import Evictions
from quasched.kube.reservations import Hold, PodJobs
from quasched.kube.together import Together
from quasched.kube.verdicts import BINDING, verdicts
from quasched.service.domain import Job

if TYPE_CHECKING:
    from quasched.service.runtime.service import Service

PREFIX = "/k8s/scheduler"
#: pod uids remembered from filter (a pod's first filter is its arrival)
POD_CACHE = 4096


class KubeClient(Protocol):
    """What the extender and the sync need from the API server (:mod:`.client` talks to a real one)."""

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    def bind_pod(self, namespace: str, name: str, uid: str, node: str,
                 annotations: Mapping[str, str] | None = None) -> None: ...

    def get_lease(self, namespace: str, name: str) -> dict[str, Any]: ...

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None: ...

    def get_pod_group(self, ref: GroupRef) -> dict[str, Any]: ...

    def group_pods(self, ref: GroupRef) -> list[dict[str, Any]]: ...

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]: ...

    def evict_pod(self, namespace: str, name: str, uid: str, dry_run: bool = False) -> None: ...

    def list_pods(self) -> tuple[list[dict[str, Any]], str]: ...

    def watch_nodes(self, resource_version: str, timeout_s: float) -> Any: ...

    def watch_pods(self, resource_version: str, timeout_s: float) -> Any: ...


class Resync(Protocol):
    """What becoming active needs of the cluster's mirror (:class:`~.sync.Sync`)."""

    def resync(self) -> None: ...


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
    ``preemption``: a GPU pod that fits nowhere may evict GPU pods of lower priority or of borrowing queues
    (:mod:`.preemption`).
    """

    client: KubeClient | None = None
    sync: bool = False
    resync_s: float = 300.0
    scheduler_names: tuple[str, ...] = ("quasched",)
    lease: str | None = None
    identity: str = ""
    verbs_port: int | None = None
    preemption: bool = True


class Bridge(PodJobs):
    """The extender's state beside the service: the pods seen by filter, the jobs standing for pods."""

    def __init__(self, service: Service, options: KubeOptions) -> None:
        super().__init__(service)
        self.options = options
        self.client = options.client
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._pods_lock = threading.Lock()
        self.sync: Resync | None = None
        #: whether this replica's kube-scheduler held the leader Lease when last checked
        self.active = False
        self._activation = threading.Lock()
        #: pod uid → its binds under way (:meth:`binds_under_way`; kept when a rebuilt controller drops the holds)
        self._binding: dict[str, int] = {}
        #: the pod groups held together (:mod:`.together`)
        self.together = Together(self)
        #: the preemptions under way (:mod:`.preemption`; no client or no preemption: none)
        self.evictions = Evictions(self, options.client if options.preemption else None)

    @property
    def scheduler_names(self) -> tuple[str, ...]:
        """The ``schedulerName``s whose pods quasched binds."""
        return self.options.scheduler_names

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

    def filter(self, args: Mapping[str, Any], activate: bool = True) -> dict[str, Any]:
        """kube-scheduler's Filter call: quasched's pick alone among the nodes where its fit rule places the pod
        (held until bind), or, when none fits, why each fails. ``activate``: a standby replica checks the Lease
        first (never under the service lock: becoming active re-lists the cluster, which takes it)."""
        pod = wire.object_of(args, "Pod")
        assert pod is not None
        names, items = wire.node_names(args)
        first = self.remember(pod)
        if activate and not self.active:
            self.standby()  # our kube-scheduler calls: it may just have become the leader
        uid = pod_key(pod)[2]
        group = group_of(pod)  # (a few lookups: a pod of no group goes on at once)
        answer = self.together.filter(pod, group, names) if group is not None and is_managed(pod) else None
        if answer is not None:
            return self._filtered(*answer, items)
        with self.service.lock:
            self.expire_holds()
            held = self.holds.get(uid)
            if held is not None and held.binding:  # kube-scheduler gave up on a bind still in flight
                passed, failed = ([held.node], {}) if held.node in names else ([], dict.fromkeys(names, BINDING))
            else:
                self.drop_hold(uid)  # a new cycle for a pod whose last one never bound
                failed, qpod, fitting = verdicts(self.service.ctl, pod, names)
                if first and qpod is not None:  # the pod arrives: the policy's typical pods learn it, as on submit
                    self.service.ctl.observe(qpod)
                if qpod is None:
                    passed = [n for n in names if n not in failed]
                elif fitting and (decision := self.decide(qpod, fitting)).placed:
                    passed, failed = [str(self.service.ctl.cluster.names[decision.node])], {}
                    self.hold(pod, qpod, passed[0], decision.devices)
                    self.evictions.forget(uid)  # (placed: a preemptor that fits now needs its victims no more)
                else:
                    passed = []
                    why = self._preempt(pod, qpod, names)
                    if why:
                        failed = dict.fromkeys(names, why)
        return self._filtered(passed, failed, items)

    def _preempt(self, pod: Mapping[str, Any], qpod: Any, names: list[str]) -> str | None:
        """A pod that fits on none of ``names`` may preempt there: why it waits then, else None (under the lock)."""
        if self.evictions.client is None:
            return None
        try:
            spec = job_spec(pod)
        except PodError:
            return None
        slots = [s for s in self.service.ctl.cluster.slots_of(names) if s is not None]
        return self.evictions.make_room(pod, qpod, spec, slots) if slots else None

    def release(self, uid: str, outcome: str, why: str = "") -> Job | None:
        """:meth:`PodJobs.release`, then the preemptors whose victims are all gone get their room, under one hold of
        the lock: no filter takes the devices freed before them (a preemptor that ended waits for nothing)."""
        with self.service.lock:
            self.evictions.forget(uid)
            job = super().release(uid, outcome, why)
            if job is not None and self.evictions.nominations:
                self.evictions.settle()
        return job

    def evicted(self, uid: str) -> tuple[str, float] | None:
        return self.evictions.evicting.get(uid)

    def may_act(self) -> bool:
        """Whether this replica may change the cluster now: its service leads, and it is active (or has no Lease)."""
        return self.service.leading and (self.options.lease is None or self.active)

    @staticmethod
    def _filtered(passed: list[str], failed: dict[str, str], items: list[dict[str, Any]] | None) -> dict[str, Any]:
        """filter's answer in the wire format: the nodes passed (as names, and as objects when given so)."""
        keep = set(passed)
        nodes = None if items is None else {"metadata": {}, "items": [
            n for n in items if (n.get("metadata") or {}).get("name") in keep]}
        return {"Nodes": nodes, "NodeNames": passed, "FailedNodes": failed, "FailedAndUnresolvableNodes": {},
                "Error": ""}

    def filter_at_once(self, args: Mapping[str, Any]) -> dict[str, Any] | None:
        """:meth:`filter` on the caller's thread (the event loop: no hop to a worker thread and back, a third of
        filter's time over HTTP) when this replica is active, its service leads and the service lock is free; None
        otherwise, for a worker thread to wait on the lock, the Lease or a standby's reads instead of the event loop."""
        pod = wire.object_of(args, "Pod")
        if (self.options.lease is not None and not self.active) or not self.service.leading or \
                (pod is not None and group_of(pod) is not None) or not self.service.lock.acquire(blocking=False):
            return None  # (a pod group's member: its group is read from the API server, off the event loop)
        try:
            return self.filter(args, activate=False)
        finally:
            self.service.lock.release()

    # ------------------------------------------------------------ bind
    def bind(self, args: Mapping[str, Any]) -> dict[str, str]:
        """kube-scheduler's Bind call: a held pod on its node in one Binding, anything else checked first
        (:mod:`.admission`); this replica must be the active one. Under way in :meth:`binds_under_way` (a re-list
        meanwhile may miss its Binding)."""
        name = wire.text_of(args, "PodName")
        namespace = wire.text_of(args, "PodNamespace")
        uid = wire.text_of(args, "PodUID")
        node = wire.text_of(args, "Node")
        if self.client is None:
            return {"Error": "quasched: no Kubernetes API client configured (start with --kubeconfig or in-cluster)"}
        standby = self.standby()
        if standby:
            return {"Error": standby}
        together = self.together.bind(uid, namespace, name, node)
        if together is not None:
            return together
        with self.service.lock:
            held = self.holds.get(uid)
            if held is not None and held.binding:
                return {"Error": f"quasched: a bind of {namespace}/{name} is in flight"}
            if held is not None and (held.node, pod_key(held.pod)[:2]) == (node, (namespace, name)) and \
                    self.service.ctl.assumed(uid) is held.assumption and self.job_of(uid) is None and \
                    bind_refusal(held.pod, uid, node, self.options.scheduler_names) is None:
                self.start_binding(held)
            else:
                self.drop_hold(uid)  # another node, or the hold's devices were taken back: the checked path books it
                held = None
            self.binding_starts(uid)
        try:
            if held is not None:
                reply = self._bind_held(held, namespace, name, uid, node)
                if reply is not None:
                    return reply
            return self._bind_checked(namespace, name, uid, node)
        finally:
            with self.service.lock:
                self.binding_ends(uid)

    def binding_starts(self, uid: str) -> None:
        """A bind of pod ``uid`` may post its Binding from now on (under the lock)."""
        self._binding[uid] = self._binding.get(uid, 0) + 1

    def binding_ends(self, uid: str) -> None:
        """A bind of pod ``uid`` ended (under the lock)."""
        self._binding[uid] -= 1
        if not self._binding[uid]:
            del self._binding[uid]

    def binds_under_way(self) -> frozenset[str]:
        """The pods whose bind may be posting its Binding now (call under the service lock)."""
        return frozenset(self._binding)

    def _bind_held(self, held: Hold, namespace: str, name: str, uid: str, node: str) -> dict[str, str] | None:
        """The hold becomes a stored running job, then one Binding with its devices' annotations; None (job
        cancelled): the Binding failed and the pod read back is not bound so, for the checked path to settle.
        The hold ends with the bind, whatever happens (a hold left binding would keep the pod from any bind)."""
        assert self.client is not None
        try:
            try:
                job, devices = self.confirm(held)
            except PodError as err:  # e.g. the database refused: nothing is bound, kube-scheduler retries
                return {"Error": str(err)}
            failed = self._create_binding(namespace, name, uid, node, job, devices)
        finally:
            with self.service.lock:
                if self.holds.get(uid) is held:
                    self.drop_hold(uid)
        return None if failed else {"Error": ""}

    def _bind_checked(self, namespace: str, name: str, uid: str, node: str) -> dict[str, str]:
        """Bind with the pod read from the API server: refuse what quasched must not bind, book (durably), bind."""
        assert self.client is not None
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
            group = group_of(pod)
            if group is not None:  # a member binds with its group only, on the node filter held for it
                return {"Error": f"{refused}: a member of pod group {group.key} binds only on the node quasched "
                                 "holds for it; kube-scheduler tries it again"}
            job, devices = self.reserve(pod, node)
        except PodError as err:
            return {"Error": str(err)}
        except Exception as err:  # e.g. the database is unreachable: the pod stays unbound, kube-scheduler retries
            return {"Error": f"quasched: cannot reserve on {node}: {err}"}
        return {"Error": self._create_binding(namespace, name, uid, node, job, devices)}

    def _create_binding(self, namespace: str, name: str, uid: str, node: str, job: Job,
                        devices: tuple[int, ...]) -> str:
        """Bind the pod whose job is stored: one Binding carrying its devices' annotations and its uid; '' or
        why it failed (the job is cancelled then). A failed call is checked against the pod read back: a Binding
        that took effect (e.g. its answer was lost) keeps the job, since the watch may have reported it already."""
        assert self.client is not None
        try:
            self.client.bind_pod(namespace, name, uid, node, bind_annotations(devices) if job.spec.num_gpu else {})
        except Exception as err:
            if not self._bound_as(namespace, name, uid, node, devices):
                self.release(uid, "cancelled")
                return f"quasched: binding {namespace}/{name} to {node} failed: {err}"
        return ""

    def _bound_as(self, namespace: str, name: str, uid: str, node: str, devices: tuple[int, ...]) -> bool:
        """Whether the API server shows pod ``uid`` bound to ``node`` on ``devices`` (False if it cannot say)."""
        assert self.client is not None
        try:
            pod = self.client.get_pod(namespace, name)
        except Exception:
            return False
        return (pod_key(pod)[2], (pod.get("spec") or {}).get("nodeName")) == (uid, node) and \
            devices_of(pod) in (None, tuple(devices))


# ---------------------------------------------------------------- routes
def preempt_none(args: Mapping[str, Any]) -> dict[str, Any]:
    """kube-scheduler's ProcessPreemption: no node, no victim. quasched chose and evicts the victims a GPU pod
    needs at filter (:mod:`.preemption`); kube-scheduler's own choice counts shares, not devices."""
    wire.object_of(args, "Pod")  # (a malformed body is a 400, as for the other verbs)
    return {"NodeNameToMetaVictims": {}}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"Error": message, "detail": message}, status_code=status)


def router(bridge: Bridge) -> APIRouter:
    """The extender's routes ``filter`` and ``bind`` under :data:`PREFIX`, served by ``bridge``."""
    routes = APIRouter(prefix=PREFIX, tags=["kubernetes"])

    async def call(request: Request, verb: Any, at_once: Any = None) -> Any:
        port = bridge.options.verbs_port
        if port is not None and (request.url.scheme != "https" or (request.scope.get("server") or ("", 0))[1] != port):
            return _error(403, f"quasched: the extender verbs are served over mutual TLS on port {port} only")
        try:
            args = wire.parse(await request.body())
            reply = None if at_once is None else at_once(args)
            if reply is None:
                reply = await run_in_threadpool(verb, args)
            return JSONResponse(reply)  # plain json.dumps: no per-node encoder walk
        except wire.BadRequest as err:
            return _error(400, str(err))

    @routes.post("/filter", summary="extender/v1 filter: the nodes that can host the pod's GPUs")
    async def filter_(request: Request) -> Any:
        return await call(request, bridge.filter, bridge.filter_at_once)

    @routes.post("/preempt", summary="extender/v1 preempt: no victims (quasched evicts for GPU pods itself)")
    async def preempt(request: Request) -> Any:
        return await call(request, preempt_none, preempt_none)

    @routes.post("/bind", summary="extender/v1 bind: the Binding with the GPU devices' annotations; the pod's job stored")
    async def bind(request: Request) -> Any:
        return await call(request, bridge.bind)

    return routes

