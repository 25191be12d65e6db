"""Fair share, borrowing and reclaim of the service's loop, on a virtual clock.

    python benchmarks/service_fairness.py [--out results/service]

Three teams share a 256-GPU cluster (32 nodes x 8 GPUs) with nominal quotas
of 50/30/20 % in one cohort (borrowing unlimited). Team ``vision`` bursts at
t = 0 with far more work than the cluster holds and borrows everything idle;
``nlp`` submits at t = 10 min and ``speech`` at t = 20 min. Jobs take 1, 2 or
4 whole GPUs and run 2 h; preempted jobs are requeued (grace 30 s).

Reported: for each team, the time from its first submission until its usage
reaches 95 % of its nominal share (or its own demand, if smaller); GPUs used
per team over time (plot); Jain's fairness index of usage/nominal once all
three teams have demand; preemptions. Deterministic for a seed.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

from quasched.model.nodes import NodeSpec
from quasched.service.controller import Controller
from quasched.service.domain import JobSpec, QueueSpec
from quasched.service.loop_state import LoopOptions

TEAMS = {"vision": (0.5, 0.0, 600), "nlp": (0.3, 600.0, 300), "speech": (0.2, 1200.0, 200)}  # share, start, jobs
GPUS_PER_NODE, NODES = 8, 32
HORIZON, STEP = 3 * 3600.0, 10.0


def cluster() -> NodeSpec:
    return NodeSpec(name=np.array([f"node-{i:02d}" for i in range(NODES)], dtype=object),
                    cpu_milli=np.full(NODES, 128_000), memory_mib=np.full(NODES, 1_024_000),
                    num_gpus=np.full(NODES, GPUS_PER_NODE), gpu_model=np.full(NODES, "A100", dtype=object))


def jain(x: np.ndarray) -> float:
    """Jain's index (sum x)^2 / (n sum x^2): 1 = perfectly even."""
    return float(x.sum() ** 2 / (len(x) * (x ** 2).sum())) if (x ** 2).sum() else 1.0


def run(seed: int = 0, policy: str = "fgd") -> dict:
    total = GPUS_PER_NODE * NODES
    queues = [QueueSpec(t, {"*": share * total}, cohort="org") for t, (share, _, _) in TEAMS.items()]
    ctl = Controller(cluster(), queues, LoopOptions(policy=policy, seed=seed, grace_s=30.0))
    rng = np.random.default_rng(seed)
    arrivals = sorted((start + i * 0.5, team, int(rng.choice([1, 2, 4])))
                      for team, (_, start, n) in TEAMS.items() for i in range(n))
    next_id, samples, preempted = 1, [], 0
    reached: dict[str, float] = {}
    t = 0.0
    while t <= HORIZON:
        while arrivals and arrivals[0][0] <= t:
            at, team, gpus = arrivals.pop(0)
            ctl.submit(next_id, JobSpec(f"{team}-{next_id}", team, 4000, 32_000, gpus, 1000, duration_s=7200.0), at)
            next_id += 1
        ctl.cycle(t)
        preempted += sum(e.kind == "preempted" for e in ctl.drain_changes()[1])
        status = {q["name"]: q for q in ctl.queue_status()}
        samples.append((t, *(status[team]["used_gpus"] for team in TEAMS)))
        for team, (share, start, _) in TEAMS.items():
            target = 0.95 * share * total
            if team not in reached and t >= start and status[team]["used_gpus"] >= target:
                reached[team] = t - start
        t += STEP
    used = np.array(samples)
    steady = used[used[:, 0] >= 1200 + 600]  # all teams have demand; ten minutes to settle
    nominal = np.array([share * total for share, _, _ in TEAMS.values()])
    return {"samples": used, "reached": reached, "preempted": preempted,
            "jain": float(np.mean([jain(row[1:] / nominal) for row in steady])),
            "steady_mean": steady[:, 1:].mean(axis=0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results/service"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    result = run(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "fairness.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["time_s", *TEAMS])
        writer.writerows(result["samples"].tolist())
    total = GPUS_PER_NODE * NODES
    print(f"{'team':8} {'nominal':>8} {'time to 95% of nominal':>24} {'steady GPUs':>12}")
    for (team, (share, _, _)), mean in zip(TEAMS.items(), result["steady_mean"]):
        reach = result["reached"].get(team)
        print(f"{team:8} {share * total:8.1f} {'never' if reach is None else f'{reach:.0f} s':>24} {mean:12.1f}")
    print(f"Jain's index of usage/nominal (steady state): {result['jain']:.4f}; preemptions: {result['preempted']}")
    plot(result["samples"], args.out / "fairness.png")


def plot(samples: np.ndarray, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    total = GPUS_PER_NODE * NODES
    fig, ax = plt.subplots(figsize=(8, 4))
    minutes = samples[:, 0] / 60
    for i, ((team, (share, start, _)), color) in enumerate(zip(TEAMS.items(), ("C0", "C1", "C2"))):
        ax.plot(minutes, samples[:, 1 + i], color=color, label=f"{team} (quota {share:.0%})")
        ax.hlines(share * total, start / 60, minutes[-1], colors=color, linestyles="--", linewidth=1)
    ax.set_xlabel("minutes")
    ax.set_ylabel("GPUs used; dashed = nominal quota")
    ax.set_title("Borrowing and reclaim: 3 teams, quotas 50/30/20 %, cohort of 256 GPUs")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
