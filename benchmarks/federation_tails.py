"""How a dispatcher's ratio to the oracle is spread per scenario, by kind of set, and whether the zones' contrast explains it.

    cd benchmarks && python federation_tails.py --data-dir ../../shared/traces --carbon-dir ../../shared/carbon \
        --rows ../results/federation_nested/fresh3-9 ../results/federation_nested/fresh10 ...

Reads ``federation_rows.csv`` of earlier ``federation.py`` runs (no replay). Per scenario of the ``freshN`` sets, the
ratio is ``--ours``' job-model carbon over ``oracle@<ours>``'s (the oracle held to ours's misses). Per kind (``seeds``:
tuning zones, ``zones``: held-out zones, ``synthetic``) it prints the ratio's mean, median, 90th percentile, maximum and
the shares within 5 % and above 1.2. Contrast, from the scenario itself (intensity × PUE over the window): ``spread`` =
the dirtiest cluster's mean over the cleanest's, ``hourly`` = the mean over hours of max / min; and how well it can be
foreseen, ``forecast`` = ours's forecast error over the window (``federation_forecast.forecast_error_pct``). Printed: the
rank correlation (Spearman) of the ratio with each, and the ratio by quartile of ``spread`` and of ``forecast``.
Then, per kind and for the real zones together (``seeds`` + ``zones``), the mean ratio and the pooled one (summed kg)
with 95 % bootstrap intervals over the scenarios (``--bootstrap`` resamples, seeded).

``--twin SPEC`` (e.g. ``ours-nested:perfect=1``, the same rule reading the true intensities; the rows must hold it and
``oracle@SPEC``, from ``federation.py --also SPEC``) splits the gap to the oracle: per kind, the twin's ratio to the
oracle at its misses and the share of ours's pooled excess carbon the twin removes, ``Σ (ours − twin) / Σ (ours −
oracle@ours)``, the pooled ratios of both, and the scenarios where the twin's ratio is more than 0.05 below / above
ours's; over all kinds, how ours's scenarios above 1.2 fare with the twin and the reverse; per set, how many sets are
within 5 % by mean, ours against the twin.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from federation import scenario_arguments, scenarios
from federation_forecast import forecast_error_pct


def carbon_of(folders: list[Path]) -> pd.DataFrame:
    """``(set, seed) x dispatcher -> carbon_job_kg`` over the ``freshN`` sets of the rows files (first row wins)."""
    rows = pd.concat(pd.read_csv(folder / "federation_rows.csv") for folder in folders)
    rows = rows[rows.set.str.match(r"fresh\d* ")].drop_duplicates(["set", "seed", "dispatcher"])
    return rows.set_index(["set", "seed", "dispatcher"])["carbon_job_kg"].unstack()


def kind_of(set_name: str) -> str:
    """``"fresh3 synthetic"`` -> ``"synthetic"``: the kind of a ``freshN`` set (``seeds``, ``zones`` or ``synthetic``)."""
    return set_name.split()[1]


def spread_table(ratio: pd.Series, by: pd.Series) -> pd.DataFrame:
    """Mean, median, 90th percentile, maximum and the shares within 5 % and above 1.2 of ``ratio`` per group of ``by``."""
    group = ratio.groupby(by)
    return pd.DataFrame({"scenarios": group.size(), "mean": group.mean(), "median": group.median(),
                         "p90": group.quantile(0.9), "max": group.max(),
                         "<= 1.05": group.apply(lambda r: (r <= 1.05).mean()),
                         "> 1.2": group.apply(lambda r: (r > 1.2).mean())}).round(3)


def intervals(carbon: pd.DataFrame, ours: str, draws: int, seed: int = 0) -> pd.DataFrame:
    """Mean and pooled ratio of ours to the oracle at its misses, with 95 % bootstrap intervals, per kind and for
    the real zones together."""
    carbon = carbon.dropna(subset=[ours, f"oracle@{ours}"])
    kind = np.array([kind_of(name) for name, _ in carbon.index])
    rng, out = np.random.default_rng(seed), {}
    for group, mask in [*((k, kind == k) for k in sorted(set(kind))), ("real (seeds + zones)", kind != "synthetic")]:
        a, b = carbon[ours].to_numpy()[mask], carbon[f"oracle@{ours}"].to_numpy()[mask]
        pick = rng.integers(0, len(a), (draws, len(a)))
        means, pooled = (a[pick] / b[pick]).mean(axis=1), a[pick].sum(axis=1) / b[pick].sum(axis=1)
        out[group] = {"scenarios": len(a), "mean": (a / b).mean(), "mean 2.5 %": np.percentile(means, 2.5),
                      "mean 97.5 %": np.percentile(means, 97.5), "pooled": a.sum() / b.sum(),
                      "pooled 2.5 %": np.percentile(pooled, 2.5), "pooled 97.5 %": np.percentile(pooled, 97.5)}
    return pd.DataFrame(out).T.round(3)


def information(carbon: pd.DataFrame, ours: str, twin: str) -> None:
    """Print how much of ours's gap to the oracle the twin (the rule with the true intensities) closes (module docstring)."""
    carbon = carbon.dropna(subset=[ours, twin, f"oracle@{ours}", f"oracle@{twin}"])
    kind = pd.Series([kind_of(name) for name, _ in carbon.index], index=carbon.index, name="kind")
    ours_ratio, twin_ratio = (carbon[d] / carbon[f"oracle@{d}"] for d in (ours, twin))
    print(f"{twin} / oracle at its misses, per scenario:")
    print(spread_table(twin_ratio, kind).to_string())
    excess = (carbon[ours] - carbon[f"oracle@{ours}"]).groupby(kind).sum()
    closed = (carbon[ours] - carbon[twin]).groupby(kind).sum()
    print("share of ours's pooled excess over the oracle that the twin removes:", (closed / excess).round(3).to_dict())
    print("pooled, ours / twin:", {k: " / ".join(f"{g[d].sum() / g[f'oracle@{d}'].sum():.3f}" for d in (ours, twin))
                                   for k, g in carbon.groupby(kind)})
    print("scenarios where the twin is > 5 points better / worse:",
          {k: f"{(g > 0.05).sum()} / {(g < -0.05).sum()}" for k, g in (ours_ratio - twin_ratio).groupby(kind)})
    tail, twin_tail = ours_ratio > 1.2, twin_ratio > 1.2
    print(f"of ours's {tail.sum()} scenarios above 1.2, the twin has {(twin_ratio[tail] <= 1.05).sum()} within 5 % and "
          f"{(twin_ratio[tail] > 1.2).sum()} above 1.2; of the twin's {twin_tail.sum()}, ours has "
          f"{(ours_ratio[twin_tail] <= 1.05).sum()} within 5 %")
    by_set = pd.DataFrame({"ours": ours_ratio, "twin": twin_ratio}).groupby(level="set").mean()
    by_set["kind"] = [kind_of(name) for name in by_set.index]
    print("sets within 5 % by mean, ours / twin:",
          {k: f"{(g.ours <= 1.05).sum()} / {(g.twin <= 1.05).sum()} of {len(g)}" for k, g in by_set.groupby("kind")})


