"""Rich terminal tables summarising runs per policy."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Sequence

import numpy as np
from rich.table import Table

from quasched.report.files import policy_label
from quasched.sim.sweep import RunSummary

POINTS = (100, 110, 120, 130)


def _cell(values: list[float]) -> str:
    values = [v for v in values if not np.isnan(v)]
    if not values:
        return "-"
    mean = float(np.mean(values))
    return f"{mean:.2f}" if len(values) == 1 else f"{mean:.2f} ± {float(np.std(values)):.2f}"


def policy_table(runs: Sequence[RunSummary], title: str = "", top_shapes: int = 2) -> Table:
    """Per policy: GPU allocation and fragmentation ratio at 100..130 % arrived, placements, failures."""
    groups: dict[str, list[RunSummary]] = defaultdict(list)
    for run in runs:
        groups[run.policy].append(run)
    table = Table(title=title, show_lines=False)
    table.add_column("policy", style="bold")
    table.add_column("seeds", justify="right")
    for p in POINTS:
        table.add_column(f"alloc@{p}%", justify="right")
    for p in (100, 130):
        table.add_column(f"frag@{p}%", justify="right")
    table.add_column("placed", justify="right")
    table.add_column("failed", justify="right")
    table.add_column("most failed shapes (mean per run)")
    for policy, group in groups.items():
        shapes = Counter()
        for run in group:
            shapes.update(run.failed_shapes)
        worst = ", ".join(f"{s} ×{c / len(group):.0f}" for s, c in shapes.most_common(top_shapes))
        table.add_row(
            policy_label(policy),
            str(len(group)),
            *(_cell([r.curves.alloc[p] if p < len(r.curves.alloc) else np.nan for r in group]) for p in POINTS),
            *(_cell([r.curves.frag_ratio[p] if p < len(r.curves.frag_ratio) else np.nan for r in group])
              for p in (100, 130)),
            _cell([r.placed for r in group]),
            _cell([r.failed for r in group]),
            worst or "-",
        )
    return table
