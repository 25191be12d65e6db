"""A Kubernetes cluster as a member of the front (:class:`KubeMember`), as MultiKueue uses its worker clusters: the
front creates each job's pod in the member's namespace, for the member's kube-scheduler running quasched as its
extender (docs/kubernetes.md), reads it back and deletes it to cancel it. docs/federation.md, "Kubernetes members".

- **The pod** (:func:`pod_manifests`): named from the job's client token (:func:`pod_name`), so a repeat after a
  crash finds the pod it created (409 AlreadyExists → read back, its ``front.quasched.io/client-token`` annotation
  compared) instead of creating a second; ``schedulerName`` the member's ``scheduler_name`` (``quasched``); one
  container ``main`` of the member's ``image``, with the job's ``command`` (none: the image's own entrypoint),
  ``env`` and ``workdir``; the job's CPU and memory as requests; its GPUs as ``quasched.io/gpu-shares`` in requests
  and limits (100 per GPU; a share of one in hundredths, rounded up); its GPU model and team as the annotations
  ``quasched.io/gpu-model`` and ``quasched.io/queue``; ``restartPolicy: Never``; its ``time_limit`` as
  ``activeDeadlineSeconds``; the member's ``pod_spec`` under all that. A gang (``pods`` > 1) is that many pods
  ``<name>-<i>`` and a ``PodGroup`` ``<name>`` of ``minMember`` pods (the scheduler-plugins coscheduling convention,
  which the extender places whole: :mod:`quasched.kube.gangs`).
- **Its name on the member**: ``<namespace>/<name>``; a gang's ``<namespace>/<name>[<pods>]``.
- **Its state** (:func:`pod_state`): from the pod's phase: ``Pending`` → pending (bound or not: a bound pod runs
  only once its kubelet starts it), ``Running`` → running, ``Succeeded``/``Failed`` → succeeded/failed with the
  container's exit code and its start and end; being deleted → stopping if it ran, else cancelled; gone →
  cancelled. A gang (:func:`gang_state`): failed if a pod failed, cancelled if one is gone, succeeded when all are,
  running when all run (from the last pod's start), else pending.
- **Its nodes** (:func:`node_entries`): the API server's nodes as quasched's extender reads them
  (:func:`~quasched.kube.convention.node_record`; a node tainted ``NoSchedule``/``NoExecute`` that ``pod_spec``'s
  tolerations do not tolerate counts as cordoned), with what the pods bound to them and not finished take: every
  pod's CPU and memory requests, GPU milli per device from the ``quasched.io/gpu-devices`` annotation quasched's bind
  writes; ``jobs`` the names of those pods as above.
"""

from __future__ import annotations

import copy
import hashlib
import math
import re
from collections import defaultdict
from datetime import datetime
from typing import Any, Mapping, Sequence

import httpx
from pydantic import ValidationError

from quasched.front.members import CALL_TIMEOUT_S, KubeMemberConfig, MemberError
from quasched.kube.client import ApiError
from quasched.kube.convention import (GPU_RESOURCE, MODEL_ANNOTATION, QUEUE_ANNOTATION, SHARES, PodError, devices_of,
                                      gpu_request, mebibytes, milli, node_record, pod_request)
from quasched.kube.gangs import GROUP_LABEL, PODGROUP_APIS, placed_member
from quasched.model.workload import FULL_GPU_MILLI
from quasched.service.domain import JobSpec
from quasched.service.runtime.schemas import JobSubmit

#: the front's labels and annotations (not ``quasched.io/``: the extender refuses annotations of its own it does
#: not know)
PREFIX = "front.quasched.io/"
#: label: the job's name on the member (its pod's, a gang's PodGroup's)
JOB_LABEL = PREFIX + "job"
#: annotation: the front's client token of the job
TOKEN_ANNOTATION = PREFIX + "client-token"
#: annotation: the front's name of the job
NAME_ANNOTATION = PREFIX + "name"
#: annotation of a gang's pods: how many there are
PODS_ANNOTATION = PREFIX + "pods"
CONTAINER = "main"
PODGROUP_API = PODGROUP_APIS["coscheduling"]
#: ``<namespace>/<name>`` or ``<namespace>/<name>[<pods>]``
REF = re.compile(r"^([a-z0-9][-a-z0-9]{0,62})/([a-z0-9][-a-z0-9]{0,62})(?:\[([1-9][0-9]{0,4})\])?$")
ENDED = ("succeeded", "failed", "cancelled")


