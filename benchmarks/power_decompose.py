"""Where a policy's linear-model power exceeds the reachable floor, by component (issue 11 item 2).

    python benchmarks/power_decompose.py --data-dir ../shared/traces --traces openb-default --seeds 42-45 \
        --policies pwrbalance2 --baseline results/power/floor/power_curves.csv --out results/power/decompose

One arrival experiment per policy and seed (``--rng go``, tune 1.3). At every event the policy's linear
power minus the *reachable* floor (:mod:`quasched.policies.pwr_bound`: the pods only one GPU model can
hold pinned there, the rest cheapest first, CPU counted exactly) splits exactly into

- GPU idle: 0 (every GPU draws its idle power under any placement; checked, not assumed);
- GPU dynamic, per GPU model: ``swing_m · (milli_m − fill_m) / 1000`` (``fill_m``: the floor's milli there);
- CPU working cores, per GPU model of the node: ``(full − idle) / cores_per_socket`` × the residue
  ``working cores − allocated vCPU / 2 = ⌈k⌉ − k`` (``k``: the node's allocated cores) summed over its nodes.

Each component is reported as points of the 20..80 % saving (its watts over FGD's linear power of the
same seed and bin, averaged over the bins as ``benchmarks/power.py``'s saving, so the components sum
to reachable − linear saving), as kW at ``--points``, with the nodes that hold CPU and their mean
residue. Writes ``decompose.csv`` (points per policy, component and seed), ``decompose_points.csv`` (kW at
``--points``), ``decompose.png`` and, for reuse, the per-bin ``decompose_bins.csv`` (large: keep it local);
prints the tables.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from quasched.metrics.power import MILLI_PER_VCPU, PWR_MODEL, VCPUS_PER_CORE, WATTS_PER_KW
from quasched.model.nodes import NodeSpec
from quasched.model.workload import FULL_GPU_MILLI, Workload
from quasched.policies.pwr_bound import floor_fill, linear_power_floor, single_home
from quasched.sim.arrival import ExperimentConfig
from quasched.sim.records import EventRecords
from quasched.sim.sweep import run_sweep
from quasched.traces import catalog

from own_policy import sweep_arguments  # benchmarks/ is on sys.path when run as a script
from power import MAX_PERCENT, SAVING_FROM, SAVING_TO, baseline_curves, binned, pod_rows

MILLI_PER_CORE = MILLI_PER_VCPU * VCPUS_PER_CORE
CORE_W = (PWR_MODEL.cpu.full_w - PWR_MODEL.cpu.idle_w) / PWR_MODEL.cpu.cores_per_socket


def core_residue(nodes: NodeSpec, log: EventRecords, cpu: np.ndarray, models: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per event and GPU model: the working-core residue ``Σ ⌈k⌉ − k`` (cores) of its nodes and how many hold CPU."""
    node_model = np.array([models.index(m) for m in nodes.gpu_model])
    cap = np.asarray(nodes.cpu_milli, dtype=np.int64)
    cores = -(-cap // MILLI_PER_CORE)
    alloc, resid = np.zeros(len(cap), dtype=np.int64), np.zeros(len(cap))
    residue, active = np.zeros((len(log), len(models))), np.zeros((len(log), len(models)))
    now_r, now_a = np.zeros(len(models)), np.zeros(len(models))
    for e, (node, pod) in enumerate(zip(log.node.tolist(), log.pod.tolist())):
        if node >= 0 and cpu[pod] > 0:
            m = node_model[node]
            now_a[m] += alloc[node] == 0
            alloc[node] += cpu[pod]
            r = cores[node] - (cap[node] - alloc[node]) // MILLI_PER_CORE - alloc[node] / MILLI_PER_CORE
            now_r[m] += r - resid[node]
            resid[node] = r
        residue[e], active[e] = now_r, now_a
    return residue, active


def components(nodes: NodeSpec, workload: Workload, log: EventRecords, names: np.ndarray) -> dict[str, np.ndarray]:
    """Per event: W above the reachable floor by component (module docstring), and the nodes holding CPU."""
    rows = pod_rows(workload, names)
    milli = np.asarray(workload.gpu_request)[rows]
    cpu = np.asarray(workload.cpu_milli)[rows]
    homes = single_home(nodes, workload)[rows]
    models = sorted(set(nodes.gpu_model))
    node_model = np.array([models.index(m) for m in nodes.gpu_model])
    placed = log.node >= 0
    onehot = np.zeros((len(log), len(models)))
    onehot[np.flatnonzero(placed), node_model[log.node[placed]]] = 1
    per_model = np.cumsum(onehot * milli[log.pod][:, None], axis=0)
    pinned_all = np.cumsum(onehot * (milli[log.pod] * (homes[log.pod] != ""))[:, None], axis=0)
    pinned = {m: pinned_all[:, i] for i, m in enumerate(models)}
    _, fill = floor_fill(nodes, log.used_gpu_milli, pinned=pinned)
    idle, full = PWR_MODEL.gpu_watts(models)
    cpu_alloc = log.cpu_alloc_pct / 100 * float(np.sum(nodes.cpu_milli))
    total = log.power_linear_w - linear_power_floor(nodes, log.used_gpu_milli, cpu_alloc, pinned=pinned)
    residue, active = core_residue(nodes, log, cpu, models)
    out = {f"GPU {m}": (full - idle)[i] * (per_model[:, i] - fill[:, i]) / FULL_GPU_MILLI for i, m in enumerate(models)}
    out |= {f"CPU cores on {m}": CORE_W * residue[:, i] for i, m in enumerate(models)}
    out["GPU idle"] = total - sum(out.values())  # 0 up to rounding (checked by the caller)
    out["nodes holding CPU"], out["residue cores"] = active.sum(axis=1), residue.sum(axis=1)
    return out


def main() -> None:
    parser = sweep_arguments(__doc__, ("openb-default",), ("pwrbalance2",))
    parser.add_argument("--baseline", type=Path, required=True, help="power_curves.csv with FGD's curves")
    parser.add_argument("--points", nargs="+", type=int, default=[20, 35, 50, 65, 80])
    parser.add_argument("--out", type=Path, default=Path("results/power/decompose"))
    args = parser.parse_args()
    trace = args.traces[0]
    nodes, workload = catalog.load_trace(trace, data_dir=args.data_dir)
    fgd = baseline_curves(args.baseline, trace, args.seeds)
    runs = run_sweep(nodes, workload, args.policies, args.seeds, ExperimentConfig(rng="go"), workers=args.workers,
                     keep_logs=True)
    rows = []
    for run in runs:
        assert run.log is not None and run.pod_names is not None
        parts = components(nodes, workload, run.log, run.pod_names)
        if np.abs(parts["GPU idle"]).max() > 1e-3:
            raise SystemExit(f"{run.policy} seed {run.seed}: components do not add up ({np.abs(parts['GPU idle']).max():.3g} W)")
        base = fgd[("fgd", run.seed)]["power_linear_kw"] * WATTS_PER_KW
        for name, values in parts.items():
            per_bin = binned(run.log, values, nodes.total_gpus)
            rows += [{"policy": run.policy, "seed": run.seed, "arrived_pct": k, "component": name, "value": per_bin[k],
                      "points": 100 * per_bin[k] / base[k]} for k in range(MAX_PERCENT + 1)]
    table = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "decompose_bins.csv", index=False)
    report(table, args.points, args.out, f"{trace}, seeds {args.seeds[0]}..{args.seeds[-1]}")