def main() -> None:
    parser = scenario_arguments(__doc__)
    parser.add_argument("--rows", type=Path, nargs="+", required=True, help="folders holding federation_rows.csv")
    parser.add_argument("--ours", default="ours-nested")
    parser.add_argument("--bootstrap", type=int, default=5000, help="resamples for the intervals")
    parser.add_argument("--twin", help="split the gap with this dispatcher's rows, e.g. ours-nested:perfect=1")
    args = parser.parse_args()
    carbon = carbon_of(args.rows)
    ratio = (carbon[args.ours] / carbon[f"oracle@{args.ours}"]).dropna()
    args.sets = ",".join(dict.fromkeys(name for name, _ in ratio.index))
    out = []
    for name, seed, scenario in scenarios(args):
        intensity = scenario.intensity(scenario.horizon_hours)
        means = intensity.mean(axis=1)
        out.append({"set": name, "seed": seed, "kind": kind_of(name), "ratio": ratio[(name, seed)],
                    "spread": means.max() / means.min(),
                    "hourly": float(np.mean(intensity.max(axis=0) / np.maximum(intensity.min(axis=0), 1e-9))),
                    "forecast": forecast_error_pct(scenario)})
    table = pd.DataFrame(out)
    print(spread_table(table.ratio, table.kind).to_string())
    print("Spearman with the ratio:",
          table[["ratio", "spread", "hourly", "forecast"]].corr(method="spearman")["ratio"][1:].round(3).to_dict())
    print("the same within each kind:", {kind: round(float(g.ratio.corr(g.forecast, method="spearman")), 3)
                                         for kind, g in table.groupby("kind")}, "(forecast)")
    for column in ("spread", "forecast"):
        table["quartile"] = pd.qcut(table[column], 4, labels=False)
        print(table.groupby("quartile").agg(scenarios=("ratio", "size"), **{column: (column, "median")},
                                            mean=("ratio", "mean"), within_5=("ratio", lambda r: (r <= 1.05).mean()))
              .round(3).to_string())
    print(intervals(carbon, args.ours, args.bootstrap).to_string())
    if args.twin:
        information(carbon, args.ours, args.twin)


if __name__ == "__main__":
    main()