def pod_name(client_token: str) -> str:
    """The job's name on the member: the token in lower-case letters, digits and ``-`` (40 at most) and 10 hex digits
    of its SHA-256 (two tokens never share a name once folded), a valid pod name and label value."""
    slug = re.sub(r"[^a-z0-9]+", "-", client_token.lower()).strip("-")[:40].strip("-") or "job"
    return f"{slug}-{hashlib.sha256(client_token.encode()).hexdigest()[:10]}"


def job_ref(namespace: str, name: str, pods: int = 1) -> str:
    return f"{namespace}/{name}" if pods == 1 else f"{namespace}/{name}[{pods}]"


def gpu_shares(num_gpu: int, gpu_milli: int) -> int:
    """``quasched.io/gpu-shares`` of a pod of ``num_gpu`` devices at ``gpu_milli`` each: 100 per whole GPU, a share of
    one in hundredths rounded up (1..99)."""
    if not num_gpu or not gpu_milli:
        return 0
    if gpu_milli >= FULL_GPU_MILLI:
        return num_gpu * SHARES
    return min(SHARES - 1, max(1, math.ceil(gpu_milli * SHARES / FULL_GPU_MILLI)))


def pod_manifests(spec: JobSpec, client_token: str, config: KubeMemberConfig) -> tuple[str, list[dict[str, Any]],
                                                                                      dict[str, Any] | None]:
    """The job's name on the member, its pods and (a gang) its PodGroup (module docstring)."""
    name = pod_name(client_token)
    labels = {JOB_LABEL: name}
    annotations = {TOKEN_ANNOTATION: client_token, NAME_ANNOTATION: spec.name, QUEUE_ANNOTATION: spec.team}
    shares = gpu_shares(spec.num_gpu, spec.gpu_milli)
    if shares and spec.gpu_model:
        annotations[MODEL_ANNOTATION] = spec.gpu_model
    requests = {"cpu": f"{spec.cpu_milli}m", "memory": f"{spec.memory_mib}Mi"}
    resources: dict[str, Any] = {"requests": requests}
    if shares:
        requests[GPU_RESOURCE] = str(shares)
        resources["limits"] = {GPU_RESOURCE: str(shares)}
    container: dict[str, Any] = {"name": CONTAINER, "image": config.image, "resources": resources}
    if spec.command:
        container["command"] = list(spec.command)
    if spec.env:
        container["env"] = [{"name": k, "value": v} for k, v in spec.env]
    if spec.workdir:
        container["workingDir"] = spec.workdir
    pod_spec = {**copy.deepcopy(config.pod_spec), "schedulerName": config.scheduler_name, "restartPolicy": "Never",
                "containers": [container]}
    if spec.time_limit_s is not None:
        pod_spec["activeDeadlineSeconds"] = max(1, math.ceil(spec.time_limit_s))

    def pod(pod_name: str, more_labels: Mapping[str, str], more_annotations: Mapping[str, str]) -> dict[str, Any]:
        meta = {"name": pod_name, "namespace": config.namespace, "labels": {**labels, **more_labels},
                "annotations": {**annotations, **more_annotations}}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(pod_spec)}

    if spec.pods == 1:
        return name, [pod(name, {}, {})], None
    group = {"apiVersion": PODGROUP_API, "kind": "PodGroup",
             "metadata": {"name": name, "namespace": config.namespace, "labels": dict(labels),
                          "annotations": {TOKEN_ANNOTATION: client_token}},
             "spec": {"minMember": spec.pods}}
    return name, [pod(f"{name}-{i}", {GROUP_LABEL: name}, {PODS_ANNOTATION: str(spec.pods)})
                  for i in range(spec.pods)], group


