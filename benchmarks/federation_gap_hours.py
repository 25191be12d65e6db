"""Where and when one scenario's gap to the oracle lies: ours − oracle dynamic carbon per cluster and per hour of
the day, and what ours would save with the true intensities instead of its forecast (``perfect=1``).

    cd benchmarks && python federation_gap_hours.py --data-dir ../../shared/traces --carbon-dir ../../shared/carbon \\
        --sets 'fresh2 seeds' --seed 24 --ours carbon-aware-backfill --out ../results/federation_fed6

Per cluster and hour of the day (UTC, scenario time): kg CO2e of ours, its perfect-intensity twin and the executable
oracle at most at ours's misses (job model: each run's kw × intensity × PUE over the hours it covers), the
decomposition of :func:`federation_gap.decompose`, and which jobs the oracle runs elsewhere or at another time. Writes
the hourly rows (CSV) and a plot. Carbon: Electricity Maps (ODbL).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from federation import scenario_arguments, scenarios
from federation_gap import decompose, per_job_kg

from quasched.federation.engine import FederationRun, run_federation
from quasched.federation.metrics import missed
from quasched.federation.oracle import at_most, replay_plans
from quasched.federation.registry import make_dispatcher
from quasched.federation.report import write_rows
from quasched.metrics.power import GRAMS_PER_KG, SECONDS_PER_HOUR
from quasched.traces.carbon import ATTRIBUTION

DAY_H = 24


def hourly_kg(run: FederationRun) -> np.ndarray:
    """``(clusters, hours)``: each placed run's kw × intensity × PUE over the part of every hour it covers, kg."""
    v = run.view
    out = np.zeros(v.intensity.shape)
    last = v.intensity.shape[1]
    for j in np.flatnonzero(np.isfinite(run.placed)):
        start, end = run.placed[j] / SECONDS_PER_HOUR, (run.placed[j] + v.duration[j]) / SECONDS_PER_HOUR
        hours = np.arange(int(start), min(int(np.ceil(end)), last))
        cover = np.minimum(hours + 1, end) - np.maximum(hours, start)
        out[run.cluster[j], hours] += v.kw[j, run.cluster[j]] * cover * v.intensity[run.cluster[j], hours] / GRAMS_PER_KG
    return out


def main() -> None:
    parser = scenario_arguments(__doc__)
    parser.add_argument("--seed", type=int, required=True, help="the scenario of --sets to diagnose")
    parser.add_argument("--ours", default="carbon-aware-backfill")
    parser.add_argument("--out", type=Path, default=Path("results/federation_fed6"))
    args = parser.parse_args()
    name, seed, sc = next(item for item in scenarios(args) if item[1] == args.seed)
    ours = run_federation(sc, make_dispatcher(args.ours), seed=seed)
    perfect = run_federation(sc, make_dispatcher(f"{args.ours}:perfect=1"), seed=seed)
    oracle = at_most(replay_plans(sc, seed=seed), int(missed(ours).sum())).run
    zones = [f"{m.carbon.zone}@{m.pue:g}" for m in sc.members]
    runs = {"ours": ours, "perfect": perfect, "oracle": oracle}
    kg = {k: hourly_kg(r) for k, r in runs.items()}
    rows = [{"set": name, "seed": seed, "cluster": zones[c], "hour_of_day": h,
             **{f"{k}_kg": float(v[c, h::DAY_H].sum()) for k, v in kg.items()},
             "intensity_mean": float(ours.view.intensity[c, h::DAY_H].mean())}
            for c in range(len(zones)) for h in range(DAY_H)]
    frame = pd.DataFrame(rows)
    write_rows(args.out / f"gap_hours_{name.replace(' ', '_')}_{seed}.csv", rows)
    print(f"{name} {seed}: {', '.join(zones)}; {len(sc.workload)} jobs, horizon {sc.horizon_hours} h")
    for k, r in runs.items():
        print(f"  {k}: {np.nansum(per_job_kg(r)):.1f} kg, misses {int(missed(r).sum())}")
    by_cluster = frame.groupby("cluster", sort=False)[["ours_kg", "perfect_kg", "oracle_kg", "intensity_mean"]].agg(
        {"ours_kg": "sum", "perfect_kg": "sum", "oracle_kg": "sum", "intensity_mean": "mean"})
    print(by_cluster.round(1).to_string())
    for label, other in (("oracle", oracle), ("perfect", perfect)):
        print(f"  ours − {label} by job class, kg:", {k: round(v, 1) for k, v in decompose(ours, other).items()})
    flexible, both = sc.slack > 0, np.isfinite(ours.placed) & np.isfinite(oracle.placed)
    shift = (oracle.placed - ours.placed) / SECONDS_PER_HOUR
    for label, kind in (("inflexible", ~flexible), ("flexible", flexible)):
        pick = both & kind
        gap = per_job_kg(ours) - per_job_kg(oracle)
        moved = pick & (ours.cluster != oracle.cluster)
        later, earlier = pick & ~moved & (shift > 0.25), pick & ~moved & (shift < -0.25)
        print(f"  {label}: {pick.sum()} jobs; oracle elsewhere {moved.sum()} ({gap[moved].sum():.1f} kg), same cluster later "
              f"{later.sum()} ({gap[later].sum():.1f} kg), earlier {earlier.sum()} ({gap[earlier].sum():.1f} kg)")
    fig, axes = plt.subplots(1, len(zones), figsize=(4 * len(zones), 3.2), sharey=True)
    for ax, zone in zip(axes, zones):
        part = frame[frame.cluster == zone]
        for k in runs:
            ax.plot(part.hour_of_day, part[f"{k}_kg"], label=k)
        ax.set_title(zone)
        ax.set_xlabel("hour of day (UTC)")
    axes[0].set_ylabel("dynamic kg CO2e (sum over days)")
    axes[0].legend()
    fig.suptitle(f"{name} {seed}: {args.ours} vs its perfect-intensity twin and the oracle")
    fig.text(0.01, 0.01, ATTRIBUTION, fontsize=6)
    fig.tight_layout()
    fig.savefig(args.out / f"gap_hours_{name.replace(' ', '_')}_{seed}.png", dpi=110)
    print(ATTRIBUTION)


if __name__ == "__main__":
    main()
