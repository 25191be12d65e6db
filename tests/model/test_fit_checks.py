"""Every check of the one fit rule, one at a time.

Each case builds a one-node cluster and a pod that fails exactly one check of
:mod:`quasched.model.fit`, and the same pair with that limit relaxed. Every
consumer of the rule must agree: the Filter mask, ``Cluster.place``, the
pending queue's fit classes (alone and beside another class, which takes the
many-rows path) and ``fit_reasons``. Deleting any single check from
``fit_checks`` makes some case here fail.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Callable

import numpy as np
import pytest
from builders import assert_consistent, nodes, pod

from quasched.model import Cluster, PlacementError, Pod
from quasched.model.fit import APP_DENSITY, GPU_DEVICES, GPU_MODEL, UNSCHEDULABLE, fit_mask, fit_reasons
from quasched.policies.devices import best_fit
from quasched.policies.queue import FitClasses

Case = Callable[[bool], tuple[Cluster, Pod]]
ROOMY = (64_000, 1 << 16, 0, "")


def one_node(spec=ROOMY, **columns) -> Cluster:
    """A cluster of one node ``spec`` with NodeSpec fields ``columns`` (``extra`` included)."""
    node = nodes(spec)
    return Cluster(replace(node, **{k: np.array([v]) if k != "extra" else v for k, v in columns.items()}))


def cpu(relax: bool):
    return one_node((1000, 1 << 16, 0, "")), pod(cpu=1000 if relax else 1001, uid=1)


def memory(relax: bool):
    return one_node((64_000, 2048, 0, "")), pod(mem=2048 if relax else 2049, uid=1)


def pods(relax: bool):
    cluster = one_node(extra={"pods": np.array([2 if relax else 1])})
    cluster.place(pod(cpu=1, mem=1, uid=0), 0)  # takes the only slot unless relaxed
    return cluster, pod(uid=1)


def rdma(relax: bool):
    return one_node(rdma=30), pod(rdma=30 if relax else 31, uid=1)


def disk(relax: bool):
    return one_node(disk_mib=100), pod(disk_mib=100 if relax else 101, uid=1)


def app_density(relax: bool):
    cluster = one_node()
    cluster.place(pod(app="web", max_per_node=2, uid=0), 0)
    return cluster, pod(app="web", max_per_node=2 if relax else 1, uid=1)


def gpu_model(relax: bool):
    return one_node((64_000, 1 << 16, 2, "T4")), pod(k=1, m=500, spec="V100|T4" if relax else "V100|A100", uid=1)


def gpu_model_cpu_node(relax: bool):
    """A GPU pod without a model constraint still needs a node with GPUs."""
    return one_node((64_000, 1 << 16, 1 if relax else 0, "T4" if relax else "")), pod(k=1, m=500, uid=1)


def gpu_count(relax: bool):
    return one_node((64_000, 1 << 16, 4, "T4")), pod(k=4 if relax else 5, m=1000, uid=1)


def gpu_count_busy(relax: bool):
    """Two whole GPUs wanted, one of three devices partly taken: count of fully free devices decides."""
    cluster = one_node((64_000, 1 << 16, 3, "T4"))
    cluster.place(pod(k=1, m=100, uid=0), 0, (1,))
    return cluster, pod(k=2 if relax else 3, m=1000, uid=1)


def gpu_milli(relax: bool):
    cluster = one_node((64_000, 1 << 16, 2, "T4"))
    cluster.place(pod(k=1, m=600, uid=0), 0, (0,))
    cluster.place(pod(k=1, m=600, uid=2), 0, (1,))
    return cluster, pod(k=1, m=400 if relax else 401, uid=1)


def cordoned(relax: bool):
    cluster = one_node((64_000, 1 << 16, 1, "T4"))
    cluster.cordon(0)
    if relax:
        cluster.uncordon(0)
    return cluster, pod(k=1, m=500, uid=1)


def unhealthy_device(relax: bool):
    cluster = one_node((64_000, 1 << 16, 2, "T4"))
    cluster.set_device_health(0, 1, False)
    if relax:
        cluster.set_device_health(0, 1, True)
    return cluster, pod(k=2, m=1000, uid=1)


def unhealthy_shared_device(relax: bool):
    """A sharing pod on a node whose only device failed (the per-node maximum decides)."""
    cluster = one_node((64_000, 1 << 16, 1, "T4"))
    cluster.set_device_health(0, 0, relax)
    return cluster, pod(k=1, m=100, uid=1)


CASES: dict[str, tuple[Case, str]] = {
    "cpu": (cpu, "cpu"),
    "memory": (memory, "memory"),
    "pods": (pods, "pods"),
    "rdma": (rdma, "rdma"),
    "disk": (disk, "disk"),
    "app density": (app_density, APP_DENSITY),
    "GPU model": (gpu_model, GPU_MODEL),
    "GPU model on a CPU node": (gpu_model_cpu_node, GPU_MODEL),
    "GPU device count": (gpu_count, GPU_DEVICES),
    "GPU device count, one busy": (gpu_count_busy, GPU_DEVICES),
    "GPU device milli": (gpu_milli, GPU_DEVICES),
    "cordoned node": (cordoned, UNSCHEDULABLE),
    "unhealthy device": (unhealthy_device, GPU_DEVICES),
    "unhealthy shared device": (unhealthy_shared_device, GPU_DEVICES),
}


def test_every_registry_resource_has_a_case():
    assert set(Cluster(nodes(ROOMY)).resource_names) <= set(CASES)


def class_fits(cluster: Cluster, p: Pod) -> tuple[bool, bool]:
    """FitClasses verdict for ``p``: as the only class, and as one of two (the many-rows path)."""
    alone = FitClasses()
    alone_fit = alone.fits(cluster, np.array([alone.of(p)]), np.array([0]))
    pair = FitClasses()
    other = pod(cpu=1, mem=1, uid=99)  # a small CPU-only pod
    classes = np.array([pair.of(other), pair.of(p)])
    pair_fit = pair.fits(cluster, classes, np.array([0]))
    assert pair_fit[0, 0] == fit_mask(cluster, other)[0]
    return bool(alone_fit[0, 0]), bool(pair_fit[1, 0])


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_failing_exactly_one_check_is_refused_everywhere(case):
    build, check = CASES[case]
    cluster, p = build(False)
    assert not fit_mask(cluster, p)[0]
    assert fit_reasons(cluster, p) == {check: 1}
    assert fit_reasons(cluster, p, np.array([0])) == {check: 1}
    assert class_fits(cluster, p) == (False, False)
    before = cluster.snapshot()
    devices = tuple(range(p.num_gpu)) if p.is_gpu else ()
    with pytest.raises(PlacementError, match=rf": {re.escape(check)}$"):
        cluster.place(p, 0, devices)
    assert all(np.array_equal(a, b) for a, b in zip(before, cluster.snapshot()))


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_the_same_pair_fits_with_the_limit_relaxed(case):
    build, _ = CASES[case]
    cluster, p = build(True)
    assert fit_mask(cluster, p)[0]
    assert fit_reasons(cluster, p) == {}
    assert class_fits(cluster, p) == (True, True)
    cluster.place(p, 0, best_fit(cluster.gpu_free[0], p))
    assert_consistent(cluster)
