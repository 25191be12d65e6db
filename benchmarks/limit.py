"""The limit: per trace, an upper bound on GPU allocation at 130 % arrivals and an offline packing.

    python benchmarks/limit.py --data-dir ../shared/traces --seeds 42 --out results/limit/limit
    python benchmarks/limit.py --seeds 42 --bounds results/limit/limit.csv --runs results/placement/runs.json

For every trace and seed, the pods of the arrival experiment (tune 1.3, ``--rng go``) go to
:func:`quasched.optimize.bound.gpu_bound` (aggregated LP with device- and node-packing rows,
HiGHS; the MILP over the same rows with ``--milp-seconds`` per instance, on the first seed)
and to :func:`quasched.sim.offline.ffd_packing` (largest first, most GPU per CPU first, or in arrival
order; the best of those orders × the ``--offline`` policies placing them), then to
:func:`quasched.optimize.patterns.pattern_packing` (column generation over node patterns from those
packings, ``--pattern-seconds``; its Lagrangian bound, and its integer packing topped up by FFD). ``--runs`` are ``--json`` files of ``benchmarks/placement.py``: each policy's
alloc@130 on the same seeds and its distance to the bound; ``--bounds`` reuses solved rows.
Writes ``<out>.csv`` (one row per trace and seed) and ``<out>.png``.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from placement import DEFAULT_TRACES, save_trace_axes, sweep_arguments  # noqa: E402
from quasched.model.cluster import Cluster  # noqa: E402
from quasched.optimize.bound import gpu_bound  # noqa: E402
from quasched.optimize.patterns import pattern_packing  # noqa: E402
from quasched.sim.arrival import ExperimentConfig  # noqa: E402
from quasched.sim.offline import arrival_prefix, ffd_packing  # noqa: E402
from quasched.traces import catalog  # noqa: E402


def main() -> None:
    parser = sweep_arguments(__doc__, DEFAULT_TRACES, ("fgd", "guard"))
    parser.add_argument("--runs", type=Path, nargs="*", default=[], help="placement.py --json files (per-seed results)")
    parser.add_argument("--milp-seconds", type=float, default=10.0)
    parser.add_argument("--offline", nargs="+", default=["bestfit", "fgd"], help="policies placing the FFD order")
    parser.add_argument("--pattern-seconds", type=float, default=120.0,
                        help="column generation over node patterns per instance (0 = skip)")
    parser.add_argument("--bounds", type=Path, help="reuse the bound rows of an earlier <out>.csv instead of solving")
    parser.add_argument("--out", type=Path, default=Path("results/limit/limit"))
    args = parser.parse_args()
    runs: dict[str, dict] = {}
    for path in args.runs:  # later files add policies to a trace's runs
        for trace, by_policy in json.loads(path.read_text()).items():
            runs.setdefault(trace, {}).update(by_policy)
    rows = _read(args.bounds) if args.bounds else [row for t in args.traces for row in bounds(args, t)]
    for row in rows:
        row.update({p: _alloc(runs, row["trace"], p, int(row["seed"])) for p in args.policies})
        row["best_bound"] = min(float(row[c]) for c in ("lp_bound", "milp_bound", "pattern_bound") if row.get(c, "") != "")
    print(f"seeds {args.seeds[0]}..{args.seeds[-1]}; MILP bound on seed {args.seeds[0]}\n")
    print("| trace | LP bound | MILP bound | pattern bound | best bound | offline greedy | patterns | "
          + " | ".join(args.policies) + " | " + " | ".join(f"{p}: bound − alloc" for p in args.policies) + " |")
    print("|---" * (7 + 2 * len(args.policies)) + "|")
    for trace in args.traces:
        mine = [r for r in rows if r["trace"] == trace]
        lp, milp, pattern, best, ffd, packing = (np.nanmean([float(r.get(c) or "nan") for r in mine]) for c in
                                                 ("lp_bound", "milp_bound", "pattern_bound", "best_bound", "ffd", "patterns"))
        means = {p: np.nanmean([r[p] for r in mine]) for p in args.policies}
        print(f"| {trace} | {lp:.2f} | {milp:.2f} | {pattern:.2f} | {best:.2f} | {ffd:.2f} | {packing:.2f} | "
              + " | ".join(f"{means[p]:.2f}" for p in args.policies)
              + " | " + " | ".join(f"{best - means[p]:.2f}" for p in args.policies) + " |", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.with_suffix(".csv").open("w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerows(rows)
    plot(args.out.with_suffix(".png"), rows, args.traces,
         [c for c in ("best_bound", "patterns", "ffd") if c in rows[0]] + list(args.policies))


def bounds(args, trace: str) -> list[dict]:
    """Per seed: LP bound, MILP bound (first seed only), the best FFD packing and each FFD policy's (%)."""
    nodes, workload = catalog.load_trace(trace, data_dir=args.data_dir)
    rows = []
    for i, seed in enumerate(args.seeds):
        start = time.perf_counter()
        prefix = arrival_prefix(nodes, workload, ExperimentConfig(seed=seed, rng="go"))
        bound = gpu_bound(nodes, prefix, args.milp_seconds if i == 0 else None)
        clusters = {(p, key): Cluster(nodes) for p in args.offline for key in ("size", "density", "arrival")}
        packed = {f"ffd_{p}_{key}": bound.pct(ffd_packing(nodes, prefix, p, key, cluster=c)) for (p, key), c in clusters.items()}
        row = {"trace": trace, "seed": seed, "lp_bound": bound.lp_pct, "milp_bound": bound.milp_pct if i == 0 else "",
               "ffd": max(packed.values()), **packed}
        if args.pattern_seconds > 0:
            solution, cluster = pattern_packing(nodes, prefix, list(clusters.values()), seconds=args.pattern_seconds)
            row.update(pattern_bound=bound.pct(solution.bound), pattern_lp=bound.pct(solution.lp),
                       patterns=bound.pct(ffd_packing(nodes, prefix, cluster=cluster)), pattern_rounds=solution.rounds,
                       pattern_converged=solution.converged)
        rows.append({**row, "solve_s": round(time.perf_counter() - start, 1)})
    return rows


def _read(path: Path) -> list[dict]:
    with path.open() as f:
        return [{k: v for k, v in row.items() if k == "trace" or k == "seed" or k.startswith(("lp", "milp", "ffd", "pattern", "solve"))}
                for row in csv.DictReader(f)]


def _alloc(runs: dict, trace: str, policy: str, seed: int) -> float:
    rec = runs.get(trace, {}).get(policy)
    return rec["alloc"][rec["seeds"].index(seed)] if rec and seed in rec["seeds"] else float("nan")


LABELS = {"best_bound": "best upper bound", "patterns": "pattern packing (achievable)", "ffd": "offline greedy (best order)"}


def plot(path: Path, rows: list[dict], traces: list[str], columns: list[str]) -> None:
    """Per trace, the mean of each column, as allocation points below 100 %."""
    fig, ax = plt.subplots(figsize=(12, 4))
    x = np.arange(len(traces))
    for col in columns:
        values = [[float(r[col]) for r in rows if r["trace"] == t] for t in traces]
        means = [np.mean(v) if np.isfinite(v).any() else np.nan for v in values]
        ax.plot(x, means, marker="o", label=LABELS.get(col, col))
    save_trace_axes(fig, ax, traces, "GPU allocation at 130 % arrived (%)", path)


if __name__ == "__main__":
    main()
