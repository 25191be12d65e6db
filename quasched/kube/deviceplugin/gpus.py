"""The node's GPUs as the device plugin advertises them: :data:`~quasched.kube.convention.SHARES` device IDs
``<gpu uuid>-<k>`` per GPU, healthy or not per GPU.

The GPUs come from NVML (``nvidia-ml-py``, imported lazily, extra ``gpu``) when there is one, in NVML's index
order, which is the order of quasched's device indices in ``quasched.io/gpu-devices``; without NVML, from
``--fake-gpus N`` (UUIDs derived from the node name, for tests and nodes without a driver)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from quasched.kube.convention import SHARES
from quasched.service.executor.localnode import nvml_devices


@dataclass(frozen=True)
class NodeGpus:
    """A node's GPUs in device-index order, their model and memory (0: unknown)."""

    uuids: tuple[str, ...]
    model: str
    memory_mib: int = 0


def fake_gpus(node: str, count: int, model: str, memory_mib: int = 0) -> NodeGpus:
    """``count`` GPUs with stable UUIDs ``GPU-<uuid5(node, index)>`` (the same on every start)."""
    ids = tuple(f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{i}.{node}.fake.quasched.io')}" for i in range(count))
    return NodeGpus(ids, model, memory_mib)


def discover(node: str, fake: int = 0, model: str = "", memory_mib: int = 0) -> NodeGpus:
    """``fake`` fake GPUs when asked for, else NVML's; ValueError when neither gives one."""
    if fake:
        return fake_gpus(node, fake, model or "fake", memory_mib)
    devices = nvml_devices()
    if devices is None:
        raise ValueError("no GPU found through NVML (no driver, no device, or nvidia-ml-py not installed); "
                         "use --fake-gpus N to advertise fake ones")
    return NodeGpus(devices.uuids, model or devices.model, memory_mib or devices.memory_mib)


def device_ids(gpu_uuid: str) -> list[str]:
    """The share IDs of one GPU."""
    return [f"{gpu_uuid}-{k}" for k in range(SHARES)]
