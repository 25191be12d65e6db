"""Golden numbers from the real traces of the FGD artifact (docs/simulator-spec.md, Inputs)."""

from __future__ import annotations

import numpy as np
import pytest

from quasched.traces import describe, list_traces, load_dlrm, load_openb_nodes, load_openb_pods, load_trace
from quasched.traces.catalog import OPENB_ALL_NODES, OPENB_NODES, OPENB_VARIANTS, PAPER_VARIANTS

# trace: pods, CPU-only, share, 1 GPU, 2-GPU, 4-GPU, 8-GPU, with gpu_model, GPU request, % of 6212 GPUs, shapes
TABLE_1_2 = {
    "default": (8152, 1088, 3078, 3911, 16, 15, 44, 0, 6086800, 97.98, 91),
    "cpu050": (7439, 375, 3078, 3911, 16, 15, 44, 0, 6086800, 97.98, 89),
    "cpu100": (7853, 789, 3078, 3911, 16, 15, 44, 0, 6086800, 97.98, 91),
    "cpu200": (8832, 1768, 3078, 3911, 16, 15, 44, 0, 6086800, 97.98, 90),
    "cpu250": (9420, 2356, 3078, 3911, 16, 15, 44, 0, 6086800, 97.98, 91),
    "gpushare40": (8152, 1088, 4001, 3001, 12, 11, 39, 0, 5641250, 90.81, 88),
    "gpushare60": (8152, 1088, 5233, 1801, 7, 9, 14, 0, 4908340, 79.01, 85),
    "gpushare80": (8152, 1088, 6279, 768, 2, 3, 12, 0, 4408190, 70.96, 80),
    "gpushare100": (8152, 1088, 7064, 0, 0, 0, 0, 0, 3952670, 63.63, 49),
    "gpuspec10": (8152, 1088, 3078, 3911, 16, 15, 44, 732, 6086800, 97.98, 249),
    "gpuspec20": (8152, 1088, 3078, 3911, 16, 15, 44, 1444, 6086800, 97.98, 285),
    "gpuspec25": (8152, 1088, 3078, 3911, 16, 15, 44, 1759, 6086800, 97.98, 312),
    "gpuspec33": (8152, 1088, 3078, 3911, 16, 15, 44, 2388, 6086800, 97.98, 330),
    "multigpu20": (8324, 1088, 3078, 3911, 54, 52, 141, 0, 7086800, 114.08, 91),
    "multigpu30": (8508, 1088, 3078, 3911, 112, 83, 236, 0, 8086800, 130.18, 91),
    "multigpu40": (8746, 1088, 3078, 3911, 156, 154, 359, 0, 9442800, 152.01, 91),
    "multigpu50": (9061, 1088, 3078, 3911, 222, 206, 556, 0, 11358800, 182.85, 91),
}
KEYS = ("pods", "cpu_only", "sharing", "gpu_1", "gpu_2", "gpu_4", "gpu_8", "with_gpu_model",
        "gpu_request_milli", "gpu_capacity_pct", "distinct_shapes")
SPECS_IN_DOC = {
    "T4", "G2", "P100", "G3", "V100M32", "V100M16", "V100M16|V100M32", "V100M16|V100M32|V100M32",
    "P100|V100M16", "P100|V100M16|V100M32", "P100|T4", "P100|T4|V100M16|V100M32",
    "T4|V100M16|V100M32", "A10|T4", "G2|P100|T4|V100M16|V100M32", "A10|G2|T4|V100M16|V100M32",
    "A10|G2|P100|T4|V100M16|V100M32|V100M32",
}


def test_table_covers_the_paper_traces() -> None:
    assert set(TABLE_1_2) == set(PAPER_VARIANTS)


@pytest.mark.parametrize("variant", sorted(TABLE_1_2))
def test_pod_list_statistics(data_dir, variant: str) -> None:
    nodes, workload = load_trace(f"openb-{variant}", data_dir, download=False)
    summary = describe(workload, nodes)
    assert tuple(summary[k] for k in KEYS) == TABLE_1_2[variant]
    assert summary["gpu_other"] == 0
    assert workload.source == f"openb-{variant}"


