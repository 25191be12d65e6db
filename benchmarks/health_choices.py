"""Why kills of pods placed after their node's first error remain: what the flaky posterior saw at those placements.

    python benchmarks/health_choices.py --data-dir ../shared/traces --seeds 42-46 --out results/health-health4

For each seed, one replay of ``--setup`` (the health benchmark's protocol: dlrm-2025 × ``--repeat``, 2e-5,
precursor share 0.5) with the scoring of :class:`~quasched.policies.flaky.FlakyPosterior` recorded (a diagnostic
wrapper around its ``score``). For every kill of a pod whose run was placed after its node's first error: the
placement time, how many nodes were feasible, the posterior P(flaky) of the chosen node and of the least suspect
feasible node, and how many feasible nodes had none of the chosen node's suspicion (p below 1 %). Writes
``health_choices.csv`` and ``health_choices.png`` to ``--out`` and prints a table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from quasched.federation.scenario import repeat_workload
from quasched.policies import flaky
from quasched.sim.failures import FailureConfig
from quasched.sim.replay import replay
from quasched.sim.replay_result import ReplayConfig
from quasched.traces import catalog

from health import setup_options  # benchmarks/ is on sys.path when run as a script
from own_policy import seed_range

SETUP = "healthfgd:flaky=256+drain_errors=1+migrate=device+migrate_rule=pays+migrate_at=checkpoint"


def placements_seen(args: argparse.Namespace, seed: int) -> pd.DataFrame:
    """One replay; per kill placed after its node's first error, what the flaky term saw at its placement."""
    nodes, workload = catalog.load_trace("dlrm-2025", data_dir=args.data_dir)
    workload = repeat_workload(workload, args.repeat) if args.repeat > 1 else workload
    seen: dict[tuple[int, float], tuple[np.ndarray, np.ndarray]] = {}
    score = flaky.FlakyPosterior.score

    def recording(self, cluster, pod, nodes_, state):  # type: ignore[no-untyped-def]
        scores = score(self, cluster, pod, nodes_, state)
        seen[pod.uid, cluster.errors.now] = nodes_.copy(), (100 - scores) / 100 * cluster.num_gpus.max() ** 2
        return scores

    policy, remedies = setup_options(args.setup)
    config = FailureConfig(rate=2e-5, seed=seed, checkpoint_min=30, restart_min=5, precursor_share=0.5, **remedies)
    flaky.FlakyPosterior.score = recording  # type: ignore[method-assign]
    try:
        result = replay(nodes, workload, ReplayConfig(policy=policy, seed=seed, failures=config))
    finally:
        flaky.FlakyPosterior.score = score  # type: ignore[method-assign]
    log, ledger = result.cluster.errors, result.ledger
    assert ledger is not None and log.prior is not None
    first = pd.Series(log.time, dtype=float).groupby(pd.Series(log.node, dtype=int)).min()
    rows = []
    for kill in ledger.kills:
        if not first.get(kill.node, np.inf) <= kill.run_start:
            continue
        feasible, p = seen.get((kill.uid, kill.run_start), (np.zeros(0, dtype=int), np.zeros(0)))
        p_node = p[feasible == kill.node]
        rows.append({"seed": seed, "day": (kill.run_start - log.prior.since) / 86400, "lost_gpu_h": kill.lost_gpu_s / 3600,
                     "feasible": len(feasible), "p_chosen": p_node[0] if len(p_node) else np.nan,
                     "p_least": p.min() if len(p) else np.nan, "clean_feasible": int(np.sum(p < 0.01))})
    return pd.DataFrame(rows)


def plot(path: Path, kills: pd.DataFrame) -> None:
    """Each kill placed after its node's first error: the chosen node's posterior against the least suspect one's."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 5), dpi=110)
    ax = fig.subplots()
    scored = kills.dropna(subset=["p_chosen"])
    points = ax.scatter(scored.p_least, scored.p_chosen, c=scored.feasible, s=10 + 40 * scored.lost_gpu_h, cmap="viridis")
    fig.colorbar(points, ax=ax, label="feasible nodes at the placement")
    ax.plot([0, 1], [0, 1], color="grey", lw=1, ls=":")
    ax.set_xlabel("P(flaky) of the least suspect feasible node")
    ax.set_ylabel("P(flaky) of the chosen node")
    ax.set_title("Kills of pods placed after their node's first error (size: GPU-h lost)", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--seeds", type=seed_range, default=seed_range("42-46"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--setup", default=SETUP)
    parser.add_argument("--out", type=Path, default=Path("results/health"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    kills = pd.concat([placements_seen(args, seed) for seed in args.seeds], ignore_index=True)
    kills.to_csv(args.out / "health_choices.csv", index=False)
    plot(args.out / "health_choices.png", kills)
    scored = kills.dropna(subset=["p_chosen"])
    no_clean = scored.clean_feasible == 0
    print(f"setup {args.setup}, seeds {args.seeds[0]}-{args.seeds[-1]}\n")
    print("| kills placed after the node's first error | lost GPU-h | with the scoring seen | no clean feasible node "
          "| chosen node no more suspect than the least suspect one | median feasible nodes |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(f"| {len(kills)} | {kills.lost_gpu_h.sum():.2f} | {len(scored)} | {int(no_clean.sum())} "
          f"({scored.lost_gpu_h[no_clean].sum():.2f} GPU-h) | {int(np.sum(scored.p_chosen <= scored.p_least + 1e-9))} "
          f"| {scored.feasible.median():.0f} |")
    print(f"\nwrote {args.out}/health_choices.csv and health_choices.png")


if __name__ == "__main__":
    main()
