"""What an ``Allocate`` call is for. The kubelet sends share IDs it picked, not the pod: the pod is the
oldest one on this node that quasched's bind marked ``quasched.io/assigned: "false"`` and whose
``quasched.io/gpu-shares`` equals the number of IDs (the kubelet admits one pod at a time); its
``quasched.io/gpu-devices`` say which GPUs it gets, whatever IDs the kubelet picked."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from quasched.kube.convention import (ASSIGNED_ANNOTATION, ASSUME_TIME_ANNOTATION, DEVICES_ANNOTATION, SHARES,
                                      PodError, devices_of, pod_key, shares_of)
from quasched.kube.deviceplugin.gpus import NodeGpus


class AllocateError(RuntimeError):
    """No pod, or no valid devices, for an Allocate: the kubelet fails the pod's admission with this message."""


def _assume_time(pod: Mapping[str, Any]) -> int | None:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(ASSUME_TIME_ANNOTATION)
    try:
        return int(str(text))
    except ValueError:
        return None


def waiting(pod: Mapping[str, Any], shares: int) -> bool:
    """Whether ``pod`` is bound, not yet given its devices, alive, and asks for ``shares``."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if annotations.get(ASSIGNED_ANNOTATION) != "false" or _assume_time(pod) is None:
        return False
    if (pod.get("metadata") or {}).get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in (
            "Succeeded", "Failed"):
        return False
    try:
        return shares_of(pod) == shares
    except PodError:
        return False


def resolve(pods: Iterable[Mapping[str, Any]], shares: int) -> Mapping[str, Any]:
    """The oldest assumed, unassigned pod asking for ``shares`` (:class:`AllocateError` if there is none)."""
    candidates = sorted((p for p in pods if waiting(p, shares)), key=lambda p: (_assume_time(p), pod_key(p)))
    if not candidates:
        raise AllocateError(f"no pod on this node waits for {shares} {'share' if shares == 1 else 'shares'} "
                            f"(bound by quasched with {ASSIGNED_ANNOTATION}: \"false\"): was it bound by "
                            "another scheduler, or its annotations removed?")
    return candidates[0]


def container_env(pod: Mapping[str, Any], gpus: NodeGpus) -> dict[str, str]:
    """The environment of the pod's GPU container: the UUIDs of exactly the booked GPUs, and for a share
    of one GPU its size (MPS thread percentage, a memory limit when the GPU's memory is known)."""
    devices = devices_of(pod)
    namespace, name, _ = pod_key(pod)
    if devices is None:
        raise AllocateError(f"pod {namespace}/{name}: annotation {DEVICES_ANNOTATION} absent or unreadable")
    if max(devices) >= len(gpus.uuids):
        raise AllocateError(f"pod {namespace}/{name}: {DEVICES_ANNOTATION} names device {max(devices)}, "
                            f"this node has {len(gpus.uuids)} GPU{'s' * (len(gpus.uuids) != 1)}")
    shares = int(shares_of(pod))
    if (len(devices) != max(1, shares // SHARES)):
        raise AllocateError(f"pod {namespace}/{name}: {DEVICES_ANNOTATION} names {len(devices)} devices "
                            f"for {shares} shares")
    visible = ",".join(gpus.uuids[d] for d in devices)
    env = {"NVIDIA_VISIBLE_DEVICES": visible, "CUDA_VISIBLE_DEVICES": visible, "QUASCHED_GPU_SHARES": str(shares)}
    if shares < SHARES:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(shares)
        if gpus.memory_mib:
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={gpus.memory_mib * shares // SHARES}M"
    return env
