"""Where ours loses carbon against the oracle: a per-job decomposition of the gap, on the tuning set only.

    python benchmarks/federation_gap.py --data-dir ../shared/traces --carbon-dir ../shared/carbon \
        --ours carbon-aware --out results/federation_fed4

Per scenario, ``ours`` (any dispatcher spec) and the executable oracle at most at ours's misses are replayed; the
gap in dynamic carbon (job model, kg) is split over the jobs placed by both: inflexible / flexible × same cluster
(the gap is then the start time: waiting or deferral timing) / another cluster; plus the jobs only one of them placed.
Also per cluster (ranked by mean intensity × PUE over the window, 0 = cleanest) the dynamic energy (kWh × PUE)
of each. Writes rows (CSV), the table and a plot. Carbon: Electricity Maps (ODbL).
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from federation import scenario_arguments, scenarios
from quasched.federation.engine import FederationRun, run_federation
from quasched.federation.metrics import missed
from quasched.federation.oracle import at_most, replay_plans
from quasched.federation.registry import make_dispatcher
from quasched.federation.report import write_rows
from quasched.federation.scenario import Scenario
from quasched.metrics.power import GRAMS_PER_KG, SECONDS_PER_HOUR
from quasched.traces.carbon import ATTRIBUTION


def per_job_kg(run: FederationRun) -> np.ndarray:
    """Each job's dynamic carbon in the job model, kg (NaN: never placed)."""
    kg = np.full(len(run.placed), np.nan)
    ok = np.flatnonzero(np.isfinite(run.placed))
    kg[ok] = run.view.run_grams(ok, run.cluster[ok], run.placed[ok]) / GRAMS_PER_KG
    return kg


def decompose(ours: FederationRun, oracle: FederationRun) -> dict[str, float]:
    """The gap (ours − oracle, kg) by job class and where it comes from; energy per cluster by cleanliness rank."""
    sc = ours.scenario
    a, b = per_job_kg(ours), per_job_kg(oracle)
    both = np.isfinite(a) & np.isfinite(b)
    flexible = sc.slack > 0
    same = ours.cluster == oracle.cluster
    out = {"ours_kg": float(np.nansum(a)), "oracle_kg": float(np.nansum(b))}
    out["gap_kg"] = out["ours_kg"] - out["oracle_kg"]
    for label, kind in (("inflexible", ~flexible), ("flexible", flexible)):
        for where, mask in (("same cluster", same), ("other cluster", ~same)):
            pick = both & kind & mask
            out[f"{label}, {where}"] = float((a[pick] - b[pick]).sum())
    out["placed by one only"] = float(np.nansum(np.where(both, 0, a)) - np.nansum(np.where(both, 0, b)))
    rank = np.argsort(np.argsort(ours.view.intensity.mean(axis=1)))
    hours = sc.duration / SECONDS_PER_HOUR
    for name, run in (("ours", ours), ("oracle", oracle)):
        ok = np.isfinite(run.placed)
        for c in range(ours.view.clusters):
            on = np.flatnonzero(ok & (run.cluster == c))
            out[f"kWh {name} rank {rank[c]}"] = float((run.view.kw[on, c] * hours[on]).sum() * sc.members[c].pue)
        out[f"missed {name}"] = int(missed(run).sum())
    return out


def _one(ours: str, item: tuple[str, int, Scenario]) -> dict:
    name, seed, scenario = item
    run = run_federation(scenario, make_dispatcher(ours), seed=seed)
    oracle = at_most(replay_plans(scenario, seed=seed), int(missed(run).sum())).run
    return {"set": name, "seed": seed, **decompose(run, oracle)}


def main() -> None:
    parser = scenario_arguments(__doc__)
    parser.set_defaults(sets="tune")
    parser.add_argument("--ours", default="carbon-aware")
    parser.add_argument("--out", type=Path, default=Path("results/federation_fed4"))
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(partial(_one, args.ours), list(scenarios(args))))
    frame = pd.DataFrame(rows)
    frame = pd.concat([frame, frame.drop(columns="seed").mean(numeric_only=True).to_frame().T.assign(set="mean")])
    label = args.ours.partition(":")[0]
    write_rows(args.out / f"gap_{label}.csv", frame.to_dict("records"))
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        print(frame.round(2).T.to_string())
    parts = ["inflexible, same cluster", "inflexible, other cluster", "flexible, same cluster",
             "flexible, other cluster", "placed by one only"]
    ax = frame.iloc[:-1].astype({"seed": int}).set_index("seed")[parts].plot.bar(stacked=True, figsize=(8, 4))
    ax.set_ylabel("ours − oracle, kg CO2e (dynamic)")
    ax.set_title(f"{args.ours} vs oracle, tuning set: where the gap comes from")
    ax.figure.text(0.01, 0.01, ATTRIBUTION, fontsize=6)
    ax.figure.tight_layout()
    ax.figure.savefig(args.out / f"gap_{label}.png", dpi=120)
    print(ATTRIBUTION)


if __name__ == "__main__":
    main()
