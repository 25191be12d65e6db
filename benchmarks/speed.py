"""Speed and memory of the arrival experiment on openb-default (tune 1.3).

    python benchmarks/speed.py --data-dir ../shared/traces
    python benchmarks/speed.py --data-dir ../shared/traces --only-one --repeat 5 --against /tmp/speed_main

Measures (1) one FGD run, single process, wall time including trace loading;
(2) all six paper policies × 10 seeds on both cores; (3) peak RSS of the
parent and of the largest worker. ``--against TREE`` instead times one FGD run per fresh
process, alternating this tree and ``TREE`` (e.g. ``git archive main | tar -x -C TREE``)
``--repeat`` times: CPU s of the first run in the process (it loads numba and the cached
kernels) and of a second run, and the best of each.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from quasched.policies import PAPER_POLICIES
from quasched.sim.arrival import ExperimentConfig, run_experiment
from quasched.compat.curves import discrete_curves
from quasched.sim.sweep import run_sweep
from quasched.traces import catalog


def timed_runs(data_dir: Path, trace: str) -> dict[str, float]:
    """CPU s of a first and a second FGD run in this process (the first loads numba's cached kernels)."""
    nodes, workload = catalog.load_trace(trace, data_dir=data_dir)
    cpu = []
    for _ in range(2):
        start = time.process_time()
        run_experiment(nodes, workload, ExperimentConfig(policy="fgd", seed=42, rng="go"))
        cpu.append(round(time.process_time() - start, 3))
    return {"first_cpu_s": cpu[0], "second_cpu_s": cpu[1]}


def interleave(args: argparse.Namespace) -> None:
    """``--repeat`` fresh processes per tree, alternating; prints every run and the best of each."""
    here = Path(__file__).resolve().parents[1]
    trees = {"against": args.against.resolve(), "this": here}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.repeat):
        for name, tree in trees.items():
            env = {**os.environ, "PYTHONPATH": str(tree)}
            out = subprocess.run([sys.executable, __file__, "--child", "--data-dir", str(args.data_dir.resolve()),
                                  "--trace", args.trace], env=env, cwd=tree, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(out.stdout))
            print(name, runs[name][-1], f"load {os.getloadavg()[0]:.1f}", flush=True)
    for name, rows in runs.items():
        print(f"{name} ({trees[name]}): best first run {min(r['first_cpu_s'] for r in rows):.2f} CPU s, "
              f"best second run {min(r['second_cpu_s'] for r in rows):.2f} CPU s")
    write_interleaved(args.out, runs)


#: the target for one FGD run on openb-default, CPU s
GOAL_S = 1.5


def write_interleaved(out: Path, runs: dict[str, list[dict[str, float]]]) -> None:
    """``speed.csv`` (one row per process) and ``speed.png`` (CPU s per repetition) in ``out``."""
    import csv

    from matplotlib.figure import Figure

    out.mkdir(parents=True, exist_ok=True)
    with (out / "speed.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["tree", "repetition", "first_cpu_s", "second_cpu_s"])
        for name, rows in runs.items():
            writer.writerows([name, i, r["first_cpu_s"], r["second_cpu_s"]] for i, r in enumerate(rows))
    fig = Figure(figsize=(6, 4), dpi=120)
    ax = fig.subplots()
    trees = {"this": "this tree", "against": "--against tree"}
    for name, rows in runs.items():
        for run, style in (("first_cpu_s", "-o"), ("second_cpu_s", "--s")):
            ax.plot([r[run] for r in rows], style, label=f"{trees.get(name, name)}, {run.split('_')[0]} run in its process")
    ax.axhline(GOAL_S, color="grey", ls=":", label=f"goal {GOAL_S:g} s")
    ax.set_xticks(range(max(len(rows) for rows in runs.values())))
    ax.set_xlabel("repetition (fresh processes, trees alternate)")
    ax.set_ylabel("CPU s of one FGD run")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "speed.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/traces"))
    parser.add_argument("--trace", default="openb-default")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="run the single FGD run this many times")
    parser.add_argument("--only-one", action="store_true", help="skip the 60-run sweep")
    parser.add_argument("--against", type=Path, help="another source tree to time one FGD run against")
    parser.add_argument("--out", type=Path, default=Path("results/speed"), help="where --against writes CSV and plot")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one timed process
    args = parser.parse_args()
    if args.child:
        print(json.dumps(timed_runs(args.data_dir, args.trace)))
        return
    if args.against:
        interleave(args)
        return

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
