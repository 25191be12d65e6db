"""This machine as a node of the service: which node it is (``--local-node``), its GPUs from NVML
(model, memory, count, UUIDs; ``nvidia-ml-py``, imported lazily, extra ``gpu``) and their health.

Without NVML (no GPU here, no driver, the package not installed) the node comes from the cluster
file and the executor names devices by index. :class:`HealthWatch` turns NVML's critical XID
events and a device that fell off the bus (``NVML_ERROR_GPU_IS_LOST``) into an unhealthy device in
the cluster model, so the health-aware policy and the dashboard see it.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Callable, Sequence

from quasched.service.domain import NodeRecord
from quasched.service.executor.commands import GPU_MEMORY_LABEL, LocalGpus, gpus_of_labels

#: XIDs caused by the application, not the device (as NVIDIA's Kubernetes device plugin skips them)
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
#: seconds between checks that every device still answers
HEALTH_POLL_S = 5.0


@dataclass(frozen=True)
class NvmlDevices:
    """This machine's GPUs as NVML reports them."""
    model: str
    memory_mib: int
    uuids: tuple[str, ...]


def this_node(names: Sequence[str], wanted: str | None) -> str | None:
    """The node that is this machine: ``wanted`` if given (it must exist), else the node named like the host
    name (or its short form), else the only node; None when none of those applies."""
    if wanted:
        if wanted not in names:
            raise ValueError(f"--local-node {wanted!r}: no such node (nodes: {', '.join(list(names)[:10])})")
        return wanted
    host = socket.gethostname()
    for candidate in (host, host.split(".")[0]):
        if candidate in names:
            return candidate
    return names[0] if len(names) == 1 else None


def local_nvml() -> Any | None:
    """The initialised ``pynvml`` module, or None without the package, the library or a device."""
    try:
        nvml = import_module("pynvml")
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
        return nvml if nvml.nvmlDeviceGetCount() > 0 else None
    except nvml.NVMLError:
        return None


def model_name(nvml_name: str | bytes) -> str:
    """A cluster-file GPU model name of NVML's device name: ``NVIDIA A100-SXM4-80GB`` -> ``A100-SXM4-80GB``."""
    text = nvml_name.decode() if isinstance(nvml_name, bytes) else nvml_name
    text = text.removeprefix("NVIDIA ").strip()
    return "".join(ch if ch.isalnum() or ch in "_.-" else "-" for ch in text) or "GPU"


def nvml_devices() -> NvmlDevices | None:
    """This machine's GPUs from NVML (None without NVML)."""
    nvml = local_nvml()
    if nvml is None:
        return None
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    uuids = tuple(str(_text(nvml.nvmlDeviceGetUUID(h))) for h in handles)
    memory = min(int(nvml.nvmlDeviceGetMemoryInfo(h).total) >> 20 for h in handles)
    return NvmlDevices(model_name(nvml.nvmlDeviceGetName(handles[0])), memory, uuids)


def nvml_record(name: str) -> NodeRecord | None:
    """This machine as a node named ``name``: CPU cores, memory and NVML's GPUs (None without NVML)."""
    devices = nvml_devices()
    if devices is None:
        return None
    memory_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20
    return NodeRecord(name, 1000 * (os.cpu_count() or 1), memory_mib, len(devices.uuids), devices.model,
                      {GPU_MEMORY_LABEL: f"{devices.memory_mib}Mi"})


def local_gpus(record: NodeRecord) -> LocalGpus:
    """What the executor names devices by: NVML's UUIDs and memory when they match the node, else its labels."""
    devices = nvml_devices()
    if devices is not None and len(devices.uuids) == record.num_gpus:
        return LocalGpus(devices.uuids, devices.memory_mib)
    if devices is not None:
        print(f"quasched: node {record.name} has {record.num_gpus} GPU{'s' * (record.num_gpus != 1)} registered but NVML sees "
              f"{len(devices.uuids)}; devices are named by index", file=sys.stderr)
    return gpus_of_labels(record.labels)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class HealthWatch:
    """Watches this machine's GPUs with NVML and calls ``mark(device, healthy)`` when one fails: a critical
    XID that is not the application's, or a device that no longer answers (fallen off the bus)."""

    def __init__(self, mark: Callable[[int, bool], None]) -> None:
        self.mark = mark
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failed: set[int] = set()

    def start(self) -> bool:
        """Start watching; False without NVML."""
        nvml = local_nvml()
        if nvml is None:
            return False
        self._thread = threading.Thread(target=self._run, args=(nvml,), name="quasched-gpu-health", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=HEALTH_POLL_S + 2)
            self._thread = None

    def _fail(self, device: int) -> None:
        if device not in self.failed:
            self.failed.add(device)
            self.mark(device, False)

    def _run(self, nvml: Any) -> None:
        count = nvml.nvmlDeviceGetCount()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
        events = nvml.nvmlEventSetCreate()
        for h in handles:
            try:
                nvml.nvmlDeviceRegisterEvents(h, nvml.nvmlEventTypeXidCriticalError, events)
            except nvml.NVMLError:  # not supported on this device: the poll still sees it fall off the bus
                pass
        while not self._stop.is_set():
            self.check(nvml, handles, uuids, events)

    def check(self, nvml: Any, handles: list[Any], uuids: list[str], events: Any) -> None:
        """One round: wait up to :data:`HEALTH_POLL_S` for an XID event, then ask every device for its UUID."""
        try:
            data = nvml.nvmlEventSetWait_v2(events, int(HEALTH_POLL_S * 1000))
            if data.eventData not in APPLICATION_XIDS:
                self._fail(uuids.index(_text(nvml.nvmlDeviceGetUUID(data.device))))
        except nvml.NVMLError:  # a timeout, or a device that cannot say which it is (checked below)
            pass
        for i, h in enumerate(handles):
            try:
                nvml.nvmlDeviceGetUUID(h)
            except nvml.NVMLError_GpuIsLost:
                self._fail(i)
            except nvml.NVMLError:
                pass
