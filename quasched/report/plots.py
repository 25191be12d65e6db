"""Matplotlib figures written to PNG (object-oriented API: no pyplot, no global backend)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Sequence

import numpy as np
from matplotlib.figure import Figure

from quasched.policies.registry import display_label
from quasched.sim.sweep import RunSummary

_LABELS = {
    "alloc": "GPU allocation (% of capacity)",
    "frag_ratio": "GPU fragmentation ratio (% of idle)",
    "frag_amount": "Fragmented GPU (% of capacity)",
}


def plot_curves(path: Path, runs: Sequence[RunSummary], curve: str = "alloc", title: str = "") -> Path:
    """One line per policy (mean over seeds, shaded min..max) against arrived GPU request."""
    by_policy: dict[str, list[np.ndarray]] = defaultdict(list)
    for run in runs:
        by_policy[run.policy].append(run.curves[curve])
    fig = Figure(figsize=(7, 4.5), dpi=120)
    ax = fig.subplots()
    for policy, rows in by_policy.items():
        values = np.vstack(rows)
        x = np.arange(values.shape[1])
        mean = np.nanmean(values, axis=0)
        (line,) = ax.plot(x, mean, label=f"{display_label(policy)} (n={len(rows)})", lw=1.4)
        if len(rows) > 1:
            ax.fill_between(x, np.nanmin(values, 0), np.nanmax(values, 0), color=line.get_color(), alpha=0.15)
    if curve == "alloc":
        x = np.arange(0, 131)
        ax.plot(x, np.minimum(x, 100), ls=":", color="grey", lw=1, label="ideal")
    ax.set_xlabel("Arrived GPU request (% of cluster GPU capacity)")
    ax.set_ylabel(_LABELS[curve])
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return save_figure(fig, path)


def save_figure(fig: Figure, path: Path) -> Path:
    """Lay ``fig`` out and write it to ``path`` (parent folders created)."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path
