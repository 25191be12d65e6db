"""The least linear-model power any placement of a given demand can draw: a floor for power-aware placement.

Under the linear model (:mod:`quasched.metrics.power`) a node draws its idle power plus
``(full − idle)`` × the allocated share of each GPU, and ``(full − idle) / cores_per_socket``
× its working cores, with working cores ``= cores − ⌊free vCPU / 2⌋ ≥ allocated vCPU / 2``.
So with ``U`` GPU milli and ``K`` CPU milli allocated, every placement draws at least::

    P_floor(U, K) = P_idle + (full_cpu − idle_cpu) · K / (2000 · cores_per_socket) + fill(U)

``fill(U)``: the cluster's GPUs filled cheapest swing ``full − idle`` first, as if any GPU milli
could go anywhere (a relaxation: pod sizes, CPU, memory and GPU-model constraints are
ignored), so the floor is valid but not always reachable. Step-model power has no such simple
floor (a GPU share draws a whole TDP), so this bounds the linear-model saving only.
"""

from __future__ import annotations

import numpy as np

from quasched.metrics.power import MILLI_PER_VCPU, PWR_MODEL, VCPUS_PER_CORE, PowerModel, cpu_power_w
from quasched.model.cluster import NodeSpec
from quasched.model.workload import FULL_GPU_MILLI


def linear_power_floor(nodes: NodeSpec, gpu_milli: np.ndarray, cpu_milli: np.ndarray,
                       model: PowerModel = PWR_MODEL) -> np.ndarray:
    """``P_floor`` (W) for each pair of allocated ``gpu_milli`` and ``cpu_milli`` (module docstring)."""
    idle, full = model.gpu_watts(list(nodes.gpu_model))
    cpu_cap = np.asarray(nodes.cpu_milli, dtype=np.int64)
    p_idle = float(idle @ nodes.num_gpus + cpu_power_w(cpu_cap, cpu_cap, model.cpu, "linear").sum())
    order = np.argsort(full - idle, kind="stable")
    swing, gpus = (full - idle)[order], np.asarray(nodes.num_gpus, dtype=float)[order]
    edges = np.r_[0.0, np.cumsum(gpus)]
    watts = np.r_[0.0, np.cumsum(gpus * swing)]
    used = np.minimum(np.asarray(gpu_milli, dtype=float) / FULL_GPU_MILLI, edges[-1])
    k = np.clip(np.searchsorted(edges, used, side="right") - 1, 0, len(swing) - 1)
    fill = watts[k] + (used - edges[k]) * swing[k]
    cpu_w = (model.cpu.full_w - model.cpu.idle_w) / model.cpu.cores_per_socket
    return p_idle + fill + cpu_w * np.asarray(cpu_milli, dtype=float) / (MILLI_PER_VCPU * VCPUS_PER_CORE)
