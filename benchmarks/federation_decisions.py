"""Every job's decision (cluster, release, placement time) of one dispatcher on the scenarios of ``--sets``, as CSV:
to check that a speed-up keeps a dispatcher's decisions (compare two files byte for byte).

    python benchmarks/federation_decisions.py --data-dir ../shared/traces --carbon-dir ../shared/carbon \\
        --dispatcher ours-displace --sets tune --csv /tmp/tune_decisions.csv
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
from federation import scenario_arguments, scenarios

from quasched.federation.engine import run_federation
from quasched.federation.registry import make_dispatcher


def main() -> None:
    parser = scenario_arguments(__doc__)
    parser.add_argument("--dispatcher", default="ours-displace")
    parser.add_argument("--policy", default="fgd")
    parser.add_argument("--csv", type=Path, required=True)
    args = parser.parse_args()
    frames, cpu = [], 0.0
    for name, seed, scenario in scenarios(args):
        run = run_federation(scenario, make_dispatcher(args.dispatcher), args.policy, seed)
        cpu += run.cpu_s
        frames.append(pd.DataFrame({"set": name, "seed": seed, "job": np.arange(len(run.cluster)), "cluster": run.cluster,
                                    "released": run.released, "placed": run.placed}))
    pd.concat(frames).to_csv(args.csv, index=False)
    print(f"{sum(map(len, frames)):,} jobs, replay CPU {cpu:.2f} s -> {args.csv}")


if __name__ == "__main__":
    main()
