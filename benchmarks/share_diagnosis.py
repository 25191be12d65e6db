"""Where a GPU-sharing trace's idle GPU milli sits at the end of the FGD arrival run, and which pods fail.

    python benchmarks/share_diagnosis.py --data-dir ../shared/traces --trace openb-gpushare100 \
        --policies fgd oursbalance --seed 42 --out results/issue12_share_diagnosis

Per policy: the idle GPU milli by the free milli of its device (whole free devices, slivers by
size) and on nodes with less than 4 free cores; per GPU request (milli per device) the pods
that arrived and failed. Writes ``<out>.csv`` (one row per policy, bucket and measure) and
``<out>.png`` (idle milli per bucket).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from quasched.sim.arrival import ExperimentConfig, run_experiment  # noqa: E402
from quasched.traces import catalog  # noqa: E402

EDGES = (1, 50, 110, 160, 190, 230, 320, 470, 650, 810, 1000, 1001)


def diagnose(trace: str, policy: str, seed: int, data_dir: Path) -> pd.DataFrame:
    nodes, workload = catalog.load_trace(trace, data_dir=data_dir)
    result = run_experiment(nodes, workload, ExperimentConfig(policy=policy, seed=seed, rng="go"))
    c, w, failed = result.cluster, result.workload, result.failed
    free = np.where(c.device_exists, c.gpu_free, 0)
    starved = np.broadcast_to((c.cpu_free < 4000)[:, None], free.shape)
    bucket = np.digitize(free, EDGES) - 1  # -1: nothing free
    rows = [("idle milli", f"[{EDGES[b]}, {EDGES[b + 1]})", int(free[bucket == b].sum())) for b in range(len(EDGES) - 1)]
    rows += [("idle milli, node < 4 free cores", f"[{EDGES[b]}, {EDGES[b + 1]})",
              int(free[(bucket == b) & starved].sum())) for b in range(len(EDGES) - 1)]
    gpu = w.num_gpu > 0
    for milli in np.unique(w.gpu_milli[gpu]):
        rows += [("arrived", str(milli), int((gpu & (w.gpu_milli == milli)).sum())),
                 ("failed", str(milli), int((gpu[failed] & (w.gpu_milli[failed] == milli)).sum()))]
    rows.append(("failed", "CPU-only", int((w.num_gpu[failed] == 0).sum())))
    return pd.DataFrame(rows, columns=["measure", "bucket", "value"]).assign(policy=policy, trace=trace, seed=seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/traces"))
    parser.add_argument("--trace", default="openb-gpushare100")
    parser.add_argument("--policies", nargs="+", default=["fgd", "oursbalance"])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=Path, default=Path("results/issue12_share_diagnosis"))
    args = parser.parse_args()
    frame = pd.concat([diagnose(args.trace, p, args.seed, args.data_dir) for p in args.policies])
    frame.to_csv(args.out.with_suffix(".csv"), index=False)
    for measure, part in frame.groupby("measure", sort=False):
        print(f"\n{measure}\n" + part.pivot(index="bucket", columns="policy", values="value")
              .reindex(part.bucket.unique())[args.policies].to_string())
    idle = frame[frame.measure == "idle milli"].pivot(index="bucket", columns="policy", values="value")
    idle.reindex(frame[frame.measure == "idle milli"].bucket.unique())[args.policies].plot.bar(figsize=(8, 4))
    plt.ylabel("idle GPU milli at the end (column 130)")
    plt.xlabel("free milli of the device")
    plt.title(f"{args.trace}, seed {args.seed}")
    plt.tight_layout()
    plt.savefig(args.out.with_suffix(".png"), dpi=120)


if __name__ == "__main__":
    main()
