"""How a Kubernetes pod asks quasched for GPUs, and how a node offers them (docs/kubernetes.md).

Pure functions over the JSON of ``v1.Pod`` and ``v1.Node`` objects (plain dicts,
as the API server and kube-scheduler send them), so they are tested on recorded
fixtures with no cluster:

- GPUs: the extended resource ``quasched.io/gpu-shares`` (100 shares = one GPU) in one container's
  ``resources.limits`` (or ``requests``): 1..99 is a share of one device, 100·N is N whole devices;
  quasched's device plugin advertises 100 shares per GPU, so the kubelet's count agrees;
- GPU model: the node label ``quasched.io/gpu-model``, else ``nvidia.com/gpu.product``; a pod
  restricts it with the annotation ``quasched.io/gpu-model: "A100|H100"``, a ``nodeSelector`` or a
  required ``nodeAffinity`` (``In``) on either label (all that are given must agree);
- bind's record for the device plugin: annotations ``quasched.io/gpu-devices`` (device indices),
  ``quasched.io/assume-time`` (ns) and ``quasched.io/assigned`` (``false`` until the plugin's Allocate);
- queue: the annotation ``quasched.io/queue`` (default ``default``); priority: ``spec.priority``, which the API
  server sets from the pod's PriorityClass (0 without one); grace: ``spec.terminationGracePeriodSeconds`` (30);
- CPU and memory: the containers' requests (limits when a request is absent), in the usual
  quantities (``500m``, ``2``, ``16Gi``, ``1G``, ``1e3``).

A pod without a GPU request is not managed by quasched (the extender passes it through). A pod
asking for ``nvidia.com/gpu``, or carrying an old share annotation (``gpu-fraction``) or a
``quasched.io/`` annotation quasched does not know, is refused with a reason naming the field.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from collections.abc import Mapping  # (isinstance on typing's alias is several times slower)
from typing import Any

from quasched.model.nodes import MAX_NODE_GPUS
from quasched.service.domain import JobSpec, NodeRecord

GPU_RESOURCE = "quasched.io/gpu-shares"
#: shares of one GPU
SHARES = 100
MODEL_ANNOTATION = "quasched.io/gpu-model"
QUEUE_ANNOTATION = "quasched.io/queue"
DEVICES_ANNOTATION = "quasched.io/gpu-devices"
ASSUME_TIME_ANNOTATION = "quasched.io/assume-time"
ASSIGNED_ANNOTATION = "quasched.io/assigned"
#: written on the members held for a pod group, so kube-scheduler retries them at once (a pod update requeues it)
GANG_HOLD_ANNOTATION = "quasched.io/gang-hold"
#: written on a preemptor when its victims are gone (the room held for it), so kube-scheduler retries it at once
PREEMPTION_ANNOTATION = "quasched.io/preemption"
KNOWN_ANNOTATIONS = frozenset({MODEL_ANNOTATION, QUEUE_ANNOTATION, DEVICES_ANNOTATION, ASSUME_TIME_ANNOTATION,
                               ASSIGNED_ANNOTATION, GANG_HOLD_ANNOTATION, PREEMPTION_ANNOTATION})
#: GPU requests of other conventions, refused with a reason rather than read as something else
FOREIGN_RESOURCE = "nvidia.com/gpu"
FOREIGN_ANNOTATIONS = ("gpu-fraction", "gpu-memory", "nvidia.com/gpu-fraction")
#: node labels naming the GPU model, first found wins
MODEL_LABELS = ("quasched.io/gpu-model", "nvidia.com/gpu.product")
DEFAULT_QUEUE = "default"
#: client_token prefix of the jobs that stand for Kubernetes pods: ``k8s:<pod uid>:<attempt>``
TOKEN_PREFIX = "k8s:"
MILLI = 1000
#: largest whole-GPU request and CPU (milli) / memory (MiB) amount read from a pod
MAX_GPUS = 1024
MAX_AMOUNT = 1 << 50
MIB = 1 << 20

_SUFFIX = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}


class PodError(ValueError):
    """A pod whose GPU request quasched cannot read (the message names the field)."""


def quantity(value: Any) -> Decimal:
    """A Kubernetes quantity (``500m``, ``2``, ``16Gi``, ``1G``, ``1.5``, ``1e3``) as a Decimal."""
    if isinstance(value, bool):
        raise PodError(f"not a quantity: {value!r}")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise PodError(f"not a quantity: {value!r}")
        return Decimal(str(value))
    if not isinstance(value, str) or not value.strip():
        raise PodError(f"not a quantity: {value!r}")
    text = value.strip()
    for suffix in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"):
        if text.endswith(suffix):
            number, scale = text[: -len(suffix)], _SUFFIX[suffix]
            break
    else:
        number, scale = text, Decimal(1)
    try:
        amount = Decimal(number)
    except InvalidOperation:
        raise PodError(f"not a quantity: {value!r}") from None
    if not amount.is_finite() or amount < 0:
        raise PodError(f"not a quantity: {value!r}")
    return amount * scale


def milli(value: Any) -> int:
    """A quantity in thousandths, rounded up (CPU ``500m`` → 500, ``2`` → 2000)."""
    return int(math.ceil(quantity(value) * MILLI))


def mebibytes(value: Any) -> int:
    """A byte quantity in MiB, rounded up (``16Gi`` → 16384, ``1G`` → 954)."""
    return int(math.ceil(quantity(value) / MIB))


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _containers(pod: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    items = _get(pod, "spec", kind)
    return [c for c in items if isinstance(c, Mapping)] if isinstance(items, list) else []


def _amount(container: Mapping[str, Any], resource: str, convert: Any, prefer: str) -> Any:
    """A container's request of ``resource`` (``prefer`` = requests or limits first, then the other)."""
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        return 0
    other = "limits" if prefer == "requests" else "requests"
    for kind in (prefer, other):
        values = resources.get(kind) or {}
        if isinstance(values, Mapping) and values.get(resource) is not None:
            try:
                return convert(values[resource])
            except PodError as err:
                raise PodError(f"{container.get('name', '?')}: resources.{kind}.{resource}: {err}") from None
    return 0


