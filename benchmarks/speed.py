"""Speed and memory of the arrival experiment on openb-default (tune 1.3).

    python benchmarks/speed.py --data-dir ../shared/traces
    python benchmarks/speed.py --data-dir ../shared/traces --only-one --repeat 5 --against /tmp/speed_main
    python benchmarks/speed.py --data-dir ../shared/traces --scale 1 10 --repeat 3 --warm

Measures (1) one FGD run, single process, wall time including trace loading;
(2) all six paper policies × 10 seeds on both cores; (3) peak RSS of the
parent and of the largest worker. ``--against TREE`` instead times one FGD run per fresh
process, alternating this tree and ``TREE`` (e.g. ``git archive main | tar -x -C TREE``)
``--repeat`` times: CPU s of the first run in the process (it loads numba and the cached
kernels) and of a second run, and the best of each.

``--scale K …``: the same FGD experiment on a k× cluster with k× the pods (every node and pod of the trace repeated
k times under new names, so the typical pods and the tuning ratio stay the same). Each factor runs in a fresh process
(its peak RSS is its own): CPU and wall time of the run, peak RSS, and the RSS the run added over the loaded inputs;
``--repeat N`` runs every factor N times (factors interleaved) and keeps the least CPU time; ``--warm`` first runs
200 pods in the same process, so the fixed start-up (numba and its cached kernels) is not timed. Writes
``scale.csv`` and ``scale.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import csv
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

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


def replicate(data_dir: Path, trace: str, k: int):
    """Nodes and pods of ``trace``, each repeated ``k`` times under new names."""
    nodes, workload = catalog.load_trace(trace, data_dir=data_dir)
    rows = np.tile(np.arange(len(nodes)), k)
    names = np.array([f"{n}-r{i}" for i in range(k) for n in nodes.name.tolist()], dtype=object)
    pods = np.tile(np.arange(len(workload)), k)
    pod_names = [f"{n}-r{i}" for i in range(k) for n in workload.name.tolist()]
    return replace(nodes.take(rows), name=names), workload.take(pods, pod_names)


def rss_mib() -> float:
    """Current resident set size (MiB), from /proc."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 2**20


def measure(data_dir: Path, trace: str, k: int, seed: int, warm: bool = False) -> dict:
    """One run at factor ``k`` in this process (after a 200-pod warm-up run when ``warm``)."""
    nodes, workload = replicate(data_dir, trace, k)
    if warm:
        run_experiment(nodes, workload.take(np.arange(200)), ExperimentConfig(policy="fgd", seed=seed, rng="go"))
    loaded = rss_mib()
    wall, cpu = time.perf_counter(), time.process_time()
    result = run_experiment(nodes, workload, ExperimentConfig(policy="fgd", seed=seed, rng="go"))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    placed = int((result.events.node >= 0).sum())
    return {"factor": k, "nodes": len(nodes), "events": len(result.events), "placed": placed,
            "cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "peak_rss_mib": round(peak, 1),
            "run_rss_mib": round(peak - loaded, 1), "alloc_pct": round(float(result.events.gpu_alloc_pct[-1]), 3)}


def plot_scale(path: Path, rows: list[dict]) -> None:
    """Each factor's CPU time and memory as a ratio to the first factor's."""
    from matplotlib.figure import Figure

    base = rows[0]
    k = np.array([r["factor"] for r in rows]) / base["factor"]
    fig = Figure(figsize=(6, 4), dpi=120)
    ax = fig.subplots()
    for key, label in (("cpu_s", "CPU time"), ("peak_rss_mib", "peak RSS"), ("run_rss_mib", "RSS added by the run")):
        ax.plot(k, [r[key] / base[key] for r in rows], marker="o", label=label)
    ax.plot(k, k, ls=":", color="grey", label="linear")
    ax.plot(k, 1.2 * k, ls="--", color="red", lw=1, label="time goal (1.2 × factor)")
    ax.set_xlabel("scale factor (nodes and pods)")
    ax.set_ylabel(f"ratio to factor {base['factor']}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def scale(args: argparse.Namespace) -> None:
    """``--scale``: every factor in fresh processes, ``--repeat`` times; table, ``scale.csv`` and ``scale.png``."""
    runs: dict[int, list[dict]] = {k: [] for k in args.scale}
    for _ in range(args.repeat):
        for k in args.scale:
            child = subprocess.run([sys.executable, __file__, "--data-dir", str(args.data_dir), "--trace", args.trace,
                                    "--seed", str(args.seed), "--one", str(k), *(["--warm"] if args.warm else [])],
                                   capture_output=True, text=True, check=True)
            runs[k].append(json.loads(child.stdout))
            print(runs[k][-1], flush=True)
    rows = [{**min(runs[k], key=lambda r: r["cpu_s"]), "warm": args.warm,
             "cpu_s_all": " ".join(str(r["cpu_s"]) for r in runs[k])} for k in args.scale]
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "scale.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    plot_scale(args.out / "scale.png", rows)
    base = rows[0]
    print("| factor | nodes | events | CPU s | × | wall s | peak RSS MiB | × | run RSS MiB | × |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['factor']} | {r['nodes']:,} | {r['events']:,} | {r['cpu_s']} | {r['cpu_s'] / base['cpu_s']:.1f} | "
              f"{r['wall_s']} | {r['peak_rss_mib']} | {r['peak_rss_mib'] / base['peak_rss_mib']:.1f} | "
              f"{r['run_rss_mib']} | {r['run_rss_mib'] / base['run_rss_mib']:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/traces"))
    parser.add_argument("--trace", default="openb-default")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="run the single FGD run (or each --scale factor) this many times")
    parser.add_argument("--only-one", action="store_true", help="skip the 60-run sweep")
    parser.add_argument("--against", type=Path, help="another source tree to time one FGD run against")
    parser.add_argument("--scale", type=int, nargs="+", help="scale factors to run instead (e.g. 1 10)")
    parser.add_argument("--warm", action="store_true", help="--scale: time each run after a 200-pod warm-up")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=Path, default=Path("results/speed"), help="where CSVs and plots are written")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one timed process
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one scale factor in this process
    args = parser.parse_args()
    if args.child:
        print(json.dumps(timed_runs(args.data_dir, args.trace)))
        return
    if args.one is not None:
        print(json.dumps(measure(args.data_dir, args.trace, args.one, args.seed, args.warm)))
        return
    if args.against:
        interleave(args)
        return
    if args.scale:
        scale(args)
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
