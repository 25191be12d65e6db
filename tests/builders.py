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
        cluster.gpu_alloc[i, : len(free)] = 1000 - np.asarray(free)
        cluster._refresh(i)  # a hand-made state no sequence of placements needs to reach
    return cluster


def pod(cpu=1000, mem=1024, k=0, m=0, spec="", uid=0, **kw) -> Pod:
    return Pod(uid=uid, name=f"p{uid}", cpu_milli=cpu, memory_mib=mem, num_gpu=k, gpu_milli=m,
               gpu_model=spec, **kw)


def assert_consistent(cluster: Cluster) -> None:
    """Every state array equals what the placements imply; nothing over-committed or on padding."""
    free = cluster.capacity.copy()
    alloc = np.zeros_like(cluster.gpu_alloc)
    for uid, placement in cluster.placements.items():
        assert uid == placement.pod.uid and cluster.present[placement.node]
        free[placement.node] -= placement.pod.request
        for d in placement.devices:
            alloc[placement.node, d] += placement.pod.gpu_milli
    assert (cluster.free == free).all() and (free >= 0).all()
    assert (cluster.gpu_alloc == alloc).all() and (alloc <= 1000).all()
    assert (cluster.gpu_free == np.where(cluster.gpu_healthy, 1000 - alloc, 0)).all()
    assert not (cluster.gpu_healthy & ~cluster.device_exists).any()
    assert (cluster.schedulable == (cluster.present & ~cluster.cordoned)).all()
    assert (cluster.allocated == (cluster.capacity - cluster.free).sum(axis=0)).all()
    assert (cluster.capacity_total == cluster.capacity.sum(axis=0)).all()
    assert cluster.gpu_allocated == alloc.sum() and cluster.devices_in_use == np.count_nonzero(alloc)
    assert cluster.nodes_in_use == cluster.in_use.sum() == (alloc.any(axis=1) | (free[:, 0] < cluster.capacity[:, 0])).sum()
    assert cluster.gpus_on_used_nodes == cluster.num_gpus[cluster.in_use].sum()
    assert cluster.total_gpus == cluster.num_gpus.sum()


def change_node(cluster: Cluster, op: str, target: int, device: int, uid: int, placed: list[int]) -> None:
    """One random cluster change of the property tests: ``remove`` (one of ``placed``), ``cordon``,
    ``uncordon``, ``fail``/``heal`` (device ``device`` of ``target``), ``add`` (a node of ``device`` GPUs)."""
    if op == "remove" and placed:
        cluster.remove(placed.pop(target % len(placed)))
    elif op in ("cordon", "uncordon"):
        getattr(cluster, op)(target)
    elif op in ("fail", "heal") and device < cluster.num_gpus[target]:
        cluster.set_device_health(target, device, op == "heal")
    elif op == "add":
        cluster.add_node(f"n{uid}", {"cpu": 8000 * (device + 1), "memory": 1 << 14}, num_gpus=device,
                         gpu_model="A100" if device else "")
