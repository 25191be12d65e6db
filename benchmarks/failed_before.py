"""What each policy had already turned away when the first 8-GPU pod of a shape that an empty node can hold failed.

    cd benchmarks && python failed_before.py --data-dir ../../shared/traces --traces openb-gpuspec10 \
        --policies fgd oursguard --seeds 42-45 --out ../results/failed_before

Per trace, seed and 8-GPU shape (CPU cores) that some empty node of the cluster can hold: the arrived load
(% of the GPU capacity) at the shape's first failure, per policy, and the pods and GPUs every policy had failed
up to the earliest of those loads. A policy keeps its 8-GPU homes longer either by placing better or by turning
smaller pods away first; this table tells the two apart.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from own_policy import analysed_runs, sweep_arguments  # benchmarks/ is on sys.path
from quasched.model.nodes import accessible
from quasched.report.plots import save_figure
from quasched.sim.arrival import ExperimentResult
from quasched.traces import catalog

BIG = 8  # GPUs of the pods whose first failure is the yardstick


def failures(result: ExperimentResult) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of one run's failed pods: arrived load (%) at the failure, GPUs asked, and the CPU cores of the
    ``BIG``-GPU pods an empty node holds (0 for the others)."""
    events, pods, nodes = result.events, result.workload, result.nodes
    failed = events.pod[events.node < 0]
    load = 100 * events.arrived_gpu_milli[events.node < 0] / (1000 * result.total_gpus)
    gpus = pods.gpu_milli[failed] * pods.num_gpu[failed] / 1000
    spec = np.asarray(pods.gpu_model)[failed]
    fits = [bool(np.any((nodes.cpu_milli >= pods.cpu_milli[p]) & (nodes.memory_mib >= pods.memory_mib[p])
                        & (nodes.num_gpus >= BIG) & [accessible(m, s) for m in nodes.gpu_model]))
            for p, s in zip(failed, spec)]
    big = (pods.num_gpu[failed] == BIG) & np.array(fits, dtype=bool)
    return load, gpus, np.where(big, pods.cpu_milli[failed] // 1000, 0)


def plot_cumulative(path: Path, trace: str, seed: int, runs: dict[str, tuple[np.ndarray, ...]]) -> Path:
    """Failed GPUs vs arrived load per policy, each ``BIG``-GPU shape's first failure marked."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for row, (policy, (load, gpus, big)) in enumerate(runs.items()):
        line, = ax.step(load, np.cumsum(gpus), where="post", label=policy)
        for k, cores in enumerate(np.unique(big[big > 0])):
            at = int(np.argmax(big == cores))
            ax.plot(load[at], gpus[: at + 1].sum(), "o", color=line.get_color())
            ax.annotate(f"{BIG}×{cores}", (load[at], gpus[: at + 1].sum()), fontsize=7, color=line.get_color(),
                        xytext=(4, 6 - 20 * row - 9 * k), textcoords="offset points")
    ax.set(xlabel="arrived GPU request, % of capacity", ylabel="failed GPUs (cumulative)",
           title=f"{trace}, seed {seed}: first failure of each {BIG}-GPU shape marked")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return save_figure(fig, path)


def main() -> None:
    parser = sweep_arguments(__doc__, ("openb-gpuspec10",), ("fgd", "oursguard"))
    parser.add_argument("--out", type=Path, help="also write failed_before.csv and one plot per trace (first seed)")
    args = parser.parse_args()
    print(f"| trace | seed | {BIG}-GPU shape, cores | its first failure, % arrived | by the earliest: failed pods "
          "| failed GPUs |")
    print("|---|---|---|---|---|---|")
    rows = []
    for trace in args.traces:
        nodes, workload = catalog.load_trace(trace, data_dir=args.data_dir)
        runs = analysed_runs(nodes, workload, args.policies, args.seeds, args.workers, failures)
        for seed in args.seeds:
            shapes = sorted(set().union(*(runs[p, seed][2][runs[p, seed][2] > 0].tolist() for p in args.policies)))
            for cores in shapes:
                first = {p: runs[p, seed][0][runs[p, seed][2] == cores].min(initial=np.inf) for p in args.policies}
                upto = {p: runs[p, seed][0] <= min(first.values()) for p in args.policies}
                row = {"trace": trace, "seed": seed, "cores": cores}
                for p in args.policies:
                    row |= {f"{p} first failure %": round(float(first[p]), 2), f"{p} failed pods": int(upto[p].sum()),
                            f"{p} failed GPUs": round(float(runs[p, seed][1][upto[p]].sum()), 2)}
                rows.append(row)
                print(f"| {trace} | {seed} | {cores} | {' / '.join(f'{first[p]:.1f}' for p in args.policies)} | "
                      f"{' / '.join(str(int(upto[p].sum())) for p in args.policies)} | "
                      f"{' / '.join(f'{runs[p, seed][1][upto[p]].sum():.0f}' for p in args.policies)} |", flush=True)
        if args.out:
            seed = args.seeds[0]
            plot_cumulative(args.out / f"failed_before_{trace}.png", trace, seed,
                            {p: runs[p, seed] for p in args.policies})
    if args.out:
        pd.DataFrame(rows).to_csv(args.out / "failed_before.csv", index=False)


if __name__ == "__main__":
    main()
