"""Table, CSV and plots of federation rows (:func:`~quasched.federation.evaluate.evaluate`).

Every output carries the carbon data's attribution (Electricity Maps, ODbL).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from rich.table import Table

from quasched.optimize.provenance import highs_version
from quasched.traces.carbon import ATTRIBUTION

COLUMNS = (
    ("saving %", "saving_pct", "{:.1f}"),
    ("dyn kg (job)", "carbon_job_kg", "{:,.1f}"),
    ("dyn kg (linear)", "carbon_dyn_linear_kg", "{:,.1f}"),
    ("dyn kg (step)", "carbon_dyn_step_kg", "{:,.1f}"),
    ("total kg (linear)", "carbon_total_linear_kg", "{:,.1f}"),
    ("total kWh (linear)", "energy_total_linear_kwh", "{:,.0f}"),
    ("missed", "missed", "{:,}"),
    ("late GPU-h", "late_gpu_h", "{:,.1f}"),
    ("wait p50 h", "wait_p50_h", "{:.2f}"),
    ("wait p95 h", "wait_p95_h", "{:.2f}"),
    ("time s", "elapsed_s", "{:.1f}"),
)


def federation_table(rows: Sequence[dict], title: str = "") -> Table:
    """One line per row: carbon (dynamic, total), energy, deadline misses, waits."""
    table = Table(title=title, caption=ATTRIBUTION)
    for header in ("seed", "dispatcher", *(c[0] for c in COLUMNS)):
        table.add_column(header, justify="left" if header == "dispatcher" else "right")
    for row in rows:
        cells = ["-" if key not in row or row[key] != row[key] else fmt.format(row[key]) for _, key, fmt in COLUMNS]
        table.add_row(str(row.get("seed", "")), str(row["dispatcher"]), *cells)
    return table


def write_rows(path: Path, rows: Sequence[dict]) -> Path:
    """All rows as CSV, with an ``attribution`` column and the ``highspy`` version the oracle rows were solved with
    (the installed one, unless a row read back from an earlier file carries its own)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{**r, "attribution": ATTRIBUTION, "highspy": r.get("highspy", highs_version())}
                  for r in rows]).to_csv(path, index=False)
    return path


def label_bars(ax: Axes, names: Sequence[str]) -> None:
    """One label per bar, slanted and anchored at its bar's centre so that long dispatcher names never overlap."""
    ax.set_xticks(range(len(names)), names, rotation=35, ha="right", rotation_mode="anchor")


def plot_savings(path: Path, rows: Sequence[dict], title: str = "", ours: str | None = None) -> Path:
    """Saving vs proportional split per dispatcher (mean over seeds, bar, ``ours`` in green; every seed, dots)."""
    frame = pd.DataFrame(list(rows))
    order = list(dict.fromkeys(frame["dispatcher"]))
    fig = Figure(figsize=(max(8.0, 0.65 * len(order)), 4.8), dpi=120)  # room for every rotated label
    ax = fig.subplots()
    for i, name in enumerate(order):
        values = frame.loc[frame["dispatcher"] == name, "saving_pct"].to_numpy(dtype=float)
        ax.bar(i, np.nanmean(values), color="tab:green" if name == ours else "tab:grey", alpha=0.7)
        ax.plot(np.full(len(values), i), values, "k.", ms=4)
    label_bars(ax, order)
    ax.set_ylabel("dynamic-carbon saving vs proportional (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def plot_allocation(path: Path, rows: Sequence[dict], title: str = "") -> Path:
    """Share of the GPU-hours per cluster and dispatcher (stacked bars) of one scenario's rows."""
    shares = {r["dispatcher"]: {k[len("gpu_share_"):-len("_pct")]: r[k] for k in r
                                if k.startswith("gpu_share_") and r[k] == r[k]} for r in rows}
    shares = {d: s for d, s in shares.items() if s}
    fig = Figure(figsize=(max(8.0, 0.65 * len(shares) + 2), 4.8), dpi=120)
    ax = fig.subplots()
    bottom = np.zeros(len(shares))
    for cluster in dict.fromkeys(c for s in shares.values() for c in s):
        values = np.array([s.get(cluster, 0.0) for s in shares.values()])
        ax.bar(range(len(shares)), values, bottom=bottom, label=cluster)
        bottom += values
    label_bars(ax, list(shares))
    ax.set_ylabel("share of GPU-hours (%)")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, never over them
    return _save(fig, path)


def plot_ratios(path: Path, rows: Sequence[dict], dispatchers: Sequence[str], title: str = "") -> Path:
    """Per set, each dispatcher's dynamic carbon / the oracle's (mean, bar; every scenario, dots), with the 1.05 goal;
    the oracle at that dispatcher's own misses where the rows have ``oracle@name``."""
    frame = pd.DataFrame(list(rows))
    carbon = frame.pivot_table(index=["set", "seed"], columns="dispatcher", values="carbon_job_kg", sort=False)
    sets = list(dict.fromkeys(frame["set"]))
    fig = Figure(figsize=(max(10.0, 0.8 * len(sets) + 3), 4.8), dpi=120)
    ax = fig.subplots()
    width = 0.8 / len(dispatchers)
    for k, name in enumerate(dispatchers):
        ratio = carbon[name] / carbon[f"oracle@{name}" if f"oracle@{name}" in carbon else "oracle"]
        for i, group in enumerate(sets):
            x = i + (k - (len(dispatchers) - 1) / 2) * width
            ax.bar(x, ratio[group].mean(), width, color=f"C{k}", alpha=0.7, label=name if i == 0 else None)
            ax.plot(np.full(len(ratio[group]), x), ratio[group], "k.", ms=3)
    ax.axhline(1.05, color="tab:red", lw=1, ls="--", label="oracle + 5 %")
    label_bars(ax, sets)
    ax.set_ylabel("dynamic carbon / oracle's")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, never over them
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def _save(fig: Figure, path: Path) -> Path:
    """Adds the attribution and writes ``fig`` to ``path``."""
    fig.text(0.01, 0.01, ATTRIBUTION, fontsize=6)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path
