"""CSV outputs in the layouts of the FGD artifact (published curves, per-event logs).

Rows carry the artifact's numbered policy labels (``sc_policy`` such as ``06-FGD``).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

import numpy as np

from quasched.compat.curves import CURVES
from quasched.policies.registry import parse_spec
from quasched.sim.sweep import RunSummary

#: Curve name → file stem infix (``analysis_<infix>_discrete.csv``, ``published_<infix>_discrete.csv``).
CURVE_FILES = {"alloc": "allo", "frag_ratio": "frag_ratio", "frag_amount": "frag"}
EVENT_COLUMNS = (
    "pod", "node", "arrived", "used_nodes", "used_gpus", "used_milli", "total_gpus",
    "frag_milli", "frag_ratio", "q124",
)


def policy_label(policy: str) -> str:
    """The artifact's numbered label of a policy spec (``fgd`` → ``06-FGD``, from the registry)."""
    spec = parse_spec(policy)
    return spec.info.artifact_label if spec.label == spec.info.label else spec.label


def event_stem(policy: str, seed: int) -> str:
    """Per-run file stem of the artifact's event logs, e.g. ``FGD_42``."""
    return f"{parse_spec(policy).label}_{seed}"


def write_curves(out: Path, workload: str, tune: float, total_gpus: int,
                 runs: Sequence[RunSummary]) -> list[Path]:
    """``analysis_<curve>_discrete.csv`` files, one row per run, columns 0..130."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for curve in CURVES:
        path = out / f"analysis_{CURVE_FILES[curve]}_discrete.csv"
        n_cols = len(runs[0].curves[curve]) if runs else 0
        head = ["workload", "sc_policy", "tune", "seed"] + (["total_gpus"] if curve == "alloc" else [])
        with path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(head + [str(i) for i in range(n_cols)])
            for run in runs:
                key = [workload, policy_label(run.policy), tune, run.seed]
                key += [total_gpus] if curve == "alloc" else []
                values = ["" if np.isnan(v) else repr(float(v)) for v in run.curves[curve]]
                writer.writerow(key + values)
        paths.append(path)
    return paths


def artifact_events(run: RunSummary, total_gpus: int) -> dict[str, np.ndarray]:
    """A run's event records under the artifact's per-event column names (:data:`EVENT_COLUMNS`)."""
    log, names, pods = run.log, run.display_nodes, run.pod_names
    if log is None or names is None or pods is None:
        raise ValueError("run was summarised without its event log (use keep_logs)")
    return {
        "pod": pods[log.pod], "node": np.array([names[n] if n >= 0 else "" for n in log.node], dtype=object),
        "arrived": log.arrived_gpu_milli, "used_nodes": log.used_nodes, "used_gpus": log.gpus_on_used_nodes,
        "used_milli": log.used_gpu_milli, "total_gpus": np.full(len(log), total_gpus),
        "frag_milli": log.frag_milli, "frag_ratio": log.frag_ratio, "q124": log.q124_ratio,
    }


def write_events(out: Path, run: RunSummary, total_gpus: int) -> Path:
    """Per-event log ``<Policy>_<seed>.csv`` in the golden layout (node empty = failed)."""
    columns = artifact_events(run, total_gpus)
    path = out / f"{event_stem(run.policy, run.seed)}.csv"
    out.mkdir(parents=True, exist_ok=True)
    floats = {"frag_milli", "frag_ratio", "q124"}
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(EVENT_COLUMNS)
        for row in zip(*(columns[c] for c in EVENT_COLUMNS)):
            writer.writerow([repr(float(v)) if c in floats else v for c, v in zip(EVENT_COLUMNS, row)])
    return path
