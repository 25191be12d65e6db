"""Generic CSV outputs of a sweep: failed pods per shape and a per-run summary.

The FGD artifact's layouts (curves, per-event logs) are in :mod:`quasched.compat.artifact`.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

from quasched.sim.sweep import RunSummary


def write_failures(out: Path, runs: Sequence[RunSummary]) -> Path:
    """Failed pods per shape, one row per (policy, seed, shape)."""
    path = out / "failed_pods.csv"
    out.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["policy", "seed", "shape", "failed"])
        for run in runs:
            for shape, count in run.failed_shapes.most_common():
                writer.writerow([run.policy, run.seed, shape, count])
    return path


def write_summary(out: Path, runs: Sequence[RunSummary]) -> Path:
    """One row per run: events, placements, failures, end-state allocation and fragmentation."""
    path = out / "summary.csv"
    out.mkdir(parents=True, exist_ok=True)
    keys = list(runs[0].end_state) if runs else []
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["policy", "seed", "events", "placed", "failed", "elapsed_s", *keys])
        for run in runs:
            writer.writerow([run.policy, run.seed, run.events, run.placed, run.failed,
                             f"{run.elapsed_s:.3f}", *(run.end_state[k] for k in keys)])
    return path
