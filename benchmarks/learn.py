"""The learned policy: train its weights with CMA-ES, then evaluate it on held-out traces and seeds.

    python benchmarks/learn.py train --data-dir ../shared/traces --checkpoint quasched/policies/data/learned.json
    python benchmarks/learn.py eval --data-dir ../shared/traces --seeds 42-46

``train`` (:mod:`quasched.learn.es`): CMA-ES over the weights on the training traces (openb
variants *not* in the FGD paper) and seeds (``--rng native``), on every ``--node-every``-th node
of the cluster (the workload is tuned to 130 % of the smaller cluster), fitness = mean final GPU
allocation; writes the checkpoint, ``learn_history.csv`` (every candidate of every generation)
and ``learn_history.png`` to ``--out`` and prints the training cost (CPU-hours = CPU time of
this process and its sweep workers; wall time).
``eval``: the paired table of ``benchmarks/placement.py`` (``--rng go``, alloc at column 130,
failed pods, Δ vs FGD with wins) on held-out traces (by default six of the paper's 17; all with
``--traces``) and held-out seeds (42..),
plus ``learn_eval.csv`` (per trace, policy and seed) and ``learn_eval.png`` (Δ alloc vs FGD).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from quasched.extras import require_or_exit  # noqa: E402
from quasched.policies.learned import save_weights  # noqa: E402
from quasched.traces import catalog  # noqa: E402

from placement import paired_arguments, paired_sweep, reused, seed_range, sweep_arguments  # noqa: E402

if TYPE_CHECKING:
    from quasched.learn.es import Generation, TrainResult

#: the packaged checkpoint's training traces (openb variants not in the FGD paper; the first run used the
#: first three on every 4th node)
TRAIN_TRACES = ("openb-gpushare20", "openb-gpuspec05", "openb-cpu072", "openb-cpu235")
EVAL_POLICIES = ("fgd", "guard", "learned")
#: held out: one or two of the paper's traces per family, including the learned weights' best (cpu250) and worst (multigpu) cases
EVAL_TRACES = tuple(f"openb-{v}" for v in ("default", "cpu250", "gpushare40", "gpushare100", "gpuspec33", "multigpu50"))


def run_train(args: argparse.Namespace) -> None:
    require_or_exit("learn", "cma")
    from quasched.learn.es import train

    traces = {}
    for trace in args.traces:
        nodes, workload = catalog.load_trace(trace, data_dir=args.data_dir)
        traces[trace] = (nodes.take(range(0, len(nodes), args.node_every)), workload)
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []

    def checkpoint(gen: Generation, result: TrainResult) -> None:
        """Print the generation, save the best weights so far and the history (a stopped run keeps them)."""
        best = max(range(len(gen.fitness)), key=gen.fitness.__getitem__)
        print(f"generation {gen.index}: best {gen.fitness[best]:.3f} {[round(w, 3) for w in gen.weights[best]]}, "
              f"mean of pop {sum(gen.fitness) / len(gen.fitness):.3f}, sigma {gen.sigma:.3f}, "
              f"cpu {gen.cpu_s / 3600:.3f} h, wall {gen.wall_s / 60:.1f} min", flush=True)
        rows.extend({"generation": gen.index, "candidate": i, "fitness": f, **dict(zip(FEATURE_COLUMNS, w))}
                    for i, (w, f) in enumerate(zip(gen.weights, gen.fitness)))
        save_weights(args.checkpoint, result.best_weights, fitness=result.best_fitness, start_fitness=result.start_fitness,
                     train_traces=list(args.traces), train_seeds=args.seeds, node_every=args.node_every, rng="native",
                     generations=gen.index + 1, popsize=args.popsize, es_seed=args.es_seed,
                     cpu_hours=gen.cpu_s / 3600, wall_hours=gen.wall_s / 3600)
        history = pd.DataFrame(rows)
        history.to_csv(args.out / "learn_history.csv", index=False)
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.scatter(history.generation, history.fitness, s=8, alpha=0.5, label="candidates")
        ax.plot(history.groupby("generation").fitness.max(), "o-", label="best of generation")
        ax.axhline(result.start_fitness, color="gray", ls="--", label="start (FGD + 2 × headroom)")
        ax.set(xlabel="generation", ylabel="mean final GPU allocation (%)", title="CMA-ES on the training traces")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.out / "learn_history.png", dpi=120)
        plt.close(fig)

    result = train(traces, args.seeds, args.generations, args.popsize, args.sigma, args.es_seed, args.workers, checkpoint)
    print(json.dumps({"best_weights": result.best_weights, "best_fitness": result.best_fitness,
                      "start_fitness": result.start_fitness, "cpu_hours": result.history[-1].cpu_s / 3600,
                      "wall_hours": result.history[-1].wall_s / 3600}))


def run_eval(args: argparse.Namespace) -> None:
    records = paired_sweep(args.traces, args.policies, args.seeds, args.data_dir, args.workers,
                           reused(args.reuse), args.json)
    args.out.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame([{"trace": t, "policy": p, "seed": s, "alloc130": a, "failed": f}
                          for t, by_policy in records.items() for p, rec in by_policy.items()
                          for s, a, f in zip(rec["seeds"], rec["alloc"], rec["failed"])])
    frame.to_csv(args.out / "learn_eval.csv", index=False)
    if {"learned", "guard"} <= set(args.policies):
        pair = frame.pivot_table(index=["trace", "seed"], columns="policy", values="alloc130")
        delta = (pair.learned - pair.guard).groupby("trace")
        print("\n| trace | Δ alloc learned vs guard (wins) |\n|---|---|")
        for trace in args.traces:
            d = delta.get_group(trace)
            print(f"| {trace} | {d.mean():+.2f} ({int((d > 0).sum())}/{len(d)}) |")
    base = frame[frame.policy == "fgd"].set_index(["trace", "seed"]).alloc130
    fig, ax = plt.subplots(figsize=(12, 4))
    others = [p for p in args.policies if p != "fgd"]
    for i, policy in enumerate(others):
        delta = (frame[frame.policy == policy].set_index(["trace", "seed"]).alloc130 - base).groupby("trace").mean()
        delta = delta.reindex(args.traces)
        ax.bar([x + i / (len(others) + 1) for x in range(len(delta))], delta.values, 1 / (len(others) + 1), label=policy)
    ax.axhline(0, color="black", lw=0.8)
    centre = (len(others) - 1) / (2 * (len(others) + 1))
    ax.set_xticks([x + centre for x in range(len(args.traces))], [t.removeprefix("openb-") for t in args.traces],
                  rotation=45, ha="right")
    ax.set(ylabel="Δ GPU allocation at 130 % vs FGD (points)", title="Held-out traces and seeds (paired means)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    fig.tight_layout()
    fig.savefig(args.out / "learn_eval.png", dpi=120)


FEATURE_COLUMNS = ("w_fgd", "w_headroom", "w_bestfit", "w_gpupacking", "w_dotprod", "w_gpuclustering")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    t = commands.add_parser("train", help="CMA-ES over the weights on the training traces")
    t.add_argument("--data-dir", type=Path, default=Path("../shared/traces"))
    t.add_argument("--traces", nargs="+", default=list(TRAIN_TRACES))
    t.add_argument("--seeds", type=seed_range, default=seed_range("1-2"))
    t.add_argument("--node-every", type=int, default=1, help="train on every N-th node (a smaller, faster cluster)")
    t.add_argument("--generations", type=int, default=6)
    t.add_argument("--popsize", type=int, default=8)
    t.add_argument("--sigma", type=float, default=1.0)
    t.add_argument("--es-seed", type=int, default=1)
    t.add_argument("--workers", type=int, default=2)
    t.add_argument("--checkpoint", type=Path, default=Path("results/learn/learned.json"))
    t.add_argument("--out", type=Path, default=Path("results/learn"))
    e = paired_arguments(sweep_arguments(None, EVAL_TRACES, EVAL_POLICIES,
                                         commands.add_parser("eval", help="paired evaluation on held-out traces and seeds")))
    e.add_argument("--out", type=Path, default=Path("results/learn"))
    args = parser.parse_args()
    run_train(args) if args.command == "train" else run_eval(args)


if __name__ == "__main__":
    main()
