"""A full-year, 4-cluster federated replay of the DLRM v2025 trace (issue 11: must take <= 5 min on 2 cores).

    python benchmarks/federation_year.py --data-dir ../shared/traces --carbon-dir ../shared/carbon

The one-month trace is repeated back to back (:func:`repeat_workload`) and cut to 365 days; the
cluster (``dlrm_cluster`` of the month, ``--headroom``) is split at random into 4 clusters in 4
zones drawn from the 12 (``--days``: only the first days, for speed checks; ``--decisions``: every job's
cluster, release and placement, to check that a speed-up keeps the decisions); half the jobs of at most 24 h get 4-24 h of slack. Prints the load and
replay wall and CPU times (the machine may be shared: CPU time is the
figure to compare with the 5-minute budget), the run's summary and, after the timing, how many jobs waited in a
queue, how many of them some job passed (:func:`~quasched.federation.metrics.queue_passing`) and the misses among
them. Carbon: Electricity Maps (ODbL).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

from quasched.federation.engine import run_federation
from quasched.federation.metrics import queue_passing, summarize
from quasched.federation.registry import make_dispatcher
from quasched.federation.scenario import Scenario, build_scenario, jobs_of, repeat_workload
from quasched.traces.carbon import ATTRIBUTION, carbon_zones, load_carbon
from quasched.traces.catalog import load_trace
from quasched.traces.dlrm import dlrm_cluster

DAY_S = 24 * 3600.0


def year_arguments(doc: str | None) -> argparse.ArgumentParser:
    """The options of the DLRM year scenario (:func:`dlrm_year`), ``--policy`` and ``--seed``."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/traces"))
    parser.add_argument("--carbon-dir", type=Path, default=Path("../shared/carbon"))
    parser.add_argument("--policy", default="fgd")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--headroom", type=float, default=1.2)
    parser.add_argument("--days", type=float, default=365, help="replay only the first DAYS days (speed checks)")
    return parser


def dlrm_year(args: argparse.Namespace) -> Scenario:
    """The DLRM month repeated and cut to ``args.days`` days, on 4 clusters in 4 zones (module docstring)."""
    _, month = load_trace("dlrm-2025", args.data_dir)
    arrival, duration = jobs_of(month)
    span = args.days * DAY_S
    year = repeat_workload(month, math.ceil(span / float((arrival + duration).max())))
    arrival, _ = jobs_of(year)
    year = year.take(np.flatnonzero(arrival < span))
    zones = [load_carbon(z, args.carbon_dir) for z in carbon_zones(args.carbon_dir)]
    return build_scenario(dlrm_cluster(month, headroom=args.headroom), year, zones, args.seed)


def main() -> None:
    parser = year_arguments(__doc__)
    parser.add_argument("--dispatcher", default="ours-nested", help="a dispatcher spec (default: ours)")
    parser.add_argument("--decisions", type=Path, help="write every job's cluster, release and placement time (CSV)")
    args = parser.parse_args()
    began, cpu = time.perf_counter(), time.process_time()
    scenario = dlrm_year(args)
    year = scenario.workload
    loaded, cpu_loaded = time.perf_counter(), time.process_time()
    run = run_federation(scenario, make_dispatcher(args.dispatcher), args.policy, args.seed)
    done, cpu_done = time.perf_counter(), time.process_time()
    print(f"{len(year):,} jobs, {scenario.horizon_hours:,} h, clusters "
          + ", ".join(f"{m.name} ({len(m.nodes)} nodes, PUE {m.pue})" for m in scenario.members))
    print(f"wall: load + scenario {loaded - began:.1f} s, federated replay {done - loaded:.1f} s, "
          f"total {done - began:.1f} s; CPU (this process): {cpu_loaded - cpu:.1f} + {cpu_done - cpu_loaded:.1f} = "
          f"{cpu_done - cpu:.1f} s; load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for key, value in (summarize(run) | queue_passing(run)).items():
        print(f"  {key}: {value:,.3f}" if isinstance(value, float) else f"  {key}: {value}")
    print(ATTRIBUTION)
    if args.decisions:
        pd.DataFrame({"cluster": run.cluster, "released": run.released, "placed": run.placed}).to_csv(
            args.decisions, index_label="job")


if __name__ == "__main__":
    main()
