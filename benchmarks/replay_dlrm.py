"""Speed of the time-based replay on the full DLRM v2025 trace (or any catalog trace).

    python benchmarks/replay_dlrm.py --data-dir ../shared/traces --policy fgd
    python benchmarks/replay_dlrm.py --policy all --headroom 0.5 --missing-creation start
    python benchmarks/replay_dlrm.py --trace openb-default --policy fgd,bestfit
    python benchmarks/replay_dlrm.py --profile          # pyinstrument report of one run

Loads the trace, sizes the cluster (``dlrm_cluster(workload, headroom)`` for
``dlrm-2025``, the trace's node list otherwise), replays it once per policy in
this process and prints load and replay wall times plus the summary table.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from quasched.policies import PAPER_POLICIES
from quasched.report.replay import summary_rows
from quasched.sim.replay import run_replay
from quasched.traces import catalog
from quasched.traces.dlrm import dlrm_cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/traces"))
    parser.add_argument("--trace", default="dlrm-2025")
    parser.add_argument("--policy", default="fgd", help="name, comma-separated names or 'all'")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--headroom", type=float, default=1.0, help="dlrm-2025 cluster size factor")
    parser.add_argument("--departure", choices=("trace", "duration"), default="duration")
    parser.add_argument("--missing-creation", choices=("skip", "start"), default="start")
    parser.add_argument("--profile", action="store_true", help="profile the (first) replay with pyinstrument")
    args = parser.parse_args()
    policies = list(PAPER_POLICIES) if args.policy == "all" else args.policy.split(",")

    start = time.perf_counter()
    nodes, workload = catalog.load_trace(args.trace, data_dir=args.data_dir)
    if args.trace == "dlrm-2025":
        nodes = dlrm_cluster(workload, headroom=args.headroom)
    print(f"{args.trace}: {len(workload):,} pods, {len(nodes):,} nodes ({nodes.total_gpus:,} GPUs, "
          f"{nodes.source or 'node list'}), loaded in {time.perf_counter() - start:.2f} s")

    for i, policy in enumerate(policies):
        profiler = None
        if args.profile and i == 0:
            from pyinstrument import Profiler

            profiler = Profiler()
            profiler.start()
        t0 = time.perf_counter()
        result = run_replay(nodes, workload, policy, args.seed, departure=args.departure,
                            missing_creation=args.missing_creation)
        wall = time.perf_counter() - t0
        if profiler is not None:
            profiler.stop()
            print(profiler.output_text(unicode=True, color=False, show_all=False))
        print(f"\n== {policy}: replay {wall:.2f} s wall, {len(result.events):,} events "
              f"({1e6 * wall / max(len(result.events), 1):.0f} µs/event)")
        for label, value in summary_rows(result):
            print(f"  {label:<34} {value}")
    print(f"\npeak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