def _time(text: Any) -> float | None:
    """An RFC 3339 time of the API (``2024-05-01T12:00:00Z``) as epoch seconds (None: absent or unreadable)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def pod_state(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The job state of one pod (module docstring): ``state, started_at, finished_at, exit``, and its ``node`` and
    ``reason`` (the kubelet's, when it failed)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    containers = [c for c in status.get("containerStatuses") or [] if isinstance(c, Mapping)]
    main = next((c for c in containers if c.get("name") == CONTAINER), containers[0] if containers else {})
    state = main.get("state") or {}
    ended, running = state.get("terminated") or {}, state.get("running") or {}
    started = _time(ended.get("startedAt")) or _time(running.get("startedAt"))
    if started is None and phase in ("Running", "Succeeded", "Failed"):
        started = _time(status.get("startTime"))
    code = ended.get("exitCode")
    exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
    if phase == "Succeeded":
        kind = "succeeded"
    elif phase == "Failed":
        kind = "failed"
    elif meta.get("deletionTimestamp"):
        kind = "stopping" if phase == "Running" else "cancelled"
    elif phase == "Running" or (phase == "Unknown" and started is not None):  # Unknown: its node stopped reporting
        kind = "running"
    else:
        kind = "pending"
    return {"state": kind, "started_at": None if kind in ("pending", "cancelled") and not ended else started,
            "finished_at": _time(ended.get("finishedAt")) if kind in ENDED else None, "exit": exit_code,
            "node": (pod.get("spec") or {}).get("nodeName") or None,
            "reason": str(status.get("reason") or ended.get("reason") or "")}


GONE = {"state": "cancelled", "started_at": None, "finished_at": None, "exit": None, "node": None, "reason": "deleted"}


def gang_state(pods: Sequence[Mapping[str, Any]], size: int) -> dict[str, Any]:
    """The job state of a gang of ``size`` pods, ``pods`` those still there (module docstring)."""
    states = [pod_state(p) for p in pods] + [dict(GONE)] * max(0, size - len(pods))
    kinds = [s["state"] for s in states]
    if "failed" in kinds:
        kind = "failed"
    elif "cancelled" in kinds:
        kind = "cancelled"
    elif all(k == "succeeded" for k in kinds):
        kind = "succeeded"
    elif "stopping" in kinds:
        kind = "stopping"
    elif all(k in ("running", "succeeded") for k in kinds):
        kind = "running"
    else:
        kind = "pending"
    starts = [s["started_at"] for s in states if s["started_at"] is not None]
    ends = [s["finished_at"] for s in states if s["finished_at"] is not None]
    exits = [s["exit"] for s in states]
    failing = [e for e in exits if e not in (None, 0)]
    return {"state": kind, "started_at": max(starts) if starts and kind != "pending" else None,
            "finished_at": max(ends) if ends and kind in ENDED else None,
            "exit": failing[0] if failing else (0 if exits and all(e == 0 for e in exits) else None),
            "node": None, "reason": next((s["reason"] for s in states if s["state"] == kind and s["reason"]), "")}


def ref_of(pod: Mapping[str, Any]) -> str:
    """The member's name of the job a pod belongs to (the pod's own ``<namespace>/<name>`` if not the front's)."""
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    namespace = str(meta.get("namespace") or "default")
    job = labels.get(JOB_LABEL)
    if isinstance(job, str) and job:
        size = str(annotations.get(PODS_ANNOTATION) or "1")
        return job_ref(namespace, job, int(size) if size.isdigit() and int(size) > 0 else 1)
    return f"{namespace}/{meta.get('name') or ''}"


def tolerated(taint: Mapping[str, Any], tolerations: list[Any]) -> bool:
    """Whether one of ``tolerations`` (a pod spec's) tolerates ``taint`` (Kubernetes' rule)."""
    for t in tolerations:
        if not isinstance(t, Mapping) or (t.get("effect") and t.get("effect") != taint.get("effect")):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and str(t.get("value") or "") == str(taint.get("value") or ""):
            return True
    return False


