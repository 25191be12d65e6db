"""Power-aware placement on the FGD arrival experiment: PWR, the PWR+FGD mixes and ``power`` against FGD.

    python benchmarks/power.py --data-dir ../shared/traces --seeds 42-51
    python benchmarks/power.py --traces openb-default --seeds 42-43 --policies fgd pwr pwr:fgd=900

For every trace, policy and seed (``--rng go``, tune 1.3): modelled cluster power (PWR's step
model and the linear fractional model, :mod:`quasched.metrics.power`) per arrived-GPU-request
bin 0..130 % (bin means, as the allocation curves), the allocation at 100 % and 130 % arrived,
and the power saving against FGD of the same seed (same arrivals and node ranks) averaged over
the 20..80 % bins. "linear floor": the saving the least linear-model power any placement of the
same allocated GPU and CPU would reach (:mod:`quasched.policies.pwr_bound`, a relaxation), against
FGD's linear power; "reachable": the same with the pods that only one GPU model can hold kept on it.
"≥ goal": seeds whose linear saving is at least ``GOAL`` %. Writes ``power_curves.csv`` (one row per
trace, policy, seed and bin), ``power_seeds.csv`` (per seed), ``power_summary.csv`` and
``power_<trace>.png`` to ``--out`` and prints a markdown table.
``--thin-whole S``: drop the share ``S`` of the whole-GPU pods (a fixed draw) from every trace first,
so the whole-GPU share ``D`` of the demand falls (the mix sweep of ``power``'s scarcity price;
the table's header gives ``D``; run FGD, no ``--baseline``). ``--baseline CSV``: FGD's curves from an earlier run's ``power_curves.csv`` (same traces and seeds;
FGD is deterministic per seed) instead of running FGD again.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pandas as pd

from quasched.metrics.curves import arrival_bins
from quasched.metrics.power import WATTS_PER_KW
from quasched.metrics.typical import TypicalPods
from quasched.model.nodes import NodeSpec
from quasched.model.workload import FULL_GPU_MILLI, Workload
from quasched.policies.pwr_bound import linear_power_floor, single_home
from quasched.policies.pwr_scarce import whole_share
from quasched.policies.registry import parse_spec
from quasched.sim.arrival import ExperimentConfig
from quasched.sim.records import EventRecords
from quasched.sim.sweep import run_sweep
from quasched.traces import catalog

from placement import sweep_arguments  # benchmarks/ is on sys.path when run as a script

DEFAULT_TRACES = ("openb-default", "openb-gpuspec33", "openb-multigpu50")
DEFAULT_POLICIES = ("fgd", "bestfit", "pwr", "pwr:fgd=950", "pwr:fgd=900", "pwr:fgd=800", "power")
#: arrived-load window of the saving (% of GPU capacity), as the PWR paper's 15..80 % claim
SAVING_FROM, SAVING_TO = 20, 80
MAX_PERCENT = 130
#: the saving a seed is counted against: at least this % less power than FGD over the window
GOAL = 13.0
#: the binned curves of every run (``power_curves.csv`` columns; FGD baselines of older runs lack ``reach_kw``)
CURVES = ("power_kw", "power_linear_kw", "floor_kw", "alloc_pct", "reach_kw")


def label(policy: str) -> str:
    """Display label that always names a mix's weights (``PWR 100 + FGD 900``)."""
    spec = parse_spec(policy)
    if spec.name == "pwr" and spec.params["fgd"]:
        mode = "" if spec.params["mode"] == "step" else f", {spec.params['mode']}"
        return f"PWR {1000 - spec.params['fgd']} + FGD {spec.params['fgd']}{mode}"
    return spec.label


def binned(log: EventRecords, values: np.ndarray, total_gpus: int) -> np.ndarray:
    """Bin means of per-event ``values`` over arrived GPU request (``nan`` where no event)."""
    out = np.full(MAX_PERCENT + 1, np.nan)
    for k, members in arrival_bins(log.arrived_gpu_milli, total_gpus, MAX_PERCENT):
        out[k] = values[members].mean()
    return out