def report(table: pd.DataFrame, points: list[int], out: Path, title: str) -> None:
    """Write and print the points-of-saving table (window mean, per seed then mean) and kW at ``points``; plot kW
    by component."""
    watts = table[~table.component.isin(["nodes holding CPU", "residue cores"])]
    window = watts[watts.arrived_pct.between(SAVING_FROM, SAVING_TO)]
    per_seed = window.groupby(["policy", "component", "seed"]).points.mean().unstack("seed")
    per_seed["mean"] = per_seed.mean(axis=1)
    per_seed = per_seed[per_seed["mean"].abs() > 5e-4]
    per_seed.to_csv(out / "decompose.csv")
    print(f"points of the {SAVING_FROM}-{SAVING_TO} % linear saving lost to each component (reachable - linear)\n"
          + per_seed.round(3).to_string())
    at = table[table.arrived_pct.isin(points)]
    kw = at.assign(value=np.where(at.component.str.startswith(("GPU", "CPU")), at.value / WATTS_PER_KW, at.value))
    wide = kw.groupby(["policy", "arrived_pct", "component"]).value.mean().unstack("component")
    wide = wide.loc[:, wide.abs().max() > 5e-3]
    wide.to_csv(out / "decompose_points.csv")
    print("\nkW above the reachable floor (mean over seeds); nodes holding CPU; their residue (cores)\n"
          + wide.round(2).to_string())
    from matplotlib.figure import Figure

    policies = list(dict.fromkeys(table.policy))
    fig = Figure(figsize=(5 * len(policies), 4), dpi=110)
    axes = np.atleast_1d(fig.subplots(1, len(policies), sharey=True))
    for ax, policy in zip(axes, policies):
        mean = window[window.policy == policy].groupby(["arrived_pct", "component"]).value.mean().unstack() / WATTS_PER_KW
        mean = mean.loc[:, mean.abs().max() > 5e-3]
        up, down = np.zeros(len(mean)), np.zeros(len(mean))  # positive parts stack up, negative ones down
        for name in mean.columns:
            kw_ = mean[name].to_numpy()
            ax.bar(mean.index, kw_, bottom=np.where(kw_ >= 0, up, down), width=1.0, label=name)
            up, down = up + np.maximum(kw_, 0), down + np.minimum(kw_, 0)
        ax.set_title(policy)
        ax.set_xlabel("arrived GPU request (% of capacity)")
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("linear power above the reachable floor (kW)")
    axes[-1].legend(fontsize=7)
    fig.suptitle(title)
    fig.savefig(out / "decompose.png", bbox_inches="tight")


if __name__ == "__main__":
    main()