def node_entries(nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]],
                 tolerations: list[Any] | None = None) -> list[dict[str, Any]]:
    """``nodes`` as ``GET /api/v1/nodes`` entries of ``quasched serve``, with what ``pods`` bound to them take (module
    docstring), by name. A node quasched cannot read (no name, out of range) is left out."""
    on: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for pod in pods:
        if placed_member(pod):
            on[str((pod.get("spec") or {}).get("nodeName"))].append(pod)
    out = []
    for node in sorted(nodes, key=lambda n: str((n.get("metadata") or {}).get("name") or "")):  # a cache's order varies
        try:
            record = node_record(node)
        except PodError:
            continue
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, Mapping)
                  and t.get("effect") in ("NoSchedule", "NoExecute")]
        untolerated = any(not tolerated(t, tolerations or []) for t in taints)
        used, cpu, memory, jobs = [0] * record.num_gpus, 0, 0, set()
        for pod in on.get(record.name, []):
            try:
                cpu += int(pod_request(pod, "cpu", milli))
                memory += int(pod_request(pod, "memory", mebibytes))
                num_gpu, per_device = gpu_request(pod)
            except PodError:
                num_gpu, per_device = 0, 0
            for device in (devices_of(pod) or ()) if num_gpu else ():
                if device < record.num_gpus:
                    used[device] += per_device
            jobs.add(ref_of(pod))
        out.append({"name": record.name, "gpu_model": record.gpu_model, "num_gpus": record.num_gpus,
                    "cordoned": record.cordoned or untolerated, "gpu_used_milli": used,
                    "gpu_healthy": [True] * record.num_gpus, "cpu_milli": record.cpu_milli, "cpu_used_milli": cpu,
                    "memory_mib": record.memory_mib, "memory_used_mib": memory, "jobs": sorted(jobs)})
    return out


