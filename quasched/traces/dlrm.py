"""Loader for the Alibaba GPU v2025 disaggregated DLRM trace, and a cluster sized for it.

Units are converted to the workload's: cores -> milli-cores, GiB -> MiB (both
rounded); ``gpu_request`` g >= 1 (whole) -> g GPUs of 1000 milli, 0 < g < 1 ->
one GPU of ``round(1000 g)`` milli, 0 -> CPU-only. Rows keep the file order.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from quasched.model.nodes import NodeSpec
from quasched.model.resources import RDMA_CAPACITY
from quasched.model.workload import FULL_GPU_MILLI, NO_LIMIT, Workload
from quasched.traces.table import read_table

COLUMNS = (
    "instance_sn", "role", "app_name", "cpu_request", "gpu_request", "rdma_request",
    "memory_request", "disk_request", "max_instance_per_node", "creation_time", "deletion_time",
)
ROLES = ("CN", "HN")
MIB_PER_GIB = 1024


def load_dlrm(path: str | Path) -> Workload:
    """Read ``disaggregated_DLRM_trace.csv``; ``app`` indexes the sorted unique ``app_name``s."""
    table = read_table(path, COLUMNS)
    name = table.names("instance_sn")
    role = table.choice("role", ROLES)
    app_name = table.required_text("app_name")
    cpu = table.number("cpu_request", integer=False)
    gpu = table.number("gpu_request", integer=False)
    table.flag("gpu_request", (gpu > 1) & (gpu != np.round(gpu)),
               "{value} is unsupported: a request above one GPU must be whole GPUs")
    milli = np.where(gpu >= 1, FULL_GPU_MILLI, np.rint(gpu * FULL_GPU_MILLI)).astype(np.int64)
    table.flag("gpu_request", (gpu > 0) & (milli == 0), "{value} is below 0.001 GPU")
    rdma = table.number("rdma_request", maximum=RDMA_CAPACITY)
    memory = table.number("memory_request", integer=False)
    disk = table.number("disk_request", integer=False)
    max_per_node = table.number("max_instance_per_node", minimum=NO_LIMIT)
    table.flag("max_instance_per_node", max_per_node == 0, "0 is not allowed (use -1 for no limit)")
    creation = table.number("creation_time", integer=False, empty=np.nan)
    deletion = table.number("deletion_time", integer=False, empty=np.nan)
    table.not_before("deletion_time", deletion, "creation_time", creation)
    table.check()
    app, app_names = pd.factorize(app_name, sort=True)
    return Workload(
        name=name,
        cpu_milli=np.rint(cpu * 1000).astype(np.int64),
        memory_mib=np.rint(memory * MIB_PER_GIB).astype(np.int64),
        num_gpu=np.where(gpu >= 1, np.round(gpu), (gpu > 0).astype(float)).astype(np.int64),
        gpu_milli=milli,
        gpu_model=np.full(len(name), "", dtype=object),
        role=role,
        app=app.astype(np.int64),
        max_per_node=max_per_node,
        rdma=rdma,
        disk_mib=np.rint(disk * MIB_PER_GIB).astype(np.int64),
        creation_time=creation,
        deletion_time=deletion,
        app_names=tuple(app_names.tolist()),
        source=Path(path).name,
    )


def peak_demand(workload: Workload) -> dict[str, int]:
    """Largest total request of instances alive at the same time, per resource.

    An instance lives from ``creation_time`` (NaN: before the trace) to
    ``deletion_time`` (NaN: after it), end excluded.
    """
    start = np.nan_to_num(workload.creation_time, nan=-np.inf)
    end = np.nan_to_num(workload.deletion_time, nan=np.inf)
    times = np.concatenate([start, end])
    is_end = np.concatenate([np.zeros(len(start), bool), np.ones(len(end), bool)])
    order = np.lexsort((~is_end, times))  # at equal times departures come first
    sign = np.where(is_end, -1, 1)[order]
    demand = {
        "cpu_milli": workload.cpu_milli,
        "gpu_milli": workload.gpu_request,
        "memory_mib": workload.memory_mib,
        "rdma": workload.rdma,
    }
    return {
        key: int(np.cumsum(sign * np.concatenate([values, values])[order]).max(initial=0))
        for key, values in demand.items()
    }


def dlrm_cluster(
    workload: Workload,
    *,
    headroom: float = 1.0,
    cpu_milli: int = 256_000,
    num_gpus: int = 8,
    memory_mib: int = 1024 * MIB_PER_GIB,
    rdma: int = RDMA_CAPACITY,
    gpu_model: str = "GPU",
) -> NodeSpec:
    """Homogeneous nodes for a time-based replay of ``workload``.

    The trace publishes no node list, so the cluster is ``n`` identical nodes
    (default 256 cores, 8 GPUs of model ``gpu_model``, 1 TiB memory, ``rdma``
    = 100 % of one NIC, unlimited disk), where ``n`` is the smallest count whose total
    capacity covers the peak concurrent CPU, GPU, memory and RDMA demand
    (:func:`peak_demand`), multiplied by ``headroom`` and rounded up. CPU-only
    (CN) instances share these nodes with GPU (HN) instances. Totals ignore
    fragmentation and per-node limits, so ``headroom > 1`` may be needed for
    every instance to fit.
    """
    peak = peak_demand(workload)
    need = max(
        peak["cpu_milli"] / cpu_milli,
        peak["gpu_milli"] / (num_gpus * FULL_GPU_MILLI),
        peak["memory_mib"] / memory_mib,
        peak["rdma"] / rdma,
    )
    n = max(1, math.ceil(round(need * headroom, 9)))
    return NodeSpec(
        name=np.array([f"dlrm-node-{i:04d}" for i in range(n)], dtype=object),
        cpu_milli=np.full(n, cpu_milli, dtype=np.int64),
        memory_mib=np.full(n, memory_mib, dtype=np.int64),
        num_gpus=np.full(n, num_gpus, dtype=np.int64),
        gpu_model=np.full(n, gpu_model, dtype=object),
        rdma=np.full(n, rdma, dtype=np.int64),
        source=f"dlrm_cluster(headroom={headroom:g})",
    )
