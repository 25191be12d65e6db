"""Which placements set a fresh CPU core working, and could they have avoided it (issue 11 item 2)?

    python benchmarks/power_overflow.py --data-dir ../shared/traces --traces openb-default --seeds 42 \
        --policies pwrbalance2 pwrbalance3 --out results/power/overflow

Replays each run's placements (``--rng go``, tune 1.3) up to 80 % arrived. A pod of ``p`` cores with a
fraction (``p ∉ ℕ``) either fits in the residue ``⌈k⌉ − k`` of its node's last working core or sets
``⌈p⌉`` cores working (an "overflow"; the residues are the CPU part of the gap to the reachable floor,
``benchmarks/power_decompose.py``). Per pod kind: fits, overflows although a feasible node of the same
GPU swing had room, overflows where only a node of another swing had, and overflows where no feasible
node had. Writes ``overflow.csv`` and prints it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from quasched.metrics.power import MILLI_PER_VCPU, PWR_MODEL, VCPUS_PER_CORE
from quasched.model import Cluster
from quasched.model.resources import CPU
from quasched.policies.filter import feasible_nodes
from quasched.sim.arrival import ExperimentConfig, run_experiment
from quasched.traces import catalog

from own_policy import sweep_arguments  # benchmarks/ is on sys.path when run as a script
from power import SAVING_TO

MILLI_PER_CORE = MILLI_PER_VCPU * VCPUS_PER_CORE


def overflows(trace: str, data_dir: Path, policy: str, seed: int) -> Counter[tuple[str, str]]:
    """``(pod kind, outcome)`` counts of one run (module docstring)."""
    nodes, workload = catalog.load_trace(trace, data_dir=data_dir)
    run = run_experiment(nodes, workload, ExperimentConfig(policy=policy, seed=seed, rng="go"))
    cluster = Cluster(nodes)
    idle, full = PWR_MODEL.gpu_watts(cluster.models)
    swing = (full - idle)[cluster.model_id]
    ev, counts = run.events, Counter[tuple[str, str]]()
    for e in np.flatnonzero((ev.node >= 0) & (ev.arrived_gpu_milli <= SAVING_TO * 10 * nodes.total_gpus)):
        placement = run.cluster.placements[int(ev.pod[e])]
        pod, node = placement.pod, placement.node
        fraction = pod.cpu_milli % MILLI_PER_CORE
        if fraction:
            feasible = feasible_nodes(cluster, pod)
            used = cluster.capacity[feasible, CPU] - cluster.free[feasible, CPU]
            fits = (-used) % MILLI_PER_CORE >= fraction  # the residue of the last working core, milli
            same = swing[feasible] == swing[node]
            kind = "whole" if pod.gpu_milli >= 1000 else "sharing" if pod.is_gpu else "CPU only"
            outcome = ("fits" if fits[np.searchsorted(feasible, node)] else "overflow, a same-swing node had room"
                       if (fits & same).any() else "overflow, only another swing had room" if fits.any()
                       else "overflow, no feasible node had room")
            counts[kind, outcome] += 1
        cluster.place(pod, node, placement.devices)
    return counts


def main() -> None:
    parser = sweep_arguments(__doc__, ("openb-default",), ("pwrbalance2",))
    parser.add_argument("--out", type=Path, default=Path("results/power/overflow"))
    args = parser.parse_args()
    rows = [{"trace": trace, "policy": policy, "seed": seed, "kind": kind, "outcome": outcome, "pods": n}
            for trace in args.traces for policy in args.policies for seed in args.seeds
            for (kind, outcome), n in sorted(overflows(trace, args.data_dir, policy, seed).items())]
    table = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "overflow.csv", index=False)
    print(table.pivot_table(index=["policy", "kind", "outcome"], columns="seed", values="pods", aggfunc="sum", fill_value=0).to_string())


if __name__ == "__main__":
    main()
