"""Distribution of the Random policy's column-130 GPU allocation on openb-default (tune 1.3).

Random is reproducible in distribution only (Go's feasible-node order is
nondeterministic), so we compare many seeds with the ten published runs.

    python benchmarks/random_distribution.py --data-dir ../shared/traces --seeds 42-141
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from quasched.compat.golden import published_curves
from quasched.sim.arrival import ExperimentConfig
from quasched.compat.curves import discrete_curves
from quasched.sim.sweep import run_sweep
from quasched.traces import catalog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/traces"))
    parser.add_argument("--golden", type=Path, default=Path("../shared/golden/kss-default"))
    parser.add_argument("--seeds", default="42-141")
    args = parser.parse_args()
    lo, hi = (int(x) for x in args.seeds.split("-"))
    nodes, workload = catalog.load_trace("openb-default", data_dir=args.data_dir)
    runs = run_sweep(nodes, workload, ["random"], range(lo, hi + 1), ExperimentConfig(rng="go"), curves=discrete_curves)
    ours = np.array([r.curves.alloc[130] for r in runs])
    table = published_curves(args.golden)["alloc"]
    ref = table[table.sc_policy == "01-Random"]["130"].to_numpy(float)
    first10 = ours[:10]
    inside = (ours >= ref.min()) & (ours <= ref.max())
    rng = np.random.default_rng(0)
    pooled = np.concatenate([ours, ref])
    observed = abs(ours.mean() - ref.mean())
    perm = [abs(np.mean(s[: len(ours)]) - np.mean(s[len(ours):]))
            for s in (rng.permutation(pooled) for _ in range(20000))]
    print(f"published (10 seeds): mean {ref.mean():.3f}, std {ref.std(ddof=1):.3f}, range [{ref.min()}, {ref.max()}]")
    print(f"ours ({len(ours)} seeds {lo}..{hi}): mean {ours.mean():.3f}, std {ours.std(ddof=1):.3f}, "
          f"range [{ours.min()}, {ours.max()}], 5-95% [{np.percentile(ours, 5):.2f}, {np.percentile(ours, 95):.2f}]")
    print(f"seeds 42..51: {first10.tolist()} mean {first10.mean():.3f}")
    print(f"share of our runs inside the published range: {inside.mean():.0%}")
    print(f"permutation test of equal means (ours vs published): p = {np.mean(np.array(perm) >= observed):.3f}")


if __name__ == "__main__":
    main()
