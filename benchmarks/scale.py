"""Scale test: the FGD arrival experiment on a k× openb-default cluster with k× the pods.

    python benchmarks/scale.py --data-dir ../shared/traces --factors 1 10 --out results/scale

Every node of openb-default is replicated k times (``<name>-r<i>``) and every pod k
times, so the typical pods and the tuning ratio stay the same and the run sees about
k× the events on k× the nodes. Each factor runs in a fresh process (so its peak RSS is
its own): CPU seconds and wall time of the run alone, peak RSS of the process, and the
RSS the run added over the loaded inputs. Writes ``scale.csv`` and ``scale.png``.

``--repeat N`` runs every factor N times (fresh processes, factors interleaved) and keeps
the run with the least CPU time; ``--warm`` first runs the first 200 pods of the trace in
the same process, so the fixed start-up (loading numba and its cached kernels) is not timed:
the ratio then measures how the run itself scales.

    python benchmarks/scale.py --data-dir ../shared/traces --factors 1 10 --repeat 3 --warm
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np


def replicate(data_dir: Path, trace: str, k: int):
    """Nodes and pods of ``trace``, each repeated ``k`` times under new names."""
    from quasched.traces import catalog

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
    from quasched.sim.arrival import ExperimentConfig, run_experiment

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


def plot(path: Path, rows: list[dict]) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/traces"))
    parser.add_argument("--trace", default="openb-default")
    parser.add_argument("--factors", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=Path, default=Path("results/scale"))
    parser.add_argument("--repeat", type=int, default=1, help="runs per factor; the least CPU time is kept")
    parser.add_argument("--warm", action="store_true", help="time the run after a 200-pod warm-up in its process")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # child mode: measure one factor
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.data_dir, args.trace, args.one, args.seed, args.warm)))
        return
    runs: dict[int, list[dict]] = {k: [] for k in args.factors}
    for _ in range(args.repeat):
        for k in args.factors:
            child = subprocess.run([sys.executable, __file__, "--data-dir", str(args.data_dir), "--trace", args.trace,
                                    "--seed", str(args.seed), "--one", str(k), *(["--warm"] if args.warm else [])],
                                   capture_output=True, text=True, check=True)
            runs[k].append(json.loads(child.stdout))
            print(runs[k][-1], flush=True)
    rows = [{**min(runs[k], key=lambda r: r["cpu_s"]), "warm": args.warm,
             "cpu_s_all": " ".join(str(r["cpu_s"]) for r in runs[k])} for k in args.factors]
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "scale.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    plot(args.out / "scale.png", rows)
    base = rows[0]
    print("| factor | nodes | events | CPU s | × | wall s | peak RSS MiB | × | run RSS MiB | × |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['factor']} | {r['nodes']:,} | {r['events']:,} | {r['cpu_s']} | {r['cpu_s'] / base['cpu_s']:.1f} | "
              f"{r['wall_s']} | {r['peak_rss_mib']} | {r['peak_rss_mib'] / base['peak_rss_mib']:.1f} | "
              f"{r['run_rss_mib']} | {r['run_rss_mib'] / base['run_rss_mib']:.1f} |")


if __name__ == "__main__":
    main()
