"""How integral is the oracle's LP? The same scenarios as ``federation.py``, LP vs MILP (HiGHS, time-limited).

    python benchmarks/federation_milp.py --sets tune --time-limit 60 --out results/federation_milp

Per scenario (capacity rows not derated): the LP optimum (the bound), the jobs it splits, its
rounded plan's carbon (job model, before replay), and the MILP's incumbent, dual bound, MIP gap and
solve time. Writes a table, ``federation_milp.csv`` and ``federation_milp.png`` in ``--out``. Carbon: Electricity Maps (ODbL).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from federation import scenario_arguments, scenarios
from quasched.federation.engine import make_view
from quasched.federation.oracle import solve_oracle
from quasched.federation.report import write_rows
from quasched.traces.carbon import ATTRIBUTION


def main() -> None:
    parser = scenario_arguments(__doc__)
    parser.add_argument("--time-limit", type=float, default=60.0, help="HiGHS seconds per MILP")
    parser.add_argument("--out", type=Path, default=Path("results/federation_milp"))
    args = parser.parse_args()
    rows = []
    for name, seed, scenario in scenarios(args):
        view = make_view(scenario)
        lp, milp = (solve_oracle(view, scenario.arrival, integral=i, time_limit=args.time_limit) for i in (False, True))
        rows.append({"set": name, "seed": seed, "jobs": len(scenario.workload), "variables": lp.variables,
                     "lp_kg": lp.bound_kg, "lp_split_jobs": lp.fractional, "lp_rounded_kg": lp.plan_kg,
                     "lp_s": lp.time_s, "milp_status": milp.status, "milp_kg": milp.plan_kg,
                     "milp_bound_kg": milp.bound_kg, "mip_gap_pct": 100 * milp.gap, "milp_s": milp.time_s})
        print(rows[-1], flush=True)
    frame = pd.DataFrame(rows)
    frame["milp / lp"] = frame["milp_kg"] / frame["lp_kg"]
    print(frame.round(4).to_string(index=False))
    csv = write_rows(args.out / "federation_milp.csv", frame.to_dict("records"))
    fig = Figure(figsize=(7, 3.5))
    ax = fig.add_subplot()
    label = frame["set"].str.cat(frame["seed"].astype(str), sep=" ")
    ax.bar(label, 100 * (frame["milp / lp"] - 1))
    ax.set_ylabel("MILP incumbent above the LP, %")
    ax.tick_params(axis="x", rotation=60)
    ax.set_title(f"oracle integrality ({args.time_limit:g} s MILP limit)\n{ATTRIBUTION}", fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out / "federation_milp.png", dpi=120)
    print(f"wrote {csv} and {args.out / 'federation_milp.png'}")


if __name__ == "__main__":
    main()
