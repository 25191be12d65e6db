"""How a dispatcher's ratio to the oracle is spread per scenario, by kind of set, and whether the zones' contrast explains it.

    cd benchmarks && python federation_tails.py --data-dir ../../shared/traces --carbon-dir ../../shared/carbon \
        --rows ../results/federation_nested/fresh3-9 ../results/federation_nested/fresh10 ...

Reads ``federation_rows.csv`` of earlier ``federation.py`` runs (no replay). Per scenario of the ``freshN`` sets, the
ratio is ``--ours``' job-model carbon over ``oracle@<ours>``'s (the oracle held to ours's misses). Per kind (``seeds``:
tuning zones, ``zones``: held-out zones, ``synthetic``) it prints the ratio's mean, median, 90th percentile, maximum and
the shares within 5 % and above 1.2. Contrast, from the scenario itself (intensity × PUE over the window): ``spread`` =
the dirtiest cluster's mean over the cleanest's, ``hourly`` = the mean over hours of max / min. Printed: the rank
correlation (Spearman) of the ratio with each, and the ratio by quartile of ``spread``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from federation import scenario_arguments, scenarios


def ratios(folders: list[Path], ours: str) -> pd.Series:
    """``(set, seed) -> ours / oracle@ours`` over the ``freshN`` sets of the rows files."""
    rows = pd.concat(pd.read_csv(folder / "federation_rows.csv") for folder in folders)
    rows = rows[rows.set.str.match(r"fresh\d* ")].drop_duplicates(["set", "seed", "dispatcher"])
    carbon = rows.set_index(["set", "seed", "dispatcher"])["carbon_job_kg"].unstack()
    return (carbon[ours] / carbon[f"oracle@{ours}"]).dropna()


def main() -> None:
    parser = scenario_arguments(__doc__)
    parser.add_argument("--rows", type=Path, nargs="+", required=True, help="folders holding federation_rows.csv")
    parser.add_argument("--ours", default="ours-nested")
    args = parser.parse_args()
    ratio = ratios(args.rows, args.ours)
    args.sets = ",".join(dict.fromkeys(name for name, _ in ratio.index))
    out = []
    for name, seed, scenario in scenarios(args):
        intensity = scenario.intensity(scenario.horizon_hours)
        means = intensity.mean(axis=1)
        out.append({"set": name, "seed": seed, "kind": name.split()[1], "ratio": ratio[(name, seed)],
                    "spread": means.max() / means.min(),
                    "hourly": float(np.mean(intensity.max(axis=0) / np.maximum(intensity.min(axis=0), 1e-9)))})
    table = pd.DataFrame(out)
    by_kind = table.groupby("kind").ratio
    print(pd.DataFrame({"scenarios": by_kind.size(), "mean": by_kind.mean(), "median": by_kind.median(),
                        "p90": by_kind.quantile(0.9), "max": by_kind.max(),
                        "<= 1.05": by_kind.apply(lambda r: (r <= 1.05).mean()),
                        "> 1.2": by_kind.apply(lambda r: (r > 1.2).mean())}).round(3).to_string())
    print("Spearman with the ratio:", table[["ratio", "spread", "hourly"]].corr(method="spearman")["ratio"][1:].round(3).to_dict())
    table["spread quartile"] = pd.qcut(table.spread, 4, labels=False)
    print(table.groupby("spread quartile").agg(scenarios=("ratio", "size"), spread=("spread", "median"),
                                              mean=("ratio", "mean"), within_5=("ratio", lambda r: (r <= 1.05).mean()))
          .round(3).to_string())


if __name__ == "__main__":
    main()
