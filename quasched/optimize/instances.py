"""Qua's two DLRM instances and its machines.

Both start from the DLRM v2025 rows with creation and deletion times (12,390
rows, file order): ``qua-greedy`` keeps the first 2,000, ``qua-qubo`` the
2,000 with the highest GPU request (stable sort: file order among equals; Qua
sorted with an unstable sort, so its selection among the many equal requests
is arbitrary). Memory is rounded up to whole GiB; machines have 256 cores,
8 GPUs and 1,024 GiB. ``compat=True`` applies Qua's rules: its heavy rule
(:meth:`HeavyRule.qua`) and no ``max_instance_per_node``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from quasched.model.nodes import NodeSpec
from quasched.model.workload import Workload
from quasched.optimize.problem import BatchProblem, HeavyRule, from_workload

INSTANCES = ("qua-greedy", "qua-qubo")
QUA_JOBS = 2000
QUA_MACHINES = tuple(range(10, 101, 10))
MIB_PER_GIB = 1024
#: Qua's published greedy results on qua-greedy, 10..100 machines
QUA_PUBLISHED_JOBS = (67, 134, 207, 271, 336, 398, 455, 497, 530, 567)
QUA_PUBLISHED_APPS = (5, 10, 13, 13, 14, 17, 23, 27, 28, 29)


def round_memory_gib(workload: Workload) -> Workload:
    """Memory rounded up to whole GiB (the trace has 937.5 GiB requests)."""
    gib = -(-workload.memory_mib // MIB_PER_GIB)
    return replace(workload, memory_mib=(gib * MIB_PER_GIB).astype(np.int64))


def qua_jobs(workload: Workload, instance: str, n_jobs: int = QUA_JOBS) -> Workload:
    """The job rows of a Qua instance, memory rounded to whole GiB."""
    timed = np.flatnonzero(~np.isnan(workload.creation_time) & ~np.isnan(workload.deletion_time))
    if instance == "qua-greedy":
        rows = timed[:n_jobs]
    elif instance == "qua-qubo":
        rows = timed[np.argsort(-workload.gpu_request[timed], kind="stable")[:n_jobs]]
    else:
        raise ValueError(f"unknown instance {instance!r}; choose from {INSTANCES}")
    return replace(round_memory_gib(workload.take(rows)), source=instance)


def qua_nodes(n: int, cores: int = 256, gpus: int = 8, memory_gib: int = 1024, model: str = "GPU") -> NodeSpec:
    """``n`` identical machines (no RDMA or disk limits)."""
    return NodeSpec(
        name=np.array([f"m{j:03d}" for j in range(n)], dtype=object),
        cpu_milli=np.full(n, cores * 1000, dtype=np.int64),
        memory_mib=np.full(n, memory_gib * MIB_PER_GIB, dtype=np.int64),
        num_gpus=np.full(n, gpus, dtype=np.int64),
        gpu_model=np.full(n, model, dtype=object),
        source=f"qua_nodes({n})",
    )


def qua_problem(jobs: Workload, machines: int, *, compat: bool = False, **options) -> BatchProblem:
    """A Qua instance (rows from :func:`qua_jobs`) on ``machines`` machines."""
    if compat:
        options = {"heavy": HeavyRule.qua(), "enforce_max_per_node": False, **options}
    suffix = "/qua-rules" if compat else ""
    return from_workload(jobs, qua_nodes(machines), name=f"{jobs.source}@{machines}{suffix}", **options)
