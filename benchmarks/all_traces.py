"""Every openb trace (tune-up and tune-down alike) through the same code, all six policies.

    python benchmarks/all_traces.py --data-dir ../shared/traces --seed 42

Prints one markdown row per trace: events, tuning, wall time and GPU allocation at
column 130 per policy (the FGD paper's headline metric).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from quasched.compat.artifact import policy_label
from quasched.policies import PAPER_POLICIES
from quasched.sim.arrival import ExperimentConfig
from quasched.compat.curves import discrete_curves
from quasched.sim.sweep import run_sweep
from quasched.traces import catalog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/traces"))
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    names = [n for n in catalog.list_traces() if n.startswith("openb-")]
    labels = [policy_label(p).split("-", 1)[1] for p in PAPER_POLICIES]
    print("| trace | pods | events | wall s | " + " | ".join(labels) + " |")
    print("|---" * (4 + len(labels)) + "|")
    for name in names:
        nodes, workload = catalog.load_trace(name, data_dir=args.data_dir)
        start = time.perf_counter()
        runs = run_sweep(nodes, workload, PAPER_POLICIES, [args.seed],
                         ExperimentConfig(rng="go"), curves=discrete_curves, workers=args.workers)
        wall = time.perf_counter() - start
        cells = " | ".join(f"{r.curves.alloc[130]:.2f}" for r in runs)
        print(f"| {name} | {len(workload)} | {runs[0].events} | {wall:.1f} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
