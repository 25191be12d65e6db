"""Rich terminal tables summarising runs per policy."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Sequence

import numpy as np
from rich.table import Table

from quasched.policies.registry import display_label
from quasched.sim.sweep import RunSummary

POINTS = (100, 110, 120, 130)


def _cell(values: list[float], digits: int = 2) -> str:
    """Mean ± std of ``values`` (NaNs left out) with ``digits`` decimals; one value alone."""
    values = [v for v in values if not np.isnan(v)]
    if not values:
        return "-"
    mean = float(np.mean(values))
    return f"{mean:.{digits}f}" if len(values) == 1 else f"{mean:.{digits}f}±{float(np.std(values)):.{digits}f}"


def _count(values: list[float]) -> str:
    """Counts (pods placed, failed) per run: a whole number for one run, else mean ± std to one decimal."""
    return _cell(values, 0 if len(values) == 1 else 1)


def _groups(runs: Sequence[RunSummary]) -> dict[str, list[RunSummary]]:
    groups: dict[str, list[RunSummary]] = defaultdict(list)
    for run in runs:
        groups[run.policy].append(run)
    return groups


def _at(curve: np.ndarray, percent: int) -> float:
    return float(curve[percent]) if percent < len(curve) else float("nan")


def policy_table(runs: Sequence[RunSummary], title: str = "") -> Table:
    """Per policy (mean ± std over seeds): GPU allocation % and fragmentation ratio % at
    100..130 % arrived GPU request, pods placed and failed."""
    table = Table(title=title)
    table.add_column("policy", style="bold")
    table.add_column("runs", justify="right")
    for p in POINTS:
        table.add_column(f"alloc\n@{p}%", justify="right")
    for p in (100, 130):
        table.add_column(f"frag\n@{p}%", justify="right")
    table.add_column("placed", justify="right")
    table.add_column("failed", justify="right")
    for policy, group in _groups(runs).items():
        table.add_row(
            display_label(policy),
            str(len(group)),
            *(_cell([_at(r.curves.alloc, p) for r in group]) for p in POINTS),
            *(_cell([_at(r.curves.frag_ratio, p) for r in group]) for p in (100, 130)),
            _count([r.placed for r in group]),
            _count([r.failed for r in group]),
        )
    return table


def failure_table(runs: Sequence[RunSummary], top: int = 3) -> Table:
    """The pod shapes that failed most, per policy (mean count per run)."""
    table = Table(title="failed pods by shape (mean per run)")
    table.add_column("policy", style="bold")
    table.add_column("shape")
    table.add_column("failed", justify="right")
    for policy, group in _groups(runs).items():
        shapes: Counter = Counter()
        for run in group:
            shapes.update(run.failed_shapes)
        for shape, count in shapes.most_common(top):
            table.add_row(display_label(policy), shape, f"{count / len(group):.{0 if len(group) == 1 else 1}f}")
    return table
