"""The pod-mix sweep of ``pwrbalance`` vs ``pwrbalance2``: savings against the whole-GPU share ``D``.

    python benchmarks/power_mix.py --data-dir ../shared/traces --trace openb-default \
        --runs results/power/pwrbalance2-mix/thin0.05 ... --out results/power/pwrbalance2-mix

Reads the ``power_summary.csv`` of ``benchmarks/power.py --thin-whole S`` runs (directories named
``thin<S>``; ``thin0`` = the trace as it is), recomputes each one's ``D`` and writes ``mix.csv``,
``mix.png`` (Δ allocation at 130 % and both savings against ``D``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from power import thin_whole  # benchmarks/ is on sys.path when run as a script
from quasched.metrics.typical import TypicalPods
from quasched.policies.pwr_scarce import whole_share
from quasched.traces import catalog

COLUMNS = {"d_alloc130": "Δ alloc@130 vs FGD (points)", "saving_step_pct": "saving 20–80 %, step (%)",
           "saving_linear_pct": "saving 20–80 %, linear (%)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/traces"))
    parser.add_argument("--trace", default="openb-default")
    parser.add_argument("--runs", type=Path, nargs="+", required=True)
    parser.add_argument("--out", type=Path, default=Path("results/power/pwrbalance2-mix"))
    args = parser.parse_args()
    _, workload = catalog.load_trace(args.trace, data_dir=args.data_dir)
    parts = []
    for run in args.runs:
        share = float(run.name.removeprefix("thin"))
        d = whole_share(TypicalPods.from_workload(thin_whole(workload, share) if share else workload))
        summary = pd.read_csv(run / "power_summary.csv")
        parts.append(summary[summary.trace == args.trace].assign(thin=share, whole_share=d))
    table = pd.concat(parts).sort_values(["whole_share", "policy"], ascending=[False, True])
    table = table[table.policy != "fgd"]
    table.to_csv(args.out / "mix.csv", index=False)
    print("| D | policy | seeds | " + " | ".join(COLUMNS.values()) + " |\n|---|---|---|---|---|---|")
    for row in table.itertuples():
        print(f"| {row.whole_share:.3f} | {row.label} | {row.seeds} | "
              + f"{row.d_alloc130:+.2f} | {row.saving_step_pct:.2f} | {row.saving_linear_pct:.2f} |")
    plot(args.out / "mix.png", table, args.trace)


def plot(path: Path, table: pd.DataFrame, trace: str) -> None:
    """One panel per column of :data:`COLUMNS`, one line per policy, against ``D``."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 3.8), dpi=110, layout="constrained")
    for ax, (key, title) in zip(fig.subplots(1, len(COLUMNS)), COLUMNS.items()):
        for label, rows in table.groupby("label", sort=False):
            ax.plot(rows.whole_share, rows[key], marker="o", label=label)
        ax.set_xlabel("whole-GPU share of the typical GPU demand D")
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(f"{trace} with a share of the whole-GPU pods dropped (--thin-whole)")
    fig.savefig(path, bbox_inches="tight")


if __name__ == "__main__":
    main()
