"""A resource registered at run time (FPGAs) flows from the files to fit and allocation metrics.

Only the registry and the loaders know about it: the cluster file gives pools
an ``fpga`` key, the workload file an ``fpga`` column, and the fit rule and
``allocation_summary`` pick the new column up from the registry.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from builders import assert_consistent

from quasched.metrics.allocation import allocation_summary
from quasched.model import Cluster, PlacementError
from quasched.model.fit import fit_mask, fit_reasons
from quasched.model.resources import RESOURCES, Resource
from quasched.traces.cluster_file import load_cluster_file
from quasched.traces.errors import TraceError
from quasched.traces.workload_file import load_workload_file

CLUSTER = """\
name: fpga-lab
pools:
  - {name: fpga, count: 2, cpu: 32, memory: 64Gi, fpga: 2}
  - {name: plain, count: 3, cpu: 32, memory: 64Gi}
"""

WORKLOAD = """\
name,cpu,memory,fpga
f1,1,1Gi,1
f2,1,1Gi,1
f3,1,1Gi,1
f4,1,1Gi,2
cpu-only,1,1Gi,
"""


@pytest.fixture
def registry():
    registry = RESOURCES.copy()
    registry.register(Resource("fpga", "devices", default_capacity=0))
    return registry


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "pods.csv").write_text(WORKLOAD)
    return tmp_path / "cluster.yaml", tmp_path / "pods.csv"


def test_fpga_from_files_to_fit_and_allocation(registry, files):
    cluster_path, workload_path = files
    spec = load_cluster_file(cluster_path, resources=registry)
    assert spec.extra["fpga"].tolist() == [2, 2, 0, 0, 0]  # pools without the key: the default capacity
    workload = load_workload_file(workload_path, resources=registry)
    assert workload.extra["fpga"].tolist() == [1, 1, 1, 2, 0]
    assert RESOURCES.names == ("cpu", "memory", "pods", "rdma", "disk")  # the default registry is untouched

    cluster = Cluster(spec, resources=registry)
    assert cluster.resource_names[-1] == "fpga" and cluster.column("fpga").tolist() == [2, 2, 0, 0, 0]
    f1, f2, f3, f4, plain = (workload.pod(i, resources=registry) for i in range(len(workload)))
    assert fit_mask(cluster, f1).tolist() == [True, True, False, False, False]
    assert fit_mask(cluster, plain).all()

    cluster.place(f1, 0)
    cluster.place(f2, 0)
    assert fit_mask(cluster, f3).tolist() == [False, True, False, False, False]  # a third fpga pod: not on node 0
    assert fit_reasons(cluster, f3, np.array([0])) == {"fpga": 1}
    with pytest.raises(PlacementError, match=": fpga$"):
        cluster.place(f3, 0)
    cluster.place(f3, 1)
    assert not fit_mask(cluster, f4).any()  # two at once: node 1 has one left
    cluster.place(plain, 0)  # no fpga asked: still fits the full node
    assert_consistent(cluster)

    summary = allocation_summary(cluster)
    assert summary["fpga_alloc_pct"] == pytest.approx(100 * 3 / 4)
    assert summary["cpu_alloc_pct"] == pytest.approx(100 * 4 / (5 * 32))
    assert summary["pods_placed"] == 4
    assert summary["disk_alloc_pct"] == 0.0  # unlimited disk summed over five nodes does not overflow
    cluster.remove(f1)
    assert allocation_summary(cluster)["fpga_alloc_pct"] == pytest.approx(100 * 2 / 4)


def test_without_the_registry_the_key_and_column_are_unknown(files):
    cluster_path, workload_path = files
    with pytest.raises(TraceError, match="unknown key"):
        load_cluster_file(cluster_path)
    with pytest.raises(TraceError, match="unknown column"):
        load_workload_file(workload_path)


def test_bad_fpga_values_name_the_field(registry, tmp_path):
    (tmp_path / "c.yaml").write_text("pools:\n  - {name: a, count: 1, cpu: 4, memory: 4Gi, fpga: -1}\n")
    with pytest.raises(TraceError, match=r"pools\[0\]\.fpga"):
        load_cluster_file(tmp_path / "c.yaml", resources=registry)
    (tmp_path / "p.csv").write_text("name,cpu,memory,fpga\np,1,1Gi,1.5\n")
    with pytest.raises(TraceError, match="not an integer"):
        load_workload_file(tmp_path / "p.csv", resources=registry)
    (tmp_path / "p.jsonl").write_text('{"name": "p", "cpu": 1, "memory": "1Gi", "fpga": 2}\n')
    assert load_workload_file(tmp_path / "p.jsonl", resources=registry).extra["fpga"].tolist() == [2]


def test_a_required_extra_resource_must_be_given_by_every_pool(tmp_path):
    registry = RESOURCES.copy()
    registry.register(Resource("licenses", "seats"))  # no default capacity: required
    (tmp_path / "c.yaml").write_text(
        "pools:\n  - {name: a, count: 1, cpu: 4, memory: 4Gi, licenses: 3}\n  - {name: b, count: 1, cpu: 4, memory: 4Gi}\n")
    with pytest.raises(TraceError, match=r"pools\[1\]\.licenses"):
        load_cluster_file(tmp_path / "c.yaml", resources=registry)
