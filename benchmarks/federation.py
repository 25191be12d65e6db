"""Carbon-aware federation vs the baselines and the HiGHS oracles, on 4-cluster scenarios.

    python benchmarks/federation.py --data-dir ../shared/traces --carbon-dir ../shared/carbon --out results/federation

Zones: a seeded draw (``--zone-seed``) holds 4 of the 12 zones out; the dispatchers' defaults were chosen on
scenarios from the other 8 with seeds 1-5 only (``tune``). Sets (``--sets``, comma-separated):

- ``tune``: the 8 tuning zones, seeds 1-5; ``held-out seeds``: the same zones, seeds 6-10;
- ``held-out zones``: the 4 held-out zones, seeds 1-10; ``synthetic``: 4 synthetic zones per seed (random
  daily/seasonal shape, AR(1) noise), seeds 1-10;
- draws ``N`` = 1..15, named ``fresh seeds``, ``fresh2 seeds``, ... ``fresh15 seeds`` (and ``zones``,
  ``synthetic``): seeds ``10 N + 1`` .. ``10 N + 5`` of the tuning zones, of the held-out zones, and ``10 N + 1``
  .. ``10 N + 10`` of synthetic zones;
- ``headline`` (the default): the 33 sets of draws 3-6 and 9-15, 110 scenarios on real zones and 110 on
  synthetic intensity, the figures of BENCHMARKS.md ("Federation").

Each scenario: a ``--days`` window of openb-default from a random job's arrival, 4 clusters
(random node split, ``--capacity`` × the window's peak GPU demand), PUE 1.1-1.5, a ``--flexible`` share (0.5) of the
jobs of <= 24 h with 4-24 h of slack. Oracles: the LP bound, its plan replayed, and the cheapest
replayed derated plan missing at most as many deadlines as ours (``oracle``). Writes per-scenario rows (CSV), a summary
per set (CSV + table), the real-zone scenarios pooled with bootstrap intervals, and plots. Carbon: Electricity Maps
(ODbL).
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pandas as pd
from rich.console import Console

from quasched.federation.evaluate import evaluate
from quasched.federation.report import federation_table, plot_ratios, plot_savings, write_rows
from quasched.federation.scenario import Scenario, draw_scenario
from quasched.traces.carbon import ATTRIBUTION, carbon_zones, load_carbon
from quasched.traces.carbon_synthetic import IntensityShape, synthetic_intensity
from quasched.traces.catalog import load_trace

OURS = "carbon-aware"
#: the draws of the headline sets (module docstring)
HEADLINE = ("fresh3", "fresh4", "fresh5", "fresh6", "fresh9", "fresh10", "fresh11", "fresh12", "fresh13", "fresh14",
            "fresh15")


def synthetic_zones(seed: int, count: int = 4) -> list:
    """``count`` zones with random shapes (seeded): mean 30-700 g/kWh, daily 0-0.5, seasonal 0-0.3."""
    rng = np.random.default_rng(10_000 + seed)
    return [synthetic_intensity(IntensityShape(float(rng.uniform(30, 700)), float(rng.uniform(0, 0.5)),
                                               float(rng.uniform(0, 24)), float(rng.uniform(0, 0.3)),
                                               float(rng.uniform(0, 365)), float(rng.uniform(0.02, 0.3)),
                                               float(rng.uniform(0.8, 0.98))), 100 * seed + i, zone=f"SYN{i}")
            for i in range(count)]


def summary(rows: pd.DataFrame, ours: str, also: Sequence[str] = ()) -> pd.DataFrame:
    """Per set: mean saving, misses, late GPU-hours and p95 wait per dispatcher; ours (and ``carbon-aware`` when ours
    is another dispatcher, and ``also``) vs the oracle at ours's misses and at its own (where rows ``oracle@name``
    exist; pooled = the set's summed carbon / the oracle's), the oracle bound and greedy; CPU s per scenario."""
    table = rows.pivot_table(index="set", columns="dispatcher", values="saving_pct", aggfunc="mean", sort=False)
    per = rows.set_index(["set", "seed", "dispatcher"])
    carbon, saving = per["carbon_job_kg"].unstack(), per["saving_pct"].unstack()
    by_set = lambda frame: frame.groupby("set", sort=False)  # noqa: E731
    compared = [d for d in dict.fromkeys([ours, OURS, *also]) if d in table.columns]
    out = pd.DataFrame({
        "scenarios": by_set(rows)["seed"].nunique(),
        **{f"saving {d} %": table[d] for d in table.columns},
        **{f"{d} / {o} ({f})": getattr(by_set(carbon[d] / carbon[o]), f)()
           for d in compared for o in ("oracle", "oracle-bound") for f in ("mean", "max")},
        **{f"seeds {d} <= 1.05 oracle": by_set(carbon[d] <= 1.05 * carbon["oracle"]).sum() for d in compared},
        **{f"{d} / oracle at its misses ({f})": (by_set(carbon[d]).sum() / by_set(carbon[f"oracle@{d}"]).sum()
                                                 if f == "pooled" else getattr(by_set(carbon[d] / carbon[f"oracle@{d}"]), f)())
           for d in compared if f"oracle@{d}" in carbon for f in ("mean", "pooled", "max")},
        **{f"seeds {d} <= 1.05 oracle at its misses": by_set(carbon[d] <= 1.05 * carbon[f"oracle@{d}"]).sum()
           for d in compared if f"oracle@{d}" in carbon},
        "oracle derate (mean)": by_set(rows[rows.dispatcher == "oracle"])["derate"].mean(),
        "oracle s (mean)": by_set(rows[rows.dispatcher == "oracle"])["elapsed_s"].mean(),
        **{f"{d} - greedy (points)": table[d] - table["greedy"] for d in compared},
        **{f"seeds {d} >= greedy + 3": by_set((saving[d] - saving["greedy"]) >= 3).sum()
           for d in (*compared, "oracle", "oracle-bound")},
        **{f"missed {d}": by_set(rows[rows.dispatcher == d])["missed"].mean()
           for d in ("greedy", *compared, "oracle-plan", "oracle")},
        **{f"late GPU-h {d}": by_set(rows[rows.dispatcher == d])["late_gpu_h"].mean()
           for d in ("greedy", *compared, "oracle") if "late_gpu_h" in rows},
        **{f"p95 wait {d} h": by_set(rows[rows.dispatcher == d])["wait_p95_h"].mean()
           for d in ("greedy", *compared, "oracle")},
        **{f"cpu s {d}": by_set(rows[rows.dispatcher == d])["cpu_s"].mean() for d in compared if "cpu_s" in rows},
    })
    return out.round(2)


def pooled(rows: pd.DataFrame, ours: str, resamples: int = 5000) -> pd.DataFrame:
    """Ours's carbon over the oracle's at its misses, per group of sets (new seeds of the tuning zones, held-out zones,
    both, synthetic intensity): scenarios, mean ratio and pooled ratio (summed carbon / summed), each with a 95 %
    bootstrap interval over the scenarios (``resamples`` draws, seeded)."""
    per = rows.set_index(["set", "seed", "dispatcher"])["carbon_job_kg"].unstack()
    if f"oracle@{ours}" not in per:
        return pd.DataFrame()
    ours_kg, oracle_kg = per[ours], per[f"oracle@{ours}"]
    sets = per.index.get_level_values("set")
    groups = {"new seeds, tuning zones": sets.str.endswith(" seeds") & (sets != "held-out seeds"),
              "held-out zones": sets.str.endswith(" zones"), "synthetic intensity": sets.str.endswith(" synthetic")}
    groups = {"real zones together": groups["new seeds, tuning zones"] | groups["held-out zones"], **groups}
    rng, out = np.random.default_rng(0), {}
    for name, mask in groups.items():
        a, b = ours_kg[mask].to_numpy(), oracle_kg[mask].to_numpy()
        if not len(a):
            continue
        draw = rng.integers(0, len(a), (resamples, len(a)))
        means, pools = (a[draw] / b[draw]).mean(axis=1), a[draw].sum(axis=1) / b[draw].sum(axis=1)
        out[name] = {"scenarios": len(a), "mean ratio": (a / b).mean(), "mean 2.5 %": np.quantile(means, 0.025),
                     "mean 97.5 %": np.quantile(means, 0.975), "pooled ratio": a.sum() / b.sum(),
                     "pooled 2.5 %": np.quantile(pools, 0.025), "pooled 97.5 %": np.quantile(pools, 0.975)}
    return pd.DataFrame(out).T.round(3)


def scenario_arguments(doc: str | None) -> argparse.ArgumentParser:
    """The options that choose the scenarios (:func:`scenarios`)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/traces"))
    parser.add_argument("--carbon-dir", type=Path, default=Path("../shared/carbon"))
    parser.add_argument("--days", type=float, default=3.0)
    parser.add_argument("--capacity", type=float, default=1.5, help="each scenario's GPUs over its window's peak GPU demand")
    parser.add_argument("--flexible", type=float, default=0.5, help="share of the jobs of <= 24 h given slack (as quasched federation --flexible)")
    parser.add_argument("--zone-seed", type=int, default=11)
    parser.add_argument("--sets", default="headline", help="comma-separated sets, or 'headline' (module docstring)")
    return parser


