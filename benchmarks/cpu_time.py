"""CPU time (and wall time) of one arrival-experiment run per policy, for a loaded machine.

    python benchmarks/cpu_time.py --data-dir ../shared/traces --trace openb-default --policies fgd ours headroom

Process CPU time is what the policy costs; wall time is inflated by other jobs sharing the cores.
"""

from __future__ import annotations

import time

from own_policy import sweep_arguments  # benchmarks/ is on sys.path
from quasched.sim.arrival import ExperimentConfig, run_experiment
from quasched.traces import catalog


def main() -> None:
    parser = sweep_arguments(__doc__, ("openb-default",), ("fgd", "ours"))
    args = parser.parse_args()
    for trace in args.traces:
        nodes, workload = catalog.load_trace(trace, data_dir=args.data_dir)
        for policy in args.policies:
            cpu, wall = time.process_time(), time.perf_counter()
            run_experiment(nodes, workload, ExperimentConfig(policy=policy, seed=args.seeds[0], rng="go"))
            print(f"| {trace} | {policy} | {time.process_time() - cpu:.2f} | {time.perf_counter() - wall:.1f} |", flush=True)


if __name__ == "__main__":
    main()
