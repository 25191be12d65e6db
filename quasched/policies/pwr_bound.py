"""The least linear-model power any placement of a given demand can draw: a floor for power-aware placement.

Under the linear model (:mod:`quasched.metrics.power`) a node draws its idle power plus
``(full − idle)`` × the allocated share of each GPU, and ``(full − idle) / cores_per_socket``
× its working cores, with working cores ``= cores − ⌊free vCPU / 2⌋ ≥ allocated vCPU / 2``.
So with ``U`` GPU milli and ``K`` CPU milli allocated, every placement draws at least::

    P_floor(U, K) = P_idle + (full_cpu − idle_cpu) · K / (2000 · cores_per_socket) + fill(U)

``fill(U)``: the cluster's GPUs filled cheapest swing ``full − idle`` first, as if any GPU milli
could go anywhere (a relaxation: pod sizes, CPU, memory and GPU-model constraints are
ignored), so the floor is valid but not always reachable. The *reachable* floor first pins the
milli of pods that only one GPU model can hold (8 GPUs with 120 cores: only G3's 128-core nodes)
to that model. Step-model power has no such simple floor (a GPU share draws a whole TDP), so this
bounds the linear-model saving only.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from quasched.metrics.power import MILLI_PER_VCPU, PWR_MODEL, VCPUS_PER_CORE, PowerModel, cpu_power_w
from quasched.model.nodes import NodeSpec, accessible
from quasched.model.workload import FULL_GPU_MILLI, Workload


def gpus_per_model(nodes: NodeSpec) -> tuple[list[str], np.ndarray]:
    """The GPU models (sorted names) and how many GPUs of each the cluster has."""
    names = sorted(set(nodes.gpu_model))
    node_model = np.array([names.index(m) for m in nodes.gpu_model], dtype=np.int64)
    return names, np.bincount(node_model, np.asarray(nodes.num_gpus, dtype=float), len(names))


def floor_fill(nodes: NodeSpec, gpu_milli: np.ndarray, model: PowerModel = PWR_MODEL,
               pinned: Mapping[str, np.ndarray] | None = None) -> tuple[list[str], np.ndarray]:
    """The GPU models (sorted names) and, per pair of ``gpu_milli``, the milli each holds in the floor's fill:
    ``pinned`` milli on its model, the rest cheapest swing first (module docstring)."""
    names, gpus = gpus_per_model(nodes)
    idle, full = model.gpu_watts(names)
    cap = gpus * FULL_GPU_MILLI
    used = np.asarray(gpu_milli, dtype=float)
    pin = np.zeros((len(used), len(names)))
    for name, milli in (pinned or {}).items():
        pin[:, names.index(name)] = milli
    order = np.argsort(full - idle, kind="stable")
    room = (cap - pin)[:, order]
    rest = (used - pin.sum(axis=1))[:, None] - (np.cumsum(room, axis=1) - room)
    fill = pin.copy()
    fill[:, order] += np.clip(rest, 0, room)
    return names, fill


def linear_power_floor(nodes: NodeSpec, gpu_milli: np.ndarray, cpu_milli: np.ndarray, model: PowerModel = PWR_MODEL,
                       pinned: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
    """``P_floor`` (W) for each pair of allocated ``gpu_milli`` and ``cpu_milli`` (module docstring).

    ``pinned``: GPU model → milli of each pair that must sit on that model (pods only it can hold,
    :func:`single_home`); the rest fills the remaining capacity cheapest first (the "reachable" floor).
    """
    names, fill = floor_fill(nodes, gpu_milli, model, pinned)
    idle, full = model.gpu_watts(names)
    cpu_cap = np.asarray(nodes.cpu_milli, dtype=np.int64)
    p_idle = float(idle @ gpus_per_model(nodes)[1] + cpu_power_w(cpu_cap, cpu_cap, model.cpu, "linear").sum())
    cpu_w = (model.cpu.full_w - model.cpu.idle_w) / model.cpu.cores_per_socket
    return p_idle + fill @ (full - idle) / FULL_GPU_MILLI + cpu_w * np.asarray(cpu_milli, dtype=float) / (
        MILLI_PER_VCPU * VCPUS_PER_CORE)


def single_home(nodes: NodeSpec, pods: Workload) -> np.ndarray:
    """Per pod, the only GPU model whose empty nodes can hold it (GPUs, CPU, memory, GPU-model constraint), else ""."""
    names = sorted(set(nodes.gpu_model))
    fits = ((np.asarray(pods.cpu_milli)[:, None] <= np.asarray(nodes.cpu_milli)[None, :])
            & (np.asarray(pods.memory_mib)[:, None] <= np.asarray(nodes.memory_mib)[None, :])
            & (np.asarray(pods.num_gpu)[:, None] <= np.asarray(nodes.num_gpus)[None, :]))
    specs = sorted(set(map(str, pods.gpu_model)))
    allowed = np.array([[accessible(m, spec) for m in nodes.gpu_model] for spec in specs])
    fits &= allowed[np.searchsorted(specs, np.asarray(pods.gpu_model, dtype=str))]
    homes = np.stack([fits[:, np.asarray(nodes.gpu_model) == m].any(axis=1) for m in names], axis=1)
    return np.where(homes.sum(axis=1) == 1, np.asarray(names, dtype=object)[homes.argmax(axis=1)], "")
