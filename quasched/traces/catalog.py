"""Named traces: ``synthetic``, ``openb-<variant>`` and ``dlrm-2025``, plus a shape summary."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from quasched.model.nodes import NodeSpec, accessible, spec_models
from quasched.model.workload import FULL_GPU_MILLI, Workload, shape_keys
from quasched.traces.cluster_file import load_cluster_file
from quasched.traces.datadir import resolve_trace
from quasched.traces.dlrm import dlrm_cluster, load_dlrm
from quasched.traces.errors import TraceError
from quasched.traces.openb import load_openb_nodes, load_openb_pods
from quasched.traces.synthetic import synthetic_cluster, synthetic_workload
from quasched.traces.workload_file import load_workload_file

OPENB_DIR = "alibaba-gpu-v2023"
OPENB_NODES = f"{OPENB_DIR}/openb_node_list_gpu_node.csv"
OPENB_ALL_NODES = f"{OPENB_DIR}/openb_node_list_all_node.csv"
DLRM_FILE = "alibaba-gpu-v2025/disaggregated_DLRM_trace.csv"

#: the 17 pod lists of the FGD paper's experiments
PAPER_VARIANTS = (
    "default", "cpu050", "cpu100", "cpu200", "cpu250",
    "gpushare40", "gpushare60", "gpushare80", "gpushare100",
    "gpuspec10", "gpuspec20", "gpuspec25", "gpuspec33",
    "multigpu20", "multigpu30", "multigpu40", "multigpu50",
)
#: every published openb pod list (suffix after ``openb_pod_list_``)
OPENB_VARIANTS = (
    "default", "cpu0", "cpu037", "cpu050", "cpu072", "cpu100", "cpu200", "cpu235", "cpu250", "cpu300",
    "gpushare20", "gpushare40", "gpushare60", "gpushare80", "gpushare100",
    "gpuspec05", "gpuspec10", "gpuspec20", "gpuspec25", "gpuspec33",
    "multigpu20", "multigpu30", "multigpu40", "multigpu50",
)
_FAMILIES = {
    "default": "8,152 pods of a production GPU-sharing cluster",
    "cpu": "default list with a different number of CPU-only pods",
    "gpushare": "default list with more GPU-sharing pods",
    "gpuspec": "default list with GPU-model constraints on some pods",
    "multigpu": "default list with more multi-GPU pods",
}


@dataclass(frozen=True)
class TraceInfo:
    """A catalog entry; ``path`` is relative to the data directory ("" = built in)."""

    name: str
    kind: str
    path: str
    description: str


def _openb(variant: str) -> TraceInfo:
    family = variant.rstrip("0123456789")
    note = "" if variant in PAPER_VARIANTS else " (not in the FGD paper's experiments)"
    return TraceInfo(f"openb-{variant}", "openb", f"{OPENB_DIR}/openb_pod_list_{variant}.csv",
                     f"Alibaba GPU v2023: {_FAMILIES[family]}{note}")


CATALOG: dict[str, TraceInfo] = {
    info.name: info
    for info in (
        TraceInfo("synthetic", "synthetic", "", "built-in seeded openb-like cluster and pods, no download"),
        *(_openb(variant) for variant in OPENB_VARIANTS),
        TraceInfo("dlrm-2025", "dlrm", DLRM_FILE,
                  "Alibaba GPU v2025: 23,871 DLRM inference instances of 156 apps, with times"),
    )
}


def list_traces() -> list[str]:
    """Names of every known trace."""
    return list(CATALOG)


def trace_info(name: str) -> TraceInfo:
    """Catalog entry of ``name`` (:class:`TraceError` naming the known traces if unknown)."""
    if name not in CATALOG:
        raise TraceError(name, f"unknown trace; known: {', '.join(CATALOG)}")
    return CATALOG[name]


def load_trace(
    name: str,
    data_dir: str | Path | None = None,
    *,
    all_nodes: bool = False,
    seed: int = 0,
    download: bool = True,
) -> tuple[NodeSpec, Workload]:
    """Nodes and workload of trace ``name``; the workload's ``source`` is the trace name.

    openb traces use the 1,213-node GPU node list (``all_nodes``: the 1,523-node
    list with CPU-only nodes); ``dlrm-2025`` gets :func:`dlrm_cluster`;
    ``synthetic`` uses ``seed``. Files are found by :func:`resolve_trace`.
    """
    info = trace_info(name)
    if info.kind == "synthetic":
        nodes, workload = synthetic_cluster(seed=seed), synthetic_workload(seed=seed)
    elif info.kind == "dlrm":
        workload = load_dlrm(resolve_trace(info.path, data_dir, download=download))
        nodes = dlrm_cluster(workload)
    else:
        node_file = OPENB_ALL_NODES if all_nodes else OPENB_NODES
        nodes = load_openb_nodes(resolve_trace(node_file, data_dir, download=download))
        workload = load_openb_pods(resolve_trace(info.path, data_dir, download=download))
    return nodes, replace(workload, source=name)


def load_inputs(
    trace: str = "synthetic",
    cluster: str | Path | None = None,
    workload: str | Path | None = None,
    data_dir: str | Path | None = None,
) -> tuple[NodeSpec, Workload]:
    """Nodes and workload from a trace, a cluster file, a workload file or a mix.

    A cluster file (:func:`load_cluster_file`) replaces the trace's nodes, a
    workload file (:func:`load_workload_file`) its pods; with both, ``trace``
    is not read. The workload's ``source`` is the trace name or the file name. A mix whose pods
    ask for a GPU model no node has is refused (:func:`check_models`): they could never run.
    """
    if cluster is not None and workload is not None:
        nodes, pods = load_cluster_file(cluster), load_workload_file(workload)
    else:
        nodes, pods = load_trace(trace, data_dir)
        if cluster is not None:
            nodes = load_cluster_file(cluster)
        if workload is not None:
            pods = load_workload_file(workload)
    if cluster is not None or workload is not None:
        check_models(nodes, pods, workload or trace, cluster or trace,
                     "gpu_model" if workload is not None else "gpu_spec")
    return nodes, pods


def check_models(nodes: NodeSpec, pods: Workload, workload: str | Path, cluster: str | Path, field: str) -> None:
    """:class:`TraceError` naming the first pod of ``workload`` whose GPU-model constraint no node of
    ``cluster`` meets, with how many pods share it and the models the cluster has."""
    models = sorted({str(m) for m in nodes.gpu_model if m})
    specs, first, counts = np.unique(pods.gpu_model.astype(str), return_index=True, return_counts=True)
    bad = [(int(row), str(spec), int(count)) for spec, row, count in zip(specs, first, counts)
           if spec_models(spec) and not any(accessible(m, spec) for m in models)]
    if bad:
        row, spec, count = min(bad)
        asking = f"{count} pods ask" if count > 1 else "1 pod asks"
        raise TraceError(workload, f"pod {pods.name[row]!r} asks for GPU model {spec!r}, which no node of "
                         f"{Path(cluster).name} has ({asking} for it; the cluster's models: "
                         f"{', '.join(models) or 'none'}). Fix: change the pods' gpu_model or the cluster",
                         field=field)


def inputs_label(trace: str, cluster: str | Path | None = None, workload: str | Path | None = None) -> str:
    """How reports name the inputs: ``trace``, or e.g. ``workload.csv on cluster.yaml``."""
    if cluster is None and workload is None:
        return trace
    return f"{Path(workload).name if workload else trace} on {Path(cluster).name if cluster else trace}"


def describe(workload: Workload, nodes: NodeSpec | None = None) -> dict[str, int | float]:
    """Shape summary of a workload: pods per GPU class and request totals.

    Classes: ``cpu_only`` (no GPU share), ``sharing`` (part of one GPU),
    ``gpu_1/2/4/8`` (whole GPUs), ``gpu_other`` (any other GPU pod).
    ``gpu_capacity_pct`` (total GPU request as % of the nodes' GPUs) is present
    only when ``nodes`` with GPUs are given.
    """
    k, m = workload.num_gpu, workload.gpu_milli
    whole = m == FULL_GPU_MILLI
    classes = {
        "sharing": int(np.sum((k == 1) & (m > 0) & ~whole)),
        **{f"gpu_{g}": int(np.sum((k == g) & whole)) for g in (1, 2, 4, 8)},
    }
    request = int(workload.gpu_request.sum())
    summary: dict[str, int | float] = {
        "pods": len(workload),
        "cpu_only": int(np.sum(m == 0)),
        **classes,
        "gpu_other": int(np.sum(m > 0)) - sum(classes.values()),
        "with_gpu_model": int(np.sum(workload.gpu_model != "")),
        "gpu_request_milli": request,
        "cpu_request_milli": int(workload.cpu_milli.sum()),
        "memory_request_mib": int(workload.memory_mib.sum()),
        "distinct_shapes": len(set(shape_keys(workload))),
        "apps": len(workload.app_names),
    }
    if nodes is not None and nodes.total_gpus:
        summary["gpu_capacity_pct"] = round(100 * request / (FULL_GPU_MILLI * nodes.total_gpus), 2)
    return summary
