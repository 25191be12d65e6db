"""Small hand-built clusters and pods for unit tests."""

from __future__ import annotations

import numpy as np

from quasched.model import Cluster, NodeSpec, Pod


def nodes(*specs: tuple[int, int, int, str]) -> NodeSpec:
    """NodeSpec from ``(cpu_milli, memory_mib, gpus, model)`` tuples, named n0, n1, ..."""
    return NodeSpec(
        name=np.array([f"n{i}" for i in range(len(specs))], dtype=object),
        cpu_milli=np.array([s[0] for s in specs], dtype=np.int64),
        memory_mib=np.array([s[1] for s in specs], dtype=np.int64),
        num_gpus=np.array([s[2] for s in specs], dtype=np.int64),
        gpu_model=np.array([s[3] for s in specs], dtype=object),
    )


def cluster_with_free(gpu_free: list[list[int]], cpu: int = 64_000, model: str = "T4") -> Cluster:
    """A cluster whose node ``i`` has devices with free milli ``gpu_free[i]``."""
    cluster = Cluster(nodes(*[(cpu, 1 << 20, len(g), model) for g in gpu_free]))
    for i, free in enumerate(gpu_free):
        cluster.gpu_free[i, : len(free)] = free
    return cluster


def pod(cpu=1000, mem=1024, k=0, m=0, spec="", uid=0, **kw) -> Pod:
    return Pod(uid=uid, name=f"p{uid}", cpu_milli=cpu, memory_mib=mem, num_gpu=k, gpu_milli=m,
               gpu_spec=spec, **kw)