def floor_w(log: EventRecords, nodes: NodeSpec, homes: np.ndarray | None = None,
            milli: np.ndarray | None = None) -> np.ndarray:
    """The linear-model power floor of each event's allocated GPU and CPU (:mod:`quasched.policies.pwr_bound`);
    reachable if given each pod's single home model (``homes``, "" for none) and GPU ``milli``: the placed
    pods that have one stay on the model they are on (their home)."""
    pinned = None
    if homes is not None and milli is not None:
        placed = np.asarray(nodes.gpu_model, dtype=object)[log.node]
        home = np.where((log.node >= 0) & (homes[log.pod] != ""), placed, "")
        pinned = {m: np.cumsum(np.where(home == m, milli[log.pod], 0)) for m in set(home) - {""}}
    cpu = log.cpu_alloc_pct / 100 * float(np.sum(nodes.cpu_milli))
    return linear_power_floor(nodes, log.used_gpu_milli, cpu, pinned=pinned)


def thin_whole(workload: Workload, share: float) -> Workload:
    """``workload`` without the share ``share`` of its whole-GPU pods (a fixed draw, the same for every run)."""
    whole = np.asarray(workload.gpu_milli) >= FULL_GPU_MILLI
    drop = whole & (np.random.default_rng(0).random(len(workload)) < share)
    return workload.take(np.flatnonzero(~drop))


def pod_rows(workload: Workload, names: np.ndarray) -> np.ndarray:
    """Rows of ``workload`` of the tuned pods ``names`` (clones ``<name>-tuned-<i>`` of ``workload``'s)."""
    index = {name: i for i, name in enumerate(workload.name)}
    return np.array([index[re.sub(r"-tuned-\d+$", "", str(n))] for n in names], dtype=np.int64)


