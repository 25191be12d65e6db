"""Tuning grid of ``ours-lp`` (the rolling-horizon LP planner; ``--dispatcher``: another one) on the scenarios of ``federation.py``, without the oracle.

    python benchmarks/federation_lp.py --data-dir ../shared/traces --carbon-dir ../shared/carbon --sets tune \
        --grid 'expect=0,0.5,1;show=0,0.5,1;every=1,2' --out results/federation_lp

Every combination of the ``--grid`` values (``name=v1,v2;...``, parameters of ``ours-lp``) plus ``greedy`` and
``carbon-aware`` on every scenario of ``--sets`` (meant for ``tune`` only: the held-out sets are run once,
by ``federation.py``). Per spec: mean saving vs proportional split, deadline misses and CPU s per scenario.
Writes rows and the summary (CSV) and a plot. Carbon: Electricity Maps (ODbL).
"""

from __future__ import annotations

import itertools
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

import pandas as pd

from federation import scenario_arguments, scenarios
from quasched.federation.evaluate import evaluate
from quasched.federation.report import plot_savings, write_rows
from quasched.federation.scenario import Scenario
from quasched.traces.carbon import ATTRIBUTION


def grid_specs(grid: str, dispatcher: str = "ours-lp") -> list[str]:
    """``'a=1,2;b=3'`` -> ``['ours-lp:a=1,b=3', 'ours-lp:a=2,b=3']`` (``dispatcher`` in place of ``ours-lp``)."""
    axes = [(name.strip(), values.split(",")) for name, values in (p.split("=") for p in grid.split(";") if p.strip())]
    return [f"{dispatcher}:" + ",".join(f"{n}={v}" for (n, _), v in zip(axes, combo))
            for combo in itertools.product(*(values for _, values in axes))]


def _evaluate(specs: list[str], item: tuple[str, int, Scenario]) -> list[dict]:
    name, seed, scenario = item
    return evaluate(scenario, ["greedy", "carbon-aware", *specs], seed=seed, oracle=False, set=name)


def main() -> None:
    parser = scenario_arguments(__doc__)
    parser.set_defaults(sets="tune")
    parser.add_argument("--grid", default="expect=0,0.5,1;show=0,0.5,1;every=1,2")
    parser.add_argument("--dispatcher", default="ours-lp", help="whose parameters --grid sets (e.g. ours-displace)")
    parser.add_argument("--out", type=Path, default=Path("results/federation_lp"))
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    specs = grid_specs(args.grid, args.dispatcher)
    todo = list(scenarios(args))
    with ProcessPoolExecutor(args.workers) as pool:
        rows = [r for rs in pool.map(partial(_evaluate, specs), todo) for r in rs]
    frame = pd.DataFrame(rows)
    table = frame.groupby("dispatcher", sort=False)[["saving_pct", "missed", "cpu_s"]].mean()
    table = table.sort_values("saving_pct", ascending=False).round(2)
    print(table.to_string())
    write_rows(args.out / "federation_lp_rows.csv", rows)
    table.to_csv(args.out / "federation_lp_summary.csv")
    plot_savings(args.out / "federation_lp.png", frame[frame.dispatcher.isin(["proportional", "greedy", "carbon-aware",
                                                                                 *table.index[:3]])].to_dict("records"),
                 title=f"{args.sets}: {args.dispatcher} grid, best 3", ours="carbon-aware")
    print(ATTRIBUTION)


if __name__ == "__main__":
    main()