def scenarios(args: argparse.Namespace) -> Iterator[tuple[str, int, Scenario]]:
    """``(set, seed, scenario)`` of every set of ``args.sets`` (module docstring)."""
    nodes, workload = load_trace("openb-default", args.data_dir)
    names = carbon_zones(args.carbon_dir)
    held = sorted(np.random.default_rng(args.zone_seed).choice(names, 4, replace=False).tolist())
    real = {z: load_carbon(z, args.carbon_dir) for z in names}
    tuning = [real[z] for z in names if z not in held]
    sets = {"tune": (lambda s: tuning, range(1, 6)), "held-out seeds": (lambda s: tuning, range(6, 11)),
            "held-out zones": (lambda s: [real[z] for z in held], range(1, 11)),
            "synthetic": (synthetic_zones, range(1, 11))}
    for i, fresh in enumerate(("fresh", "fresh2", "fresh3", "fresh4", "fresh5", "fresh6", "fresh7", "fresh8", "fresh9", "fresh10",
                                 "fresh11", "fresh12", "fresh13", "fresh14", "fresh15"), 1):  # seeds 10 i + 1 ...
        first = 10 * i + 1
        sets |= {f"{fresh} seeds": (lambda s: tuning, range(first, first + 5)),
                 f"{fresh} zones": (lambda s: [real[z] for z in held], range(first, first + 5)),
                 f"{fresh} synthetic": (synthetic_zones, range(first, first + 10))}
    print(f"held-out zones: {', '.join(held)}; tuning zones: {', '.join(z.zone for z in tuning)}")
    wanted = [s for s in args.sets.split(",") if s != "headline"]
    if "headline" in args.sets.split(","):
        wanted += [f"{f} {kind}" for f in HEADLINE for kind in ("seeds", "zones", "synthetic")]
    for name in wanted:
        zones_of, seeds = sets[name]
        for seed in seeds:
            yield name, seed, draw_scenario(nodes, workload, zones_of(seed), seed, 4, args.capacity, args.days,
                                            args.flexible)