def pod_request(pod: Mapping[str, Any], resource: str, convert: Any = milli, prefer: str = "requests") -> Any:
    """Kubernetes' effective request: max(sum over containers, largest init container)."""
    total = sum(_amount(c, resource, convert, prefer) for c in _containers(pod, "containers"))
    init = max((_amount(c, resource, convert, prefer) for c in _containers(pod, "initContainers")), default=0)
    return max(total, init)


def shares_of(pod: Mapping[str, Any]) -> Decimal:
    """The ``quasched.io/gpu-shares`` the pod asks for (limits first, the extended-resource convention)."""
    return Decimal(pod_request(pod, GPU_RESOURCE, quantity, prefer="limits"))


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    annotations = _get(pod, "metadata", "annotations") or {}
    return annotations if isinstance(annotations, Mapping) else {}


def _names_resource(pod: Mapping[str, Any], resource: str) -> bool:
    for kind in ("containers", "initContainers"):
        for c in _containers(pod, kind):
            for part in ("limits", "requests"):
                values = _get(c, "resources", part)
                if isinstance(values, Mapping) and resource in values:
                    return True
    return False


def is_managed(pod: Mapping[str, Any]) -> bool:
    """Whether quasched owns this pod's GPU placement: it asks for ``quasched.io/gpu-shares``, or for GPUs
    in a convention quasched refuses (``nvidia.com/gpu``, an old share annotation), so the reason is told."""
    if _names_resource(pod, GPU_RESOURCE) or _names_resource(pod, FOREIGN_RESOURCE):
        return True
    return any(key in _annotations(pod) for key in FOREIGN_ANNOTATIONS)


