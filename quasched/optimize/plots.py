"""Figures in the style of Qua's: jobs and distinct apps placed vs machines, one line per solver."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

METRICS = {"jobs": "Jobs placed", "apps": "Distinct apps placed", "weighted": "Priority-weighted jobs placed"}


def plot_metric(rows: list[dict], instance: str, metric: str, path: Path) -> Path:
    """One PNG: ``metric`` vs machines for each solver; MILP points marked where proven optimal."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    mine = [r for r in rows if r["instance"] == instance]
    for solver in dict.fromkeys(r["solver"] for r in mine):
        pts = sorted((r["machines"], r[metric]) for r in mine if r["solver"] == solver and r["verified"]
                     and r["status"] != "no_answer")
        if pts:
            ax.plot(*zip(*pts), marker="o", ms=4, label=solver)
    proven = sorted((r["machines"], r[metric]) for r in mine if r["solver"] == "milp" and r["status"] == "optimal")
    if proven:
        label = "proven optimum" if metric == "weighted" else "at proven weighted optimum"
        ax.plot(*zip(*proven), "k*", ms=11, label=label, zorder=5)
    if metric == "weighted":
        bounds = sorted((r["machines"], r["bound"]) for r in mine if r["solver"] == "milp" and r["bound"] is not None)
        if bounds:
            ax.plot(*zip(*bounds), "k--", lw=0.8, label="MILP upper bound")
    ax.set_xlabel("Machines")
    ax.set_ylabel(METRICS[metric])
    ax.set_title(f"{METRICS[metric]} — {instance}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path
