"""Where the idle GPU milli sits at the end of an arrival run (130 % arrived): by what each device holds.

    cd benchmarks && python sliver_idle.py --data-dir ../../shared/traces --traces openb-gpushare100 \
        --policies fgd oursshare --seeds 42-51

Every device is put in one class by its largest pod: ``empty``, ``biggest M`` for the
``--top`` largest per-device requests seen on it (e.g. an 810 m pod, which strands at least
190 m that only the smallest sharing pods can use), or ``other``. Prints, per trace and
policy (mean over seeds): allocation, and devices / idle points of the whole GPU capacity per
class; the last column is the GPU milli of all arrived pods that fit the sliver next to the
largest pod (≤ 1000 − its milli), in points: the most of the stranded slivers they could fill.
"""

from __future__ import annotations

from collections import Counter
from functools import partial

import numpy as np

from own_policy import analysed_runs, sweep_arguments  # benchmarks/ is on sys.path
from quasched.sim.arrival import ExperimentResult
from quasched.traces import catalog


def idle_by_biggest_pod(top: set[int], result: ExperimentResult) -> tuple[Counter, Counter, float]:
    """Devices and idle milli per class of the run's final cluster (module docstring), and the points of GPU
    capacity that all arrived pods fitting the sliver next to the largest one could fill."""
    cluster = result.cluster
    biggest: dict[tuple[int, int], int] = {}
    for placement in cluster.placements.values():
        for device in placement.devices:
            key = (placement.node, device)
            biggest[key] = max(biggest.get(key, 0), placement.pod.gpu_milli)
    devices, idle = Counter(), Counter()
    for node in range(cluster.n_nodes):
        for device in range(cluster.num_gpus[node]):
            m = biggest.get((node, device), 0)
            label = "empty" if m == 0 else f"biggest {m} m" if m in top else "other"
            devices[label] += 1
            idle[label] += int(cluster.gpu_free[node, device])
    arrived = result.workload.gpu_milli
    small = 100 * arrived[(arrived > 0) & (arrived <= 1000 - max(top))].sum() / (1000 * result.total_gpus)
    return devices, idle, float(small)


def main() -> None:
    parser = sweep_arguments(__doc__, ("openb-gpushare100",), ("fgd", "oursshare"))
    parser.add_argument("--top", type=int, default=1, help="classes for the N largest per-device requests")
    args = parser.parse_args()
    for trace in args.traces:
        nodes, workload = catalog.load_trace(trace, data_dir=args.data_dir)
        sharing = np.unique(workload.gpu_milli[(workload.num_gpu == 1) & (workload.gpu_milli < 1000)])
        top = set(int(m) for m in sharing[::-1][: args.top])
        runs = analysed_runs(nodes, workload, args.policies, args.seeds, args.workers, partial(idle_by_biggest_pod, top))
        for policy in args.policies:
            devices, idle, alloc, small = Counter(), Counter(), [], []
            for seed in args.seeds:
                d, i, fill = runs[policy, seed]
                devices.update(d)
                idle.update(i)
                alloc.append(100 * (1 - sum(i.values()) / (1000 * nodes.total_gpus)))
                small.append(fill)
            total = 1000 * nodes.total_gpus * len(args.seeds)
            classes = "; ".join(f"{k}: {devices[k] / len(args.seeds):.0f} devices, {100 * idle[k] / total:.2f} idle points"
                                for k in sorted(devices))
            print(f"| {trace} | {policy} | {np.mean(alloc):.2f} | {classes} | {np.mean(small):.2f} |", flush=True)


if __name__ == "__main__":
    main()