def pod_key(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(namespace, name, uid)``."""
    meta = pod.get("metadata") or {}
    return (str(meta.get("namespace") or "default"), str(meta.get("name") or ""), str(meta.get("uid") or ""))


def gpu_request(pod: Mapping[str, Any]) -> tuple[int, int]:
    """``(num_gpu, gpu_milli)`` of the pod's ``quasched.io/gpu-shares``; :class:`PodError` names what is wrong."""
    annotations = _annotations(pod)
    for key in annotations:
        if key in FOREIGN_ANNOTATIONS or (str(key).startswith("quasched.io/") and key not in KNOWN_ANNOTATIONS):
            raise PodError(f"annotation {key} is not read: ask {GPU_RESOURCE} ({SHARES} = one GPU, 50 = half of one)")
    if _names_resource(pod, FOREIGN_RESOURCE):
        raise PodError(f"{FOREIGN_RESOURCE} is not offered: ask {GPU_RESOURCE} ({SHARES} = one GPU)")
    asking = [c for kind in ("containers", "initContainers") for c in _containers(pod, kind)
              if _amount(c, GPU_RESOURCE, quantity, "limits")]
    if len(asking) > 1:
        raise PodError(f"{GPU_RESOURCE}: only one container may ask for GPUs, {len(asking)} do")
    shares = shares_of(pod)
    if shares != shares.to_integral_value() or not 0 <= shares <= MAX_GPUS * SHARES or (
            shares > SHARES and shares % SHARES):
        raise PodError(f"{GPU_RESOURCE}: 1..{SHARES - 1} (a share of one GPU) or a multiple of {SHARES} "
                       f"(whole GPUs, up to {MAX_GPUS}), got {shares}")
    if shares >= SHARES:
        return int(shares) // SHARES, MILLI
    return (1, int(shares) * MILLI // SHARES) if shares else (0, 0)


def _affinity_models(pod: Mapping[str, Any]) -> set[str] | None:
    """The GPU models a required nodeAffinity allows (None: it does not restrict them). Terms are ORed: every
    term must name the model label with ``In`` for the affinity to restrict the model."""
    terms = _get(pod, "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                 "nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        return None
    allowed: set[str] = set()
    for term in terms:
        exprs = _get(term, "matchExpressions")
        values = [set(map(str, e.get("values") or [])) for e in exprs or [] if isinstance(e, Mapping)
                  and e.get("key") in MODEL_LABELS and e.get("operator") == "In"] if isinstance(exprs, list) else []
        if not values:
            return None
        allowed |= set.intersection(*values)
    return allowed


def pod_models(pod: Mapping[str, Any]) -> str:
    """The pod's GPU-model constraint ``A|B`` (empty: any), from the annotation, the ``nodeSelector`` and a
    required nodeAffinity; where several are given, the models all of them allow."""
    wanted: list[set[str]] = []
    model = str(_annotations(pod).get(MODEL_ANNOTATION) or "").strip()
    if model:
        wanted.append({m.strip() for m in model.split("|") if m.strip()})
    selector = _get(pod, "spec", "nodeSelector") or {}
    if isinstance(selector, Mapping):
        wanted += [{str(selector[k])} for k in MODEL_LABELS if selector.get(k)]
    affinity = _affinity_models(pod)
    if affinity is not None:
        wanted.append(affinity)
    if not wanted:
        return ""
    common = set.intersection(*wanted)
    if not common:
        raise PodError(f"{MODEL_ANNOTATION}, nodeSelector and nodeAffinity allow no GPU model in common")
    return "|".join(sorted(common))


@dataclass(frozen=True)
class PodGpu:
    """What a pod asks quasched for."""

    num_gpu: int
    gpu_milli: int
    gpu_model: str
    cpu_milli: int
    memory_mib: int
    queue: str


def pod_gpu(pod: Mapping[str, Any]) -> PodGpu:
    """Read the pod's GPU, model, queue, CPU and memory request; :class:`PodError` names what is wrong."""
    if not isinstance(pod, Mapping):
        raise PodError("pod: not an object")
    num_gpu, gpu_milli = gpu_request(pod)
    model = pod_models(pod) if num_gpu else ""
    queue = str(_annotations(pod).get(QUEUE_ANNOTATION) or DEFAULT_QUEUE)
    cpu, memory = pod_request(pod, "cpu", milli), pod_request(pod, "memory", mebibytes)
    if cpu > MAX_AMOUNT or memory > MAX_AMOUNT:
        raise PodError("cpu or memory request out of range")
    return PodGpu(num_gpu, gpu_milli, model, int(cpu), int(memory), queue[:128])


def job_spec(pod: Mapping[str, Any], attempt: str = "0") -> JobSpec:
    """The quasched job standing for ``pod`` (one pod, no duration: Kubernetes reports its end)."""
    want = pod_gpu(pod)
    namespace, name, uid = pod_key(pod)
    return JobSpec(name=f"{namespace}/{name}"[:256], team=want.queue, cpu_milli=want.cpu_milli,
                   memory_mib=want.memory_mib, num_gpu=want.num_gpu, gpu_milli=want.gpu_milli,
                   gpu_model=want.gpu_model, user=namespace[:128], client_token=pod_token(uid, attempt))


#: kube's default ``terminationGracePeriodSeconds``
DEFAULT_GRACE_S = 30.0


def _whole(value: Any) -> int | None:
    """A JSON integer of int32's range (None for anything else: a bool, a float, a string, out of range)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 1 << 31 else None


def pod_priority(pod: Mapping[str, Any]) -> int:
    """The pod's priority (``spec.priority``, resolved by the API server from its PriorityClass; 0 if none)."""
    return _whole(_get(pod, "spec", "priority")) or 0


def pod_grace(pod: Mapping[str, Any]) -> float:
    """The seconds the kubelet gives the pod's containers between SIGTERM and SIGKILL."""
    grace = _whole(_get(pod, "spec", "terminationGracePeriodSeconds"))
    return float(grace) if grace is not None and grace >= 0 else DEFAULT_GRACE_S


def pod_token(uid: str, attempt: str) -> str:
    """The ``client_token`` of the job standing for pod ``uid`` (its ``attempt``: a bind's own)."""
    return f"{TOKEN_PREFIX}{uid}:{attempt}"


def token_uid(client_token: str | None) -> str | None:
    """The pod uid of a Kubernetes job's client_token (None for other jobs)."""
    if not client_token or not client_token.startswith(TOKEN_PREFIX):
        return None
    return client_token[len(TOKEN_PREFIX):].rsplit(":", 1)[0]


def devices_of(pod: Mapping[str, Any]) -> tuple[int, ...] | None:
    """The devices in the pod's ``quasched.io/gpu-devices`` annotation (None: absent or unreadable)."""
    text = _get(pod, "metadata", "annotations", DEVICES_ANNOTATION)
    if not isinstance(text, str):
        return None
    try:
        devices = tuple(int(d) for d in text.split(",") if d.strip())
    except ValueError:
        return None
    return devices if devices and all(d >= 0 for d in devices) else None


def devices_text(devices: tuple[int, ...]) -> str:
    """Device indices as the annotation value ``0,3``."""
    return ",".join(str(d) for d in devices)


def bind_annotations(devices: tuple[int, ...], now_ns: int | None = None) -> dict[str, str]:
    """What bind's Binding writes on the pod with ``spec.nodeName``, for the device plugin's Allocate: the devices,
    when they were assumed (ns) and ``assigned: "false"`` (the plugin sets ``"true"`` once it hands them out)."""
    return {DEVICES_ANNOTATION: devices_text(devices),
            ASSUME_TIME_ANNOTATION: str(time.time_ns() if now_ns is None else now_ns),
            ASSIGNED_ANNOTATION: "false"}


# ---------------------------------------------------------------- nodes
def node_model(labels: Mapping[str, Any]) -> str:
    """A node's GPU model from the first set label of :data:`MODEL_LABELS` (empty if none)."""
    return next((str(labels[k]) for k in MODEL_LABELS if labels.get(k)), "")


def node_record(node: Mapping[str, Any]) -> NodeRecord:
    """A Kubernetes node as quasched registers it: allocatable CPU and memory, GPUs = the capacity of
    ``quasched.io/gpu-shares`` / 100 (what the device plugin advertises, unhealthy devices included: they keep
    their index), GPU model from its labels, cordoned when ``spec.unschedulable`` or its Ready condition is not True."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name") or "")
    if not name:
        raise PodError("node: metadata.name missing")
    status = node.get("status") or {}
    offered = status.get("allocatable") or status.get("capacity") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    try:
        cpu = milli(offered.get("cpu", 0))
        memory = int(quantity(offered.get("memory", 0)) / MIB)
        shares = (status.get("capacity") or offered).get(GPU_RESOURCE, 0)
        gpus = int(quantity(shares) // SHARES)
    except PodError as err:
        raise PodError(f"node {name}: {err}") from None
    if gpus > MAX_NODE_GPUS or cpu > MAX_AMOUNT or memory > MAX_AMOUNT:
        raise PodError(f"node {name}: more than {MAX_NODE_GPUS} GPUs, or CPU or memory out of range")
    ready = next((c.get("status") for c in status.get("conditions") or [] if isinstance(c, Mapping)
                  and c.get("type") == "Ready"), None)
    cordoned = bool(_get(node, "spec", "unschedulable")) or ready not in (None, "True")
    return NodeRecord(name, cpu, memory, gpus, node_model(labels) if gpus else "", labels, cordoned)