def test_gpu_node_list_totals(data_dir) -> None:
    nodes = load_openb_nodes(data_dir / OPENB_NODES)
    assert (len(nodes), nodes.total_gpus) == (1213, 6212)
    assert int(nodes.cpu_milli.sum()) == 107_018_000
    assert int(nodes.memory_mib.sum()) == 503_828_480
    assert set(nodes.gpu_model) == {"A10", "G2", "G3", "P100", "T4", "V100M16", "V100M32"}
    assert nodes.name.dtype == object and nodes.name[0] == "openb-node-0000"


def test_all_node_list(data_dir) -> None:
    nodes = load_openb_nodes(data_dir / OPENB_ALL_NODES)
    cpu_only = nodes.num_gpus == 0
    assert len(nodes) == 1523 and int(cpu_only.sum()) == 310
    assert set(nodes.gpu_model[cpu_only]) == {""}
    assert nodes.total_gpus == 6212
    all_nodes, _ = load_trace("openb-default", data_dir, all_nodes=True, download=False)
    assert len(all_nodes) == 1523


@pytest.mark.slow  # every variant of the full traces
def test_every_openb_variant_loads_with_documented_invariants(data_dir) -> None:
    specs: set[str] = set()
    for variant in OPENB_VARIANTS:
        w = load_openb_pods(data_dir / f"alibaba-gpu-v2023/openb_pod_list_{variant}.csv")
        assert set(np.unique(w.num_gpu)) <= {0, 1, 2, 4, 8}
        assert np.all(w.gpu_milli[w.num_gpu > 1] == 1000)
        assert np.all(w.gpu_milli[w.num_gpu == 0] == 0)
        assert np.all(w.gpu_model[w.num_gpu == 0] == "")
        assert len(set(w.name)) == len(w)
        specs |= set(w.gpu_model) - {""}
    assert specs == SPECS_IN_DOC


def test_default_pod_list_fields(data_dir) -> None:
    w = load_openb_pods(data_dir / "alibaba-gpu-v2023/openb_pod_list_default.csv")
    first = w.pod(1)
    assert (first.name, first.cpu_milli, first.memory_mib, first.num_gpu, first.gpu_milli) == (
        "openb-pod-0001", 6000, 12288, 1, 460)
    assert w.name.dtype == object
    assert set(w.qos) == {"LS", "BE", "Burstable", "Guaranteed"}
    assert (w.creation_time[1], w.deletion_time[1]) == (427061.0, 12902960.0)
    multi = load_openb_pods(data_dir / "alibaba-gpu-v2023/openb_pod_list_multigpu20.csv")
    assert set(multi.qos) == {""} and np.isnan(multi.creation_time).all()


def test_dlrm_trace(data_dir) -> None:
    w = load_dlrm(data_dir / "alibaba-gpu-v2025/disaggregated_DLRM_trace.csv")
    assert len(w) == 23_871 and len(w.app_names) == 156
    assert int((~np.isnan(w.creation_time) & ~np.isnan(w.deletion_time)).sum()) == 12_390
    assert w.name[0] == "instance_0" and w.name[-1] == f"instance_{len(w) - 1}"  # file order
    assert w.app_names == tuple(sorted(w.app_names))
    assert w.app_names[w.app[0]] == "app_0"
    assert {"CN": 16_485, "HN": 7_386} == {r: int((w.role == r).sum()) for r in ("CN", "HN")}
    gpu = w.role == "HN"
    assert np.all(w.num_gpu[gpu] == 1) and np.all(w.gpu_milli[gpu] == 1000) and np.all(w.gpu_milli[~gpu] == 0)
    first = w.pod(0)
    assert (first.cpu_milli, first.memory_mib, first.disk_mib, first.rdma, first.max_per_node) == (
        12_000, 120 * 1024, 640 * 1024, 25, 8)


def test_catalog_names() -> None:
    names = list_traces()
    assert "synthetic" in names and "dlrm-2025" in names
    assert {f"openb-{v}" for v in ("default", "gpushare40", "multigpu50", "cpu037", "cpu0")} <= set(names)
    assert sum(n.startswith("openb-") for n in names) == 24
