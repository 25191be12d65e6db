"""Mirror the Kubernetes cluster into quasched: nodes, and the GPU pods bound to them.

The decisions are pure functions over API objects (plain dicts), tested on recorded
fixtures: :func:`node_changes` (Kubernetes nodes vs the registered ones) and
:func:`pod_changes` (bound GPU pods vs the jobs standing for pods). :class:`Sync`
is the thin part: it lists nodes then pods (synchronously at start, so the
extender answers from the real state, ``nodeCacheCapable``), then watches
each kind in a thread, re-listing after every watch timeout or error.

After a restart of quasched the jobs of running pods come back from the store
at their nodes and devices; the first list reconciles whatever changed while
it was down (pods that ended are finished, pods bound meanwhile are adopted
with the devices of their ``quasched.io/gpu-devices`` annotation), so nothing
is double-booked.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from quasched.kube.convention import PodError, devices_of, is_managed, node_record, pod_key
from quasched.kube.deviceplugin.livestate import STATE_ANNOTATION, decode
from quasched.kube import log
from quasched.kube.extender import Bridge, KubeClient
from quasched.service.domain import Job, JobState, NodeRecord
from quasched.service.loop.controller import Controller

#: seconds between re-lists when watches end at once
MIN_WATCH_S = 1.0
#: pod phases after which a pod holds nothing
DONE = {"Succeeded": "succeeded", "Failed": "failed"}


@dataclass
class NodeChanges:
    """What a node listing changes in the registered nodes: new, updated and gone ones."""
    add: list[NodeRecord] = field(default_factory=list)
    #: registered nodes whose labels, cordon or capacity changed (the new record)
    update: list[NodeRecord] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)


def node_changes(nodes: Iterable[Mapping[str, Any]], known: Mapping[str, NodeRecord],
                 complete: bool = True) -> NodeChanges:
    """What to change so the registered nodes match ``nodes`` (``complete``: a full list, so absent ones go).

    Unreadable node objects are skipped. Failed devices marked in quasched are kept."""
    out = NodeChanges()
    seen: set[str] = set()
    for obj in nodes:
        try:
            record = node_record(obj)
        except PodError:
            continue
        seen.add(record.name)
        old = known.get(record.name)
        if old is None:
            out.add.append(record)
        else:
            record = replace(record, unhealthy=tuple(d for d in old.unhealthy if d < record.num_gpus))
            if record != old:
                out.update.append(record)
    if complete:
        out.remove = [name for name in known if name not in seen]
    return out


@dataclass(frozen=True)
class BoundPod:
    """A GPU pod bound to a node and not finished: it holds its GPUs there."""

    uid: str
    node: str
    devices: tuple[int, ...] | None
    pod: Mapping[str, Any]


def bound_pod(pod: Mapping[str, Any]) -> BoundPod | None:
    """The placement a pod holds (None: not bound, finished, or not a GPU pod)."""
    if not isinstance(pod, Mapping) or not is_managed(pod):
        return None
    node = (pod.get("spec") or {}).get("nodeName")
    phase = (pod.get("status") or {}).get("phase")
    uid = pod_key(pod)[2]
    if not node or not uid or phase in DONE:
        return None
    return BoundPod(uid, str(node), devices_of(pod), pod)


@dataclass
class PodChanges:
    """What a pod listing changes: bound GPU pods to adopt as jobs and jobs whose pods ended."""
    adopt: list[BoundPod] = field(default_factory=list)
    #: (pod uid, outcome: succeeded | failed | cancelled)
    end: list[tuple[str, str]] = field(default_factory=list)


def pod_outcome(pod: Mapping[str, Any] | None) -> str:
    """How a pod that stops holding GPUs ended (``cancelled``: deleted or gone without a final phase)."""
    phase = ((pod or {}).get("status") or {}).get("phase")
    return DONE.get(str(phase), "cancelled")


def pod_changes(pods: Iterable[Mapping[str, Any]], jobs: Mapping[str, Job], complete: bool = True) -> PodChanges:
    """What to change so the jobs standing for pods (uid → job) match ``pods`` (``complete``: a full list).

    A bound GPU pod without a job is adopted; a job whose pod finished, or (full list) is gone,
    ends; a job placed on another node than its pod's (or not placed: pending) ends and the pod is
    adopted again."""
    out = PodChanges()
    seen: set[str] = set()
    for pod in pods:
        bound = bound_pod(pod)
        uid = pod_key(pod)[2] if isinstance(pod, Mapping) else ""
        if bound is None:
            if uid in jobs and (pod_outcome(pod) != "cancelled" or (pod.get("spec") or {}).get("nodeName")
                                or jobs[uid].state == JobState.PENDING):
                seen.add(uid)
                out.end.append((uid, pod_outcome(pod)))
            elif uid in jobs:
                seen.add(uid)  # not bound yet: a bind in flight owns it
            continue
        seen.add(uid)
        job = jobs.get(uid)
        if job is None:
            out.adopt.append(bound)
        elif not job.placement or job.placement[0][0] != bound.node:
            out.end.append((uid, "cancelled"))
            out.adopt.append(bound)
    if complete:
        out.end += [(uid, "cancelled") for uid in jobs if uid not in seen]
    return out


class Sync:
    """Lists and watches nodes and pods, applying :func:`node_changes` and :func:`pod_changes` through the bridge."""

    def __init__(self, bridge: Bridge, client: KubeClient, resync_s: float = 300.0) -> None:
        self.bridge = bridge
        self.client = client
        self.resync_s = resync_s
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.node_version = ""
        self.pod_version = ""
        #: node name -> the last GPU-state annotation handed to the service
        self._gpu_state_seen: dict[str, str] = {}

    # ------------------------------------------------------------ apply
    def apply_nodes(self, nodes: Iterable[Mapping[str, Any]], complete: bool = True) -> NodeChanges:
        """Mirror the API server's nodes into the service (add, update, cordon); with ``complete`` remove the nodes not listed."""
        service, nodes = self.bridge.service, list(nodes)
        with service.lock:
            changes = node_changes(nodes, service.records, complete)
            if changes.add or changes.update or changes.remove:
                self._apply_nodes(changes)
            self._gpu_states(nodes)
        return changes

    def _apply_nodes(self, changes: NodeChanges) -> None:
        """(Under the lock.) The nodes' changes in one mutation."""
        service = self.bridge.service

        def apply(ctl: Controller, now: float) -> None:
            for name in changes.remove:
                self._remove_node(ctl, name, now)
            for record in changes.add:
                ctl.add_node(record, now)
                service.keep_node(record)
            for record in changes.update:
                self._update(ctl, record, now)

        service.mutate(apply)

    def _gpu_states(self, nodes: list[Mapping[str, Any]]) -> None:
        """Hand the service each node's GPU readings (its device plugin's annotation) when they changed; a bad
        annotation is said once and changes nothing."""
        for node in nodes:
            meta = node.get("metadata") if isinstance(node, Mapping) else None
            annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
            text = annotations.get(STATE_ANNOTATION) if isinstance(annotations, Mapping) else None
            name = meta.get("name") if isinstance(meta, Mapping) else None
            if not isinstance(name, str) or text is None or self._gpu_state_seen.get(name) == text:
                continue
            self._gpu_state_seen[name] = text
            try:
                readings = decode(text)
            except ValueError as err:
                log(f"node {name}: {err}; its GPUs' live state is ignored")
                continue
            self.bridge.service.gpu_state(name, readings)

    def _update(self, ctl: Controller, record: NodeRecord, now: float) -> None:
        service = self.bridge.service
        old = service.records[record.name]
        shape = (record.cpu_milli, record.memory_mib, record.num_gpus, record.gpu_model)
        if shape != (old.cpu_milli, old.memory_mib, old.num_gpus, old.gpu_model):
            c = ctl.cluster
            slot = c.node(record.name)
            if any(p.node == slot for p in c.placements.values()):  # resize when it is empty (jobs keep running)
                record = replace(record, cpu_milli=old.cpu_milli, memory_mib=old.memory_mib,
                                 num_gpus=old.num_gpus, gpu_model=old.gpu_model)
            else:
                ctl.remove_node(record.name, now)
                ctl.add_node(replace(record, cordoned=False), now)
                old = replace(old, cordoned=False)
        if record.cordoned and not old.cordoned:
            ctl.cordon(record.name, now)
        elif old.cordoned and not record.cordoned:
            ctl.uncordon(record.name, now)
        service.keep_node(record)

    def _end_pods_on(self, node: str) -> None:
        for uid, job in self.bridge.pod_jobs().items():
            if job.placement and job.placement[0][0] == node:
                self.bridge.release(uid, "cancelled")

    def apply_pods(self, pods: Iterable[Mapping[str, Any]], complete: bool = True, horizon: int | None = None,
                   binding: frozenset[str] = frozenset()) -> PodChanges:
        """Mirror the API server's GPU pods: end the jobs of finished pods (with ``complete`` also of pods not
        listed) and adopt bound pods quasched has no job for.

        ``horizon``: the newest job id when the list was asked for, ``binding``: the pods whose Binding was
        under way then; the jobs younger than the list and those pods' (bound while the list was under way,
        which it may not show yet) are left to the watch that follows it."""
        pods = list(pods)
        with self.bridge.service.lock:
            if complete:
                jobs = self.bridge.pod_jobs()
            else:  # a watch event: the jobs of its pods only (the uid index, not a scan of every job)
                found = {uid: self.bridge.job_of(uid) for uid in (pod_key(p)[2] for p in pods if isinstance(p, Mapping))}
                jobs = {uid: job for uid, job in found.items() if job is not None}
            if horizon is not None:
                jobs = {uid: job for uid, job in jobs.items() if job.id <= horizon and uid not in binding}
            changes = pod_changes(pods, jobs, complete)
            for uid, outcome in changes.end:
                self.bridge.release(uid, outcome)
            for bound in changes.adopt:
                try:
                    self.bridge.reserve(bound.pod, bound.node, bound.devices, adopt=True)
                except (PodError, ValueError) as err:
                    log(f"cannot adopt pod {pod_key(bound.pod)[0]}/{pod_key(bound.pod)[1]} on {bound.node}: {err}")
        return changes

    def apply_event(self, kind: str, event_type: str, obj: Mapping[str, Any]) -> None:
        """One watch event: ``ADDED``/``MODIFIED``/``DELETED`` of a node or a pod."""
        if kind == "node":
            if event_type == "DELETED":
                name = (obj.get("metadata") or {}).get("name")
                with self.bridge.service.lock:
                    if name in self.bridge.service.records:
                        self._remove([str(name)])
            else:
                self.apply_nodes([obj], complete=False)
        elif event_type == "DELETED":
            self.bridge.release(pod_key(obj)[2], pod_outcome(obj))
        else:
            self.apply_pods([obj], complete=False)

    def _remove(self, names: list[str]) -> None:
        def apply(ctl: Controller, now: float) -> None:
            for name in names:
                self._remove_node(ctl, name, now)

        self.bridge.service.mutate(apply)

    def _remove_node(self, ctl: Controller, name: str, now: float) -> None:
        """End the pods on node ``name`` and forget the node (controller, store, records); the loop loses the
        placements assumed there, which ends their holds."""
        service = self.bridge.service
        self._end_pods_on(name)
        ctl.remove_node(name, now)
        service.drop_node(name)

    # ------------------------------------------------------------ run
    def resync(self) -> None:
        """List nodes, then pods, and reconcile both (what start-up and every re-list do)."""
        nodes, self.node_version = self.client.list_nodes()
        self.apply_nodes(nodes)
        self.relist_pods()

    def relist_pods(self) -> None:
        """List the bound pods and reconcile every job standing for a pod that is older than the list."""
        with self.bridge.service.lock:
            horizon = max(self.bridge.service.ctl.jobs, default=0)
            binding = self.bridge.binds_under_way()
        pods, self.pod_version = self.client.list_pods()
        self.apply_pods(pods, horizon=horizon, binding=binding)

    def start(self) -> None:
        """Resync once, then list and watch nodes and pods on two daemon threads."""
        try:
            self.resync()
        except Exception as err:  # the API server may come up later; the threads keep trying
            log(f"initial sync failed: {err!r}")
        self._stop.clear()
        for kind in ("node", "pod"):
            thread = threading.Thread(target=self._run, args=(kind,), name=f"quasched-kube-{kind}s", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop the watch threads (each joined for up to 2 s)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2)
        self._threads = []

    def _run(self, kind: str) -> None:
        first, backoff = True, 1.0
        while not self._stop.is_set():
            try:
                if not first or not (self.node_version if kind == "node" else self.pod_version):
                    if kind == "node":
                        items, self.node_version = self.client.list_nodes()
                        self.apply_nodes(items)
                    else:
                        self.relist_pods()
                first = False
                version = self.node_version if kind == "node" else self.pod_version
                watch = self.client.watch_nodes if kind == "node" else self.client.watch_pods
                started = time.monotonic()
                for event_type, obj in watch(version, self.resync_s):
                    if self._stop.is_set():
                        return
                    if event_type == "ERROR":
                        break  # e.g. 410 Gone: re-list
                    if event_type == "BOOKMARK":
                        continue
                    self.apply_event(kind, event_type, obj)
                backoff = 1.0
                if time.monotonic() - started < MIN_WATCH_S:  # a watch that ends at once: do not spin re-listing
                    self._stop.wait(MIN_WATCH_S)
            except Exception as err:
                log(f"{kind} watch failed: {err!r}; re-listing in {backoff:g} s")
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