class KubeMember:
    """A Kubernetes member (module docstring), through quasched's API-server client
    (:class:`~quasched.kube.client.KubernetesClient`, or ``client``: anything with its ``request``)."""

    def __init__(self, config: KubeMemberConfig, client: Any = None) -> None:
        self.config = config
        self.api = client if client is not None else self._connect()

    def _connect(self) -> Any:
        from quasched.extras import MissingExtra
        from quasched.kube.client import KubernetesClient

        where = f"member {self.name}: kubeconfig {self.config.kubeconfig}"
        if not self.config.kubeconfig.is_file():
            raise ValueError(f"{where}: no such file")
        try:
            return KubernetesClient(str(self.config.kubeconfig), self.config.context or None)
        except MissingExtra as err:
            raise ValueError(f"member {self.name}: {err}") from None
        except Exception as err:  # the kubernetes client's ConfigException, a YAML error, an unknown context
            raise ValueError(f"{where}: {type(err).__name__}: {err}") from None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def pods_path(self) -> str:
        return f"/api/v1/namespaces/{self.config.namespace}/pods"

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None,
              params: Mapping[str, str] | None = None, passing: tuple[int, ...] = ()) -> dict[str, Any]:
        """One API call; :class:`MemberError` unless it succeeded (or the server answered a status in ``passing``:
        its :class:`ApiError`)."""
        try:
            return dict(self.api.request(method, path, body, params, CALL_TIMEOUT_S))
        except ApiError as err:
            if err.status in passing:
                raise
            raise MemberError(f"member {self.name}: {method} {path}: HTTP {err}", delivered=err.status >= 500) \
                from None
        except (httpx.HTTPError, OSError, ValueError, TypeError) as err:  # a refused connection surely did nothing
            raise MemberError(f"member {self.name}: {method} {path}: {type(err).__name__}: {err}",
                              delivered=not isinstance(err, (httpx.ConnectError, ConnectionRefusedError))) from None

    def _items(self, path: str, params: Mapping[str, str]) -> list[dict[str, Any]]:
        items = self._call("GET", path, params=params).get("items")
        if not isinstance(items, list):
            raise MemberError(f"member {self.name}: GET {path}: not a list")
        return [i for i in items if isinstance(i, dict)]

    def nodes(self) -> list[dict[str, Any]]:
        """The member's nodes and the use of the pods bound to them (every namespace's), from the API server's cache
        (``resourceVersion=0``)."""
        nodes = self._items("/api/v1/nodes", {"resourceVersion": "0"})
        pods = self._items("/api/v1/pods", {"resourceVersion": "0", "fieldSelector":
                                            "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"})
        return node_entries(nodes, pods, self.config.pod_spec.get("tolerations") or [])

    def submit(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create the pods of the job of ``body`` (the front's job fields with its ``client_token``); a repeat finds
        those it created. ``{"id": <its name on the member>, "state": ...}``."""
        try:
            spec = JobSubmit.model_validate(body).to_spec()
        except ValidationError as err:
            first = err.errors()[0]
            raise MemberError(f"member {self.name}: submit: {'.'.join(map(str, first['loc']))}: {first['msg']}",
                              delivered=False) from None
        if not spec.client_token:
            raise MemberError(f"member {self.name}: submit: a job needs a client_token (its pod's name)",
                              delivered=False)
        name, pods, group = pod_manifests(spec, spec.client_token, self.config)
        if group is not None:
            self._create(f"/apis/{PODGROUP_API}/namespaces/{self.config.namespace}/podgroups", group,
                         spec.client_token)
        made = [self._create(self.pods_path, pod, spec.client_token) for pod in pods]
        state = pod_state(made[0]) if group is None else gang_state(made, spec.pods)
        return {**state, "id": job_ref(self.config.namespace, name, spec.pods)}

    def _create(self, path: str, obj: dict[str, Any], token: str) -> dict[str, Any]:
        """Create ``obj``; if it exists (409), the one there, if it carries ``token``."""
        try:
            return self._call("POST", path, obj, passing=(409,))
        except ApiError:
            name = obj["metadata"]["name"]
            found = self._call("GET", f"{path}/{name}")
            theirs = ((found.get("metadata") or {}).get("annotations") or {}).get(TOKEN_ANNOTATION)
            if theirs != token:
                raise MemberError(f"member {self.name}: {obj['kind']} {self.config.namespace}/{name} exists and is "
                                  f"not the front's job {token!r} (its client token: {theirs!r})",
                                  delivered=False) from None
            return found

    def _ref(self, remote: str) -> tuple[str, int]:
        found = REF.fullmatch(remote)
        if found is None or found.group(1) != self.config.namespace:
            raise MemberError(f"member {self.name}: {remote!r} is not one of its jobs "
                              f"({self.config.namespace}/<name> or {self.config.namespace}/<name>[<pods>])")
        return found.group(2), int(found.group(3) or 1)

    def _pods(self, name: str, size: int) -> list[dict[str, Any]] | None:
        """The job's pods (None: a single pod that is gone)."""
        if size == 1:
            try:
                return [self._call("GET", f"{self.pods_path}/{name}", passing=(404,))]
            except ApiError:
                return None
        return self._items(self.pods_path, {"labelSelector": f"{JOB_LABEL}={name}"})

    def job(self, remote: str) -> dict[str, Any]:
        """The state of the member's job ``remote`` (its name, as :meth:`submit` answered it)."""
        name, size = self._ref(remote)
        pods = self._pods(name, size)
        if pods is None:
            return dict(GONE)
        return pod_state(pods[0]) if size == 1 else gang_state(pods, size)

    def cancel(self, remote: str) -> dict[str, Any]:
        """Delete the job's pods (each with its grace period; a gang's PodGroup too); a job that ended is left as it
        is and its state answered."""
        name, size = self._ref(remote)
        pods = self._pods(name, size)
        now = dict(GONE) if pods is None else pod_state(pods[0]) if size == 1 else gang_state(pods, size)
        if now["state"] in ENDED:
            return now
        for pod in pods or []:
            try:
                self._call("DELETE", f"{self.pods_path}/{pod['metadata']['name']}", passing=(404,))
            except ApiError:
                pass
        if size > 1:
            try:
                self._call("DELETE", f"/apis/{PODGROUP_API}/namespaces/{self.config.namespace}/podgroups/{name}",
                           passing=(404,))
            except ApiError:
                pass
        return {**now, "state": "stopping" if now["state"] in ("running", "stopping") else "cancelled",
                "finished_at": None}

    def logs(self, remote: str, tail: int) -> str:
        """The first pod's log (a gang's: its first member's), its last ``tail`` lines."""
        name, size = self._ref(remote)
        pods = self._pods(name, size)
        if not pods:
            raise MemberError(f"member {self.name}: job {remote} has no pod left", delivered=False)
        try:
            return str(self.api.pod_log(self.config.namespace, pods[0]["metadata"]["name"], tail, CALL_TIMEOUT_S))
        except ApiError as err:
            raise MemberError(f"member {self.name}: logs of {remote}: HTTP {err}", delivered=False) from None
        except httpx.HTTPError as err:
            raise MemberError(f"member {self.name}: logs of {remote}: {type(err).__name__}: {err}") from None

    def close(self) -> None:
        for closing in (getattr(self.api, "http", None), getattr(self.api, "bindings", None)):
            close = getattr(closing, "close", None) or getattr(closing, "clear", None)
            if close is not None:
                close()
