"""Which multi-GPU pods fail, and how early: per (GPUs, CPU cores) shape of an arrival run.

    cd benchmarks && python multi_gpu_failures.py --data-dir ../../shared/traces --traces openb-default \
        --policies fgd oursrare oursguard --seeds 42-51

For every trace, policy and multi-GPU shape (summed over the seeds): pods arrived, pods
failed, and for every seed in which the shape arrived the arrived load (% of the GPU capacity)
at its first failure ("-" when none failed). A policy that wins allocation by refusing the big pods early shows
up here, long before the 130 % column.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from own_policy import analysed_runs, sweep_arguments  # benchmarks/ is on sys.path
from quasched.sim.arrival import ExperimentResult
from quasched.traces import catalog


def multi_gpu_failures(result: ExperimentResult) -> tuple[Counter, Counter, dict[tuple[int, int], float]]:
    """Per (GPUs, cores) multi-GPU shape of one run: arrived, failed, arrived load (%) at its first failure."""
    events, pods = result.events, result.workload
    multi = np.flatnonzero(pods.num_gpu[events.pod] > 1)
    shape = list(zip(pods.num_gpu[events.pod[multi]].tolist(), (pods.cpu_milli[events.pod[multi]] // 1000).tolist()))
    failed, first = Counter(), {}
    for event, key in zip(multi, shape):
        if events.node[event] < 0:
            failed[key] += 1
            first.setdefault(key, 100 * events.arrived_gpu_milli[event] / (1000 * result.total_gpus))
    return Counter(shape), failed, first


def main() -> None:
    args = sweep_arguments(__doc__, ("openb-default",), ("fgd", "oursrare", "oursguard")).parse_args()
    print("| trace | policy | GPUs × cores | arrived | failed | first failure, % arrived, per seed |")
    print("|---|---|---|---|---|---|")
    for trace in args.traces:
        nodes, workload = catalog.load_trace(trace, data_dir=args.data_dir)
        runs = analysed_runs(nodes, workload, args.policies, args.seeds, args.workers, multi_gpu_failures)
        for policy in args.policies:
            arrived, failed, first = Counter(), Counter(), defaultdict(list)
            for seed in args.seeds:
                shapes, fails, seen = runs[policy, seed]
                arrived.update(shapes)
                failed.update(fails)
                for key in sorted(shapes):
                    first[key].append(f"{seen[key]:.0f}" if key in seen else "-")
            for key in sorted(arrived):
                print(f"| {trace} | {policy} | {key[0]} × {key[1]} | {arrived[key]} | {failed[key]} | "
                      f"{' '.join(first[key])} |", flush=True)


if __name__ == "__main__":
    main()