def pod_homes(workload: Workload, homes: np.ndarray, names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``single_home`` and GPU request of the tuned pods ``names`` (:func:`pod_rows`)."""
    rows = pod_rows(workload, names)
    return homes[rows], np.asarray(workload.gpu_request)[rows]


def main() -> None:
    parser = sweep_arguments(__doc__, DEFAULT_TRACES, DEFAULT_POLICIES)
    parser.add_argument("--out", type=Path, default=Path("results/power"))
    parser.add_argument("--baseline", type=Path, help="power_curves.csv of an earlier run: FGD's curves from there")
    parser.add_argument("--thin-whole", type=float, default=0.0, help="share of the whole-GPU pods dropped first")
    args = parser.parse_args()
    if "fgd" not in args.policies:
        parser.error("the saving is measured against fgd: include it in --policies")
    args.out.mkdir(parents=True, exist_ok=True)

    rows, summary, seed_rows = [], [], []
    print(f"seeds {args.seeds[0]}..{args.seeds[-1]} ({len(args.seeds)}), --rng go, tune 1.3; "
          f"saving = 1 - P/P_FGD (same seed) averaged over {SAVING_FROM}..{SAVING_TO} % arrived\n")
    print("| trace | policy | alloc@100 (alloc/arrived) | alloc@130 % | Δ alloc@130 vs FGD | "
          f"saving {SAVING_FROM}-{SAVING_TO} % step | linear | linear floor | reachable | ≥ {GOAL:g} % linear | saving @100 % step | P@50 % kW step | s/run |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for trace in args.traces:
        nodes, workload = catalog.load_trace(trace, data_dir=args.data_dir)
        if args.thin_whole:
            workload = thin_whole(workload, args.thin_whole)
        print(f"{trace}: whole-GPU share of the typical demand D = {whole_share(TypicalPods.from_workload(workload)):.3f}")
        homes = single_home(nodes, workload)
        total = nodes.total_gpus
        start = time.perf_counter()
        fresh = [p for p in args.policies if p != "fgd" or args.baseline is None]
        runs = run_sweep(nodes, workload, fresh, args.seeds, ExperimentConfig(rng="go"), workers=args.workers,
                         keep_logs=True)
        wall = time.perf_counter() - start
        curves = {} if args.baseline is None else baseline_curves(args.baseline, trace, args.seeds)
        rows += [{"trace": trace, "policy": "fgd", "label": label("fgd"), "seed": seed, "arrived_pct": k,
                  **{name: float(v[k]) for name, v in c.items()}} for (_, seed), c in curves.items()
                 for k in range(MAX_PERCENT + 1)]
        for run in runs:
            log = run.log
            assert log is not None and run.pod_names is not None
            reach = floor_w(log, nodes, *pod_homes(workload, homes, run.pod_names))
            c = {name: binned(log, values, total) for name, values in
                 zip(CURVES, (log.power_w, log.power_linear_w, floor_w(log, nodes), log.used_gpu_milli, reach))}
            for key in ("power_kw", "power_linear_kw", "floor_kw", "reach_kw"):
                c[key] /= WATTS_PER_KW
            c["alloc_pct"] /= 10 * total  # milli → % of capacity
            curves[(run.policy, run.seed)] = c
            for k in range(MAX_PERCENT + 1):
                rows.append({"trace": trace, "policy": run.policy, "label": label(run.policy), "seed": run.seed,
                             "arrived_pct": k, **{name: float(v[k]) for name, v in c.items()}})
        window = slice(SAVING_FROM, SAVING_TO + 1)
        for policy in args.policies:
            per_seed = [curves[(policy, s)] for s in args.seeds]
            base = [curves[("fgd", s)] for s in args.seeds]
            saving = np.array([np.nanmean(1 - c["power_kw"][window] / b["power_kw"][window]) for c, b in zip(per_seed, base)])
            saving_lin, floor, reach = (np.array([np.nanmean(1 - c[key][window] / b["power_linear_kw"][window])
                                                  for c, b in zip(per_seed, base)])
                                        for key in ("power_linear_kw", "floor_kw", "reach_kw"))
            saving100 = np.array([1 - c["power_kw"][100] / b["power_kw"][100] for c, b in zip(per_seed, base)])
            a100 = np.array([c["alloc_pct"][100] for c in per_seed])
            a130 = np.array([c["alloc_pct"][MAX_PERCENT] for c in per_seed])
            d130 = a130 - np.array([b["alloc_pct"][MAX_PERCENT] for b in base])
            p50 = np.array([c["power_kw"][50] for c in per_seed])
            run_s = np.mean([r.elapsed_s for r in runs if r.policy == policy] or [np.nan])
            summary.append({"trace": trace, "policy": policy, "label": label(policy), "seeds": len(args.seeds),
                            "alloc100_ratio": a100.mean() / 100, "alloc100_std": a100.std() / 100,
                            "alloc130_pct": a130.mean(), "alloc130_std": a130.std(), "d_alloc130": d130.mean(),
                            "saving_step_pct": 100 * saving.mean(), "saving_step_std": 100 * saving.std(),
                            "saving_linear_pct": 100 * saving_lin.mean(),
                            "floor_linear_pct": 100 * floor.mean(), "reach_linear_pct": 100 * reach.mean(),
                            "seeds_linear_goal": int(np.sum(100 * saving_lin >= GOAL)),
                            "saving100_step_pct": 100 * saving100.mean(),
                            "power50_kw": p50.mean(), "run_s": run_s})
            seed_rows += [{"trace": trace, "policy": policy, "seed": seed, "saving_step_pct": 100 * a,
                           "saving_linear_pct": 100 * b, "floor_linear_pct": 100 * f, "reach_linear_pct": 100 * r,
                           "d_alloc130": d} for seed, a, b, f, r, d in zip(args.seeds, saving, saving_lin, floor, reach, d130)]
            s = summary[-1]
            print(f"| {trace.removeprefix('openb-')} | {s['label']} | {s['alloc100_ratio']:.3f} ± {s['alloc100_std']:.3f} "
                  f"| {s['alloc130_pct']:.2f} ± {s['alloc130_std']:.2f} | {s['d_alloc130']:+.2f} "
                  f"| {s['saving_step_pct']:.1f} ± {s['saving_step_std']:.1f} % | {s['saving_linear_pct']:.1f} % "
                  f"| {s['floor_linear_pct']:.1f} % | {s['reach_linear_pct']:.2f} % | {s['seeds_linear_goal']} "
                  f"| {s['saving100_step_pct']:.1f} % | {s['power50_kw']:.0f} | {s['run_s']:.1f} |", flush=True)
        plot(args.out / f"power_{trace}.png", trace, args.policies, args.seeds, curves, wall)
        # after every trace, so a long run's finished traces are kept if it is stopped
        pd.DataFrame(rows).to_csv(args.out / "power_curves.csv", index=False)
        pd.DataFrame(summary).to_csv(args.out / "power_summary.csv", index=False)
        pd.DataFrame(seed_rows).to_csv(args.out / "power_seeds.csv", index=False)
    print(f"\nwrote {args.out}/power_curves.csv, power_seeds.csv, power_summary.csv and power_<trace>.png")


def baseline_curves(path: Path, trace: str, seeds: list[int]) -> dict[tuple[str, int], dict[str, np.ndarray]]:
    """FGD's binned curves of ``trace`` and ``seeds`` from an earlier ``power_curves.csv`` (SystemExit if missing)."""
    table = pd.read_csv(path)
    curves = {}
    for seed in seeds:
        rows = table[(table.trace == trace) & (table.policy == "fgd") & (table.seed == seed)].sort_values("arrived_pct")
        if len(rows) != MAX_PERCENT + 1:
            raise SystemExit(f"{path}: no FGD curve for {trace}, seed {seed}")
        curves[("fgd", seed)] = {key: rows[key].to_numpy(float) if key in rows else np.full(len(rows), np.nan)
                                 for key in CURVES}
    return curves


def plot(path: Path, trace: str, policies: list[str], seeds: list[int], curves: dict, wall: float) -> None:
    """Power (step) vs arrived load, its ratio to FGD (solid; linear model dotted, with the linear floor
    dashed), and allocation; means over the seeds."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4), dpi=110)
    power, ratio, alloc = fig.subplots(1, 3)
    x = np.arange(MAX_PERCENT + 1)
    def mean(policy: str, key: str) -> np.ndarray:
        return np.mean([curves[(policy, s)][key] for s in seeds], axis=0)

    base, base_linear = mean("fgd", "power_kw"), mean("fgd", "power_linear_kw")
    for policy in policies:
        p = mean(policy, "power_kw")
        line, = power.plot(x, p, lw=1.2, label=label(policy))
        ratio.plot(x, p / base, lw=1.2, color=line.get_color())
        ratio.plot(x, mean(policy, "power_linear_kw") / base_linear, lw=1.0, ls=":", color=line.get_color())
        alloc.plot(x, mean(policy, "alloc_pct"), lw=1.2, label=label(policy))
    ratio.plot(x, mean("fgd", "floor_kw") / base_linear, lw=1.0, ls="--", color="black", label="linear floor")
    ratio.legend(fontsize=7)
    power.set_ylabel("modelled power, step model (kW)")
    ratio.set_ylabel("power / FGD's at the same arrived load")
    ratio.axvspan(SAVING_FROM, SAVING_TO, color="0.9")
    alloc.set_ylabel("GPU allocation (% of capacity)")
    for ax in (power, ratio, alloc):
        ax.set_xlabel("arrived GPU request (% of capacity)")
        ax.grid(alpha=0.3)
    alloc.legend(fontsize=7)
    fig.suptitle(f"{trace}, seeds {seeds[0]}..{seeds[-1]}, tune 1.3" + (f" ({wall:.0f} s wall)" if wall == wall else ""))
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":
    main()
