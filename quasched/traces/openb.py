"""Loaders for the Alibaba GPU v2023 ``openb`` node and pod lists.

Pods are converted exactly like the FGD peer's ``pod_csv_to_yaml.py``
(docs/simulator-spec.md, Inputs): ``num_gpu == 0`` drops all GPU
information; otherwise ``gpu_milli`` is clamped to 0..1000 and the ``gpu_spec`` column (the pod's ``gpu_model``) is
split on ``|``, empty tokens dropped and re-joined (duplicates kept).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from quasched.model.nodes import MAX_NODE_GPUS, NodeSpec
from quasched.model.workload import FULL_GPU_MILLI, QOS_CLASSES, Workload
from quasched.traces.table import read_table

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_OPTIONAL = ("gpu_spec", "qos", "creation_time", "deletion_time")


def load_openb_nodes(path: str | Path) -> NodeSpec:
    """Read a node list (``sn,cpu_milli,memory_mib,gpu,model``); empty model = CPU-only node ("")."""
    table = read_table(path, NODE_COLUMNS)
    name = table.names("sn")
    cpu = table.number("cpu_milli")
    memory = table.number("memory_mib")
    gpus = table.number("gpu", maximum=MAX_NODE_GPUS)
    model = table.gpu_models("model", single=True)
    table.flag("model", (gpus > 0) & (model == ""), "value is missing (the node has GPUs)")
    table.check()
    return NodeSpec(
        name=name, cpu_milli=cpu, memory_mib=memory, num_gpus=gpus, gpu_model=model,
        source=Path(path).name,
    )


def load_openb_pods(path: str | Path) -> Workload:
    """Read a pod list; ``gpu_spec`` and later columns are optional (``multigpu*`` files lack them).

    ``qos`` is kept, creation/deletion times are float seconds (NaN when empty).
    Multi-GPU pods must use whole GPUs (the peer's allocator cannot split them).
    """
    table = read_table(path, POD_COLUMNS, POD_OPTIONAL)
    name = table.names("name")
    cpu = table.number("cpu_milli")
    memory = table.number("memory_mib")
    num_gpu = table.number("num_gpu")
    milli = np.clip(table.number("gpu_milli", minimum=None), 0, FULL_GPU_MILLI)
    milli[num_gpu == 0] = 0
    table.flag("gpu_milli", (num_gpu > 1) & (milli < FULL_GPU_MILLI),
               "{value} is unsupported: a pod with num_gpu > 1 must use whole GPUs (1000)")
    spec = table.gpu_models("gpu_spec") if table.has("gpu_spec") else np.full(len(name), "", dtype=object)
    times: dict[str, Any] = {
        column: table.number(column, integer=False, empty=np.nan)
        for column in ("creation_time", "deletion_time")
        if table.has(column)
    }
    if len(times) == 2:
        table.not_before("deletion_time", times["deletion_time"], "creation_time", times["creation_time"])
    qos = table.choice("qos", QOS_CLASSES) if table.has("qos") else np.full(len(name), "", dtype=object)
    table.check()
    return Workload(
        name=name, cpu_milli=cpu, memory_mib=memory, num_gpu=num_gpu, gpu_milli=milli,
        gpu_model=np.where(num_gpu == 0, "", spec).astype(object),
        qos=qos, source=Path(path).name, **times,
    )
