"""What each policy had already turned away when the first 8-GPU pod of a shape that an empty node can hold failed.

    cd benchmarks && python failed_before.py --data-dir ../../shared/traces --traces openb-gpuspec10 \
        --policies fgd oursguard --seeds 42-45

Per trace, seed and 8-GPU shape (CPU cores) that some empty node of the cluster can hold: the arrived load
(% of the GPU capacity) at the shape's first failure, per policy, and the pods and GPUs every policy had failed
up to the earliest of those loads. A policy keeps its 8-GPU homes longer either by placing better or by turning
smaller pods away first; this table tells the two apart.
"""

from __future__ import annotations

import numpy as np

from own_policy import analysed_runs, sweep_arguments  # benchmarks/ is on sys.path
from quasched.model.cluster import accessible
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
    spec = np.asarray(pods.gpu_spec)[failed]
    fits = [bool(np.any((nodes.cpu_milli >= pods.cpu_milli[p]) & (nodes.memory_mib >= pods.memory_mib[p])
                        & (nodes.num_gpus >= BIG) & [accessible(m, s) for m in nodes.gpu_model]))
            for p, s in zip(failed, spec)]
    big = (pods.num_gpu[failed] == BIG) & np.array(fits, dtype=bool)
    return load, gpus, np.where(big, pods.cpu_milli[failed] // 1000, 0)


def main() -> None:
    args = sweep_arguments(__doc__, ("openb-gpuspec10",), ("fgd", "oursguard")).parse_args()
    print(f"| trace | seed | {BIG}-GPU shape, cores | its first failure, % arrived | by the earliest: failed pods "
          "| failed GPUs |")
    print("|---|---|---|---|---|---|")
    for trace in args.traces:
        nodes, workload = catalog.load_trace(trace, data_dir=args.data_dir)
        runs = analysed_runs(nodes, workload, args.policies, args.seeds, args.workers, failures)
        for seed in args.seeds:
            shapes = sorted(set().union(*(runs[p, seed][2][runs[p, seed][2] > 0].tolist() for p in args.policies)))
            for cores in shapes:
                first = {p: runs[p, seed][0][runs[p, seed][2] == cores].min(initial=np.inf) for p in args.policies}
                upto = {p: runs[p, seed][0] <= min(first.values()) for p in args.policies}
                print(f"| {trace} | {seed} | {cores} | {' / '.join(f'{first[p]:.1f}' for p in args.policies)} | "
                      f"{' / '.join(str(int(upto[p].sum())) for p in args.policies)} | "
                      f"{' / '.join(f'{runs[p, seed][1][upto[p]].sum():.0f}' for p in args.policies)} |", flush=True)

if __name__ == "__main__":
    main()