def _evaluate(dispatchers: list[str], policy: str, ours: str, also: list[str], item: tuple[str, int, Scenario]) -> list[dict]:
    name, seed, scenario = item
    compared = list(dict.fromkeys(d for d in (OURS, *also, ours) if d in dispatchers))
    return evaluate(scenario, dispatchers, policy, seed, equal_to=ours, also_at=compared, set=name)


def read_rows(path: Path) -> list[dict]:
    """Rows of an earlier ``federation_rows.csv``; files from before the ``highspy`` column say "unrecorded"."""
    frame = pd.read_csv(path).drop(columns="attribution")
    if "highspy" not in frame:
        frame["highspy"] = "unrecorded"
    return frame.to_dict("records")


def main() -> None:
    parser = scenario_arguments(__doc__)
    parser.add_argument("--out", type=Path, default=Path("results/federation"))
    parser.add_argument("--ours", default="carbon-defer", help="spec of our dispatcher, e.g. carbon-defer:perfect=true "
                        "(the oracle is held to its misses; carbon-aware is always run too)")
    parser.add_argument("--also", default="", help="more dispatchers to run and compare with the oracle (comma-separated)")
    parser.add_argument("--policy", default="fgd")
    parser.add_argument("--rows", type=Path, help="summarise this federation_rows.csv instead of running")
    parser.add_argument("--workers", type=int, default=1, help="scenarios evaluated in parallel (processes)")
    args = parser.parse_args()
    label = args.ours.partition(":")[0]  # rows name ours by its dispatcher; carbon-aware runs beside any other
    also = [d for d in args.also.split(",") if d]
    dispatchers = ["proportional", "least-loaded", "greenest", "greedy", *([OURS] if label != OURS else []), *also, args.ours]
    rows = read_rows(args.rows) if args.rows else []
    todo = [] if args.rows else list(scenarios(args))
    run = partial(_evaluate, dispatchers, args.policy, args.ours, also)
    with ProcessPoolExecutor(args.workers) as pool:  # rows are written as scenarios finish (--rows re-summarises)
        for (name, seed, scenario), scenario_rows in zip(todo, pool.map(run, todo)):
            rows += scenario_rows
            write_rows(args.out / "federation_rows.csv", rows)
            print(f"{name} seed {seed}: {len(scenario.workload)} jobs", flush=True)
    frame = pd.DataFrame(rows).replace({"dispatcher": {args.ours: label, f"oracle@{args.ours}": f"oracle@{label}"}})
    result = summary(frame, label, also)
    Console(width=200).print(federation_table(frame.to_dict("records")))
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        print(result.T.to_string())
    write_rows(args.out / "federation_rows.csv", frame.to_dict("records"))
    result.T.to_csv(args.out / "federation_summary.csv")
    together = pooled(frame, label)
    print(together.to_string())
    together.to_csv(args.out / "federation_pooled.csv")
    for name in frame["set"].unique():
        plot_savings(args.out / f"savings_{name.replace(' ', '_')}.png", frame[frame.set == name].to_dict("records"),
                     title=f"{name}: {args.days:g}-day windows, 4 clusters", ours=label)
    plot_ratios(args.out / "ratios.png", frame.to_dict("records"), list(dict.fromkeys([OURS, *also, label])),
                title=f"carbon / the oracle's at the same misses, {args.days:g}-day windows, 4 clusters")
    print(f"ours = {args.ours}. saving = 1 - dynamic kg CO2e (job model) / proportional split's. {ATTRIBUTION}")


if __name__ == "__main__":
    main()
