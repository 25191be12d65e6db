"""Where a policy's linear-model power exceeds the linear floor, by GPU model (issue 11 item 2).

    python benchmarks/power_decompose.py --data-dir ../shared/traces --trace openb-default --seed 42 \
        --policies pwrbalance pwrbalance2 --out results/power/decompose

One arrival experiment per policy (``--rng go``, tune 1.3). At each ``--points`` arrived load
(% of GPU capacity, bin means as :mod:`benchmarks.power`): the GPUs' worth of allocated milli
per GPU model against the cheapest-first fill of the same total
(:mod:`quasched.policies.pwr_bound`), the excess watts ``swing_m · (milli_m − floor_m)`` it
costs, the CPU excess (working-core rounding: linear power − floor − GPU excess), and the GPUs'
worth on each model held by pods that fit an empty node of *that model only* ("only"). Writes
``decompose.csv`` and ``decompose.png`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from quasched.metrics.curves import arrival_bins
from quasched.metrics.power import PWR_MODEL, WATTS_PER_KW
from quasched.model.cluster import NodeSpec
from quasched.model.workload import FULL_GPU_MILLI, Workload
from quasched.policies.pwr_bound import linear_power_floor, single_home
from quasched.sim.arrival import ExperimentConfig, run_experiment
from quasched.traces import catalog


def decompose(nodes: NodeSpec, workload: Workload, policy: str, seed: int, points: list[int]) -> list[dict]:
    """The module docstring's rows of one run."""
    run = run_experiment(nodes, workload, ExperimentConfig(policy=policy, seed=seed, rng="go"))
    models = sorted(set(nodes.gpu_model), key=str)
    node_model = np.array([models.index(m) for m in nodes.gpu_model])
    idle, full = PWR_MODEL.gpu_watts(models)
    swing = full - idle
    capacity = np.bincount(node_model, np.asarray(nodes.num_gpus, float), len(models)) * FULL_GPU_MILLI
    ev, pods = run.events, run.workload
    placed = ev.node >= 0
    milli = np.where(placed, np.asarray(pods.gpu_request)[ev.pod], 0)
    onehot = np.zeros((len(ev), len(models)))
    onehot[np.flatnonzero(placed), node_model[ev.node[placed]]] = 1
    per_model = np.cumsum(onehot * milli[:, None], axis=0)
    only = np.cumsum(onehot * (milli * (single_home(nodes, pods)[ev.pod] != ""))[:, None], axis=0)
    order = np.argsort(swing, kind="stable")
    edges = np.cumsum(capacity[order])
    floor = np.empty_like(per_model)
    floor[:, order] = np.clip(per_model.sum(axis=1)[:, None] - (edges - capacity[order])[None, :], 0, capacity[order])
    cpu_floor = ev.cpu_alloc_pct / 100 * float(np.sum(nodes.cpu_milli))
    total_excess = ev.power_linear_w - linear_power_floor(nodes, ev.used_gpu_milli, cpu_floor)
    gpu_excess = (per_model - floor) @ swing / FULL_GPU_MILLI
    rows = []
    bins = dict(arrival_bins(ev.arrived_gpu_milli, nodes.total_gpus))
    for k in points:
        m = bins[k]
        for i, name in enumerate(models):
            rows.append({"policy": policy, "seed": seed, "arrived_pct": k, "model": name,
                         "gpus": per_model[m, i].mean() / FULL_GPU_MILLI, "floor_gpus": floor[m, i].mean() / FULL_GPU_MILLI,
                         "only_gpus": only[m, i].mean() / FULL_GPU_MILLI,
                         "excess_kw": swing[i] * (per_model[m, i] - floor[m, i]).mean() / FULL_GPU_MILLI / WATTS_PER_KW})
        rows.append({"policy": policy, "seed": seed, "arrived_pct": k, "model": "CPU rounding", "gpus": np.nan,
                     "floor_gpus": np.nan, "only_gpus": np.nan,
                     "excess_kw": (total_excess[m] - gpu_excess[m]).mean() / WATTS_PER_KW})
    return rows


def plot(path: Path, table: pd.DataFrame, title: str) -> None:
    """Excess kW by model at each point, stacked (negative parts below 0), one panel per policy."""
    from matplotlib.figure import Figure

    policies = list(dict.fromkeys(table.policy))
    fig = Figure(figsize=(5 * len(policies), 4), dpi=110)
    axes = np.atleast_1d(fig.subplots(1, len(policies)))
    for ax, policy in zip(axes, policies):
        wide = table[table.policy == policy].pivot(index="arrived_pct", columns="model", values="excess_kw")
        up, down = np.zeros(len(wide)), np.zeros(len(wide))  # positive parts stack up, negative ones down
        for name in wide.columns:
            kw = wide[name].to_numpy()
            ax.bar(wide.index.astype(str), kw, bottom=np.where(kw >= 0, up, down), label=name)
            up, down = up + np.maximum(kw, 0), down + np.minimum(kw, 0)
        ax.set_title(policy)
        ax.set_xlabel("arrived GPU request (% of capacity)")
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("linear power above the floor (kW)")
    axes[-1].legend(fontsize=7)
    fig.suptitle(title)
    fig.savefig(path, bbox_inches="tight")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/traces"))
    parser.add_argument("--trace", default="openb-default")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--policies", nargs="+", default=["pwrbalance"])
    parser.add_argument("--points", nargs="+", type=int, default=[20, 35, 50, 65, 80])
    parser.add_argument("--out", type=Path, default=Path("results/power/decompose"))
    args = parser.parse_args()
    nodes, workload = catalog.load_trace(args.trace, data_dir=args.data_dir)
    table = pd.DataFrame([r for p in args.policies for r in decompose(nodes, workload, p, args.seed, args.points)])
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "decompose.csv", index=False)
    plot(args.out / "decompose.png", table, f"{args.trace}, seed {args.seed}: linear power above the floor")
    wide = table.pivot_table(index=["policy", "arrived_pct"], columns="model", values="excess_kw", sort=False)
    wide.insert(0, "total", wide.sum(axis=1))
    gpus = table.dropna().pivot_table(index=["policy", "arrived_pct"], columns="model", values=["gpus", "only_gpus"],
                                      sort=False)
    print("excess kW over the linear floor\n" + wide.round(2).to_string())
    print("\nGPUs' worth allocated per model (only: pods only that model holds)\n" + gpus.round(1).to_string())


if __name__ == "__main__":
    main()
