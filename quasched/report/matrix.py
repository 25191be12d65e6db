"""Table, CSV and heat map of a trace × policy matrix (:func:`quasched.sim.matrix.run_matrix`).

Each cell is the mean ± std over seeds of GPU allocation at 100 % and 130 %
arrived GPU request (the FGD paper's headline numbers) and of fragmentation at 130 %.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from rich.table import Table

from quasched.policies.registry import display_label
from quasched.report.plots import save_figure
from quasched.sim.matrix import MatrixResult

#: (column, curve, arrived %) of every cell
METRICS = (("alloc@100", "alloc", 100), ("alloc@130", "alloc", 130), ("frag@130", "frag_ratio", 130))


def matrix_cells(result: MatrixResult) -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """Per (trace, policy): each metric's values over seeds."""
    cells: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for task, run in zip(result.tasks, result.runs):
        for name, curve, percent in METRICS:
            cells[task.trace, task.config.policy][name].append(float(run.curves[curve][percent]))
    return {key: {name: np.asarray(values) for name, values in metrics.items()} for key, metrics in cells.items()}


def _traces_policies(cells: dict[tuple[str, str], dict]) -> tuple[list[str], list[str]]:
    return list(dict.fromkeys(t for t, _ in cells)), list(dict.fromkeys(p for _, p in cells))


def matrix_table(result: MatrixResult, metric: str = "alloc@130", title: str = "") -> Table:
    """Traces as rows, policies as columns, ``metric`` mean ± std over seeds (the best in bold)."""
    cells = matrix_cells(result)
    traces, policies = _traces_policies(cells)
    table = Table(title=title or f"{metric} (%), mean ± std over seeds")
    table.add_column("trace", style="bold")
    for policy in policies:
        table.add_column(display_label(policy), justify="right")
    for trace in traces:
        means = {p: float(np.nanmean(cells[trace, p][metric])) for p in policies if (trace, p) in cells}
        best = max(means.values())
        row = []
        for policy in policies:
            if policy not in means:
                row.append("-")
                continue
            text = f"{means[policy]:.2f}±{float(np.nanstd(cells[trace, policy][metric])):.2f}"
            row.append(f"[bold]{text}[/]" if means[policy] == best else text)
        table.add_row(trace, *row)
    return table


def write_matrix_csv(path: Path, result: MatrixResult) -> Path:
    """One row per (trace, policy): runs and mean/std of every metric."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["trace", "policy", "runs", *(f"{n}_{s}" for n, _, _ in METRICS for s in ("mean", "std"))])
        for (trace, policy), metrics in matrix_cells(result).items():
            values = [f"{stat(metrics[n]):.4f}" for n, _, _ in METRICS for stat in (np.nanmean, np.nanstd)]
            writer.writerow([trace, policy, len(metrics["alloc@130"]), *values])
    return path


def plot_matrix(path: Path, result: MatrixResult, metric: str = "alloc@130") -> Path:
    """Heat map of ``metric``'s mean, traces × policies, values printed in the cells."""
    cells = matrix_cells(result)
    traces, policies = _traces_policies(cells)
    grid = np.array([[np.nanmean(cells[t, p][metric]) if (t, p) in cells else np.nan for p in policies]
                     for t in traces])
    fig = Figure(figsize=(1.4 * len(policies) + 2.5, 0.35 * len(traces) + 1.5), dpi=120)
    ax = fig.subplots()
    image = ax.imshow(grid, aspect="auto", cmap="viridis")
    for (i, j), value in np.ndenumerate(grid):
        ax.text(j, i, f"{value:.1f}", ha="center", va="center", fontsize=7, color="white")
    ax.set_xticks(range(len(policies)), [display_label(p) for p in policies], rotation=30, ha="right")
    ax.set_yticks(range(len(traces)), traces)
    fig.colorbar(image, ax=ax, label=f"{metric} (%)")
    ax.set_title(f"{metric}, mean over seeds")
    return save_figure(fig, path)
