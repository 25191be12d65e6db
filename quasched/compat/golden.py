"""Comparison of runs against the FGD artifact's published curves and per-event logs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from quasched.compat.artifact import CURVE_FILES, artifact_events, policy_label
from quasched.compat.curves import CURVES
from quasched.sim.sweep import RunSummary

EVENT_EXACT = ("pod", "node", "arrived", "used_nodes", "used_gpus", "used_milli", "total_gpus")
EVENT_FLOAT = ("frag_milli", "frag_ratio", "q124")


@dataclass(frozen=True)
class CurveDiff:
    """Cells where one run's curve differs from the published row: ``(bin, published, ours)``."""
    policy: str
    seed: int
    curve: str
    mismatches: list[tuple[int, float, float]]


def published_curves(golden_dir: Path) -> dict[str, pd.DataFrame]:
    """The three published ``*_discrete.csv`` tables keyed by curve name."""
    return {c: pd.read_csv(golden_dir / f"published_{CURVE_FILES[c]}_discrete.csv") for c in CURVES}


def compare_curves(run: RunSummary, published: dict[str, pd.DataFrame]) -> list[CurveDiff]:
    """Cells of ``run`` that differ from the published row of the same policy and seed."""
    diffs = []
    for curve, table in published.items():
        row = table[(table.sc_policy == policy_label(run.policy)) & (table.seed == run.seed)]
        if row.empty:
            raise KeyError(f"no published {curve} row for {policy_label(run.policy)} seed {run.seed}")
        reference = row[[str(i) for i in range(131)]].to_numpy(float)[0]
        mine = run.curves[curve][:131]
        bad = np.flatnonzero(~((reference == mine) | (np.isnan(reference) & np.isnan(mine))))
        diffs.append(CurveDiff(run.policy, run.seed, curve,
                               [(int(i), float(reference[i]), float(mine[i])) for i in bad]))
    return diffs


def compare_events(run: RunSummary, golden_csv: Path, total_gpus: int, tol: float = 1e-6) -> dict[str, int]:
    """Mismatch count per column between ``run``'s event log and a golden per-event file."""
    ref = pd.read_csv(golden_csv, keep_default_na=False)
    mine = artifact_events(run, total_gpus)
    counts = {"events": abs(len(ref) - len(mine["pod"]))}
    n = min(len(ref), len(mine["pod"]))
    for col in EVENT_EXACT:
        counts[col] = int((ref[col].to_numpy()[:n] != mine[col][:n]).sum())
    for col in EVENT_FLOAT:
        counts[col] = int((np.abs(ref[col].to_numpy(float)[:n] - mine[col][:n]) > tol).sum())
    return counts
