"""The limit: per trace, an upper bound on GPU allocation at 130 % arrivals and an offline packing.

    python benchmarks/limit.py --data-dir ../shared/traces --seeds 42-51 --runs results/issue12_runs.json \
        --out results/issue12_limit

For every trace and seed, the pods of the arrival experiment (tune 1.3, ``--rng go``) go to
:func:`quasched.optimize.bound.gpu_bound` (aggregated LP with device- and node-packing rows,
HiGHS; the MILP over the same rows with ``--milp-seconds`` per instance, on the first seed)
and to :func:`quasched.sim.offline.ffd_packing` (largest first; the best of ``--offline`` policies
placing them). ``--runs`` is the
``--json`` of ``benchmarks/own_policy.py``: each policy's alloc@130 over the same seeds and its
distance to the bound. Writes ``<out>.csv`` (one row per trace and seed) and ``<out>.png``.
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

from own_policy import DEFAULT_TRACES, sweep_arguments  # noqa: E402  (benchmarks/ is on sys.path)
from quasched.optimize.bound import gpu_bound  # noqa: E402
from quasched.sim.arrival import ExperimentConfig  # noqa: E402
from quasched.sim.offline import arrival_prefix, ffd_packing  # noqa: E402
from quasched.traces import catalog  # noqa: E402


def main() -> None:
    parser = sweep_arguments(__doc__, DEFAULT_TRACES, ("fgd", "ours"))
    parser.add_argument("--runs", type=Path, help="own_policy.py --json with the policies' per-seed results")
    parser.add_argument("--milp-seconds", type=float, default=10.0)
    parser.add_argument("--offline", nargs="+", default=["bestfit", "fgd"], help="policies placing the FFD order")
    parser.add_argument("--out", type=Path, default=Path("results/issue12_limit"))
    args = parser.parse_args()
    runs = json.loads(args.runs.read_text()) if args.runs else {}
    rows = []
    print("| trace | LP bound | MILP bound (seed {}) | offline FFD | ".format(args.seeds[0])
          + " | ".join(args.policies) + " | " + " | ".join(f"{p} to bound" for p in args.policies) + " | s |")
    print("|---" * (5 + 2 * len(args.policies)) + "|")
    for trace in args.traces:
        start = time.perf_counter()
        nodes, workload = catalog.load_trace(trace, data_dir=args.data_dir)
        lp, ffd, milp = [], [], float("nan")
        for i, seed in enumerate(args.seeds):
            prefix = arrival_prefix(nodes, workload, ExperimentConfig(seed=seed, rng="go"))
            bound = gpu_bound(nodes, prefix, args.milp_seconds if i == 0 else None)
            lp.append(bound.lp_pct)
            milp = bound.milp_pct if i == 0 else milp
            packed = {p: bound.pct(ffd_packing(nodes, prefix, p)) for p in args.offline}
            ffd.append(max(packed.values()))
            policy = {p: _alloc(runs, trace, p, seed) for p in args.policies}
            rows.append({"trace": trace, "seed": seed, "lp_bound": lp[-1], "milp_bound": bound.milp_pct if i == 0 else "",
                         "ffd": ffd[-1], **{f"ffd_{p}": v for p, v in packed.items()}, **policy})
        means = {p: np.nanmean([r[p] for r in rows if r["trace"] == trace]) for p in args.policies}
        print(f"| {trace} | {np.mean(lp):.2f} | {milp:.2f} | {np.mean(ffd):.2f} | "
              + " | ".join(f"{means[p]:.2f}" for p in args.policies) + " | "
              + " | ".join(f"{np.mean(lp) - means[p]:.2f}" for p in args.policies)
              + f" | {time.perf_counter() - start:.0f} |", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.with_suffix(".csv").open("w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerows(rows)
    plot(args.out.with_suffix(".png"), rows, args.traces, ["lp_bound", "ffd", *args.policies])


def _alloc(runs: dict, trace: str, policy: str, seed: int) -> float:
    rec = runs.get(trace, {}).get(policy)
    return rec["alloc"][rec["seeds"].index(seed)] if rec and seed in rec["seeds"] else float("nan")


def plot(path: Path, rows: list[dict], traces: list[str], columns: list[str]) -> None:
    """Per trace, the mean of each column, as allocation points below 100 %."""
    fig, ax = plt.subplots(figsize=(12, 4))
    x = np.arange(len(traces))
    for i, col in enumerate(columns):
        means = [np.nanmean([r[col] for r in rows if r["trace"] == t]) for t in traces]
        ax.plot(x, means, marker="o", label=col)
    ax.set_xticks(x, [t.removeprefix("openb-") for t in traces], rotation=45)
    ax.set_ylabel("GPU allocation at 130 % arrived (%)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
