"""Speed and memory of the arrival experiment on openb-default (tune 1.3).

    python benchmarks/speed.py --data-dir ../shared/traces

Measures (1) one FGD run, single process, wall time including trace loading;
(2) all six paper policies × 10 seeds on both cores; (3) peak RSS of the
parent and of the largest worker.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from quasched.policies import PAPER_POLICIES
from quasched.sim.arrival import ExperimentConfig, run_experiment
from quasched.compat.curves import discrete_curves
from quasched.sim.sweep import run_sweep
from quasched.traces import catalog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/traces"))
    parser.add_argument("--trace", default="openb-default")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="run the single FGD run this many times")
    parser.add_argument("--only-one", action="store_true", help="skip the 60-run sweep")
    args = parser.parse_args()

    start = time.perf_counter()
    nodes, workload = catalog.load_trace(args.trace, data_dir=args.data_dir)
    loaded = time.perf_counter()
    run = run_experiment(nodes, workload, ExperimentConfig(policy="fgd", seed=42, rng="go"))
    one = time.perf_counter() - start
    print(f"one FGD run: {one:.2f} s wall (load {loaded - start:.2f} s, simulate {run.elapsed_s:.2f} s, "
          f"{len(run.events)} events)")
    for _ in range(args.repeat - 1):
        cpu = time.process_time()
        run = run_experiment(nodes, workload, ExperimentConfig(policy="fgd", seed=42, rng="go"))
        print(f"again: simulate {run.elapsed_s:.2f} s wall, {time.process_time() - cpu:.2f} CPU s", flush=True)
    if args.only_one:
        return

    start = time.perf_counter()
    runs = run_sweep(nodes, workload, PAPER_POLICIES, range(42, 52),
                     ExperimentConfig(rng="go"), curves=discrete_curves, workers=args.workers)
    print(f"{len(runs)} runs (6 policies × 10 seeds) on {args.workers} workers: "
          f"{time.perf_counter() - start:.1f} s wall")
    parent = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS: parent {parent:.0f} MiB, largest worker {child:.0f} MiB")


if __name__ == "__main__":
    main()
