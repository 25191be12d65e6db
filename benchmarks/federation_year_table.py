"""The full-year DLRM replays of several dispatchers side by side: a table, a CSV and a plot from the outputs of
``federation_year.py`` (one ``year_<dispatcher>.txt`` each).

    python benchmarks/federation_year_table.py results/federation_fed6/year_*.txt --out results/federation_fed6/year

Plot: deadline misses against dynamic carbon (job model), the 5-minute CPU budget and ``carbon-aware``'s misses
+ 5 % marked. Carbon: Electricity Maps (ODbL).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from quasched.traces.carbon import ATTRIBUTION

FIELDS = ("missed", "wait_p95_h", "carbon_job_kg", "cpu_s", "queued", "passed", "missed_passed")


def parse(path: Path) -> dict[str, object]:
    """The summary lines ``  key: value`` of one output; ValueError naming the file and field if one is missing."""
    values = dict(re.findall(r"^  (\w+): (.+)$", path.read_text(), re.M))
    missing = [f for f in ("dispatcher", *FIELDS) if f not in values]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)} (not a complete federation_year.py output?)")
    return {"dispatcher": values["dispatcher"], **{f: float(values[f].replace(",", "")) for f in FIELDS}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outputs", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.csv and OUT.png")
    parser.add_argument("--reference", default="carbon-aware", help="misses + 5 %% marked; known figure if not run")
    parser.add_argument("--reference-missed", type=float, default=17964)
    args = parser.parse_args()
    try:
        table = pd.DataFrame([parse(p) for p in args.outputs]).sort_values("missed")
    except ValueError as err:
        raise SystemExit(str(err)) from None
    table["carbon_t"] = table.pop("carbon_job_kg") / 1000
    print(table.to_string(index=False))
    table.to_csv(args.out.with_suffix(".csv"), index=False)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for i, row in enumerate(table.itertuples()):  # a legend, not labels: close points would overlap
        over = row.cpu_s > 300
        ax.scatter(row.carbon_t, row.missed, color=plt.cm.tab10(i % 10), marker="X" if over else "o", s=60 if over else 30,
                   label=f"{row.dispatcher} ({row.cpu_s:.0f} CPU s)")
    ax.axhline(args.reference_missed * 1.05, ls="--", color="grey", label=f"{args.reference} misses + 5 %")
    ax.set_xlabel("dynamic carbon, t CO2e (job model)")
    ax.set_ylabel("deadline misses")
    ax.set_title("Full-year 4-cluster DLRM replay (×: > 300 CPU s)")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.text(0.01, 0.01, ATTRIBUTION, fontsize=6)
    fig.tight_layout()
    fig.savefig(args.out.with_suffix(".png"), dpi=120)


if __name__ == "__main__":
    main()
