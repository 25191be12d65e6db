"""Scheduling-decision latency of the service's loop, in process (no HTTP, no database).

    python benchmarks/service_decisions.py --data-dir ../shared/traces [--trace openb-default] [--policy fgd]

Replays a trace through :func:`quasched.service.virtual.run_virtual`'s loop
on the trace's cluster (openb: 1,213 nodes) and times every cycle that the
submissions and completions trigger (``Controller.cycle``: queue order, quota,
fit guard, policy Filter/Score/Reserve, bind, pending reasons). Reports
p50/p99/max in milliseconds and the cycles per second.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from quasched.service.controller import Controller
from quasched.service import virtual
from quasched.traces import catalog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--trace", default="openb-default")
    parser.add_argument("--policy", default="fgd")
    args = parser.parse_args()
    nodes, workload = catalog.load_trace(args.trace, data_dir=args.data_dir)
    timings: list[float] = []
    cycle = Controller.cycle

    def timed(self: Controller, now: float) -> None:
        start = time.perf_counter()
        cycle(self, now)
        timings.append(time.perf_counter() - start)

    Controller.cycle = timed  # type: ignore[method-assign]
    started = time.perf_counter()
    run = virtual.run_virtual(nodes, workload, args.policy, 42)
    wall = time.perf_counter() - started
    ms = np.array(timings) * 1000
    print(f"{args.trace} on {len(nodes)} nodes, {args.policy}: {len(ms)} cycles, "
          f"{int(np.isfinite(run.started).sum())} of {len(workload)} jobs started, {wall:.1f} s in all")
    print(f"cycle latency ms: p50 {np.percentile(ms, 50):.3f}  p99 {np.percentile(ms, 99):.3f}  "
          f"max {ms.max():.1f}  ({len(ms) / (ms.sum() / 1000):.0f} cycles/s)")


if __name__ == "__main__":
    main()
