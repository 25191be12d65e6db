"""What forecasting intensity costs ours: the forecast it uses vs the true future, on the scenarios of
``federation.py`` (same options), without the oracle.

    python benchmarks/federation_forecast.py --data-dir ../shared/traces --carbon-dir ../shared/carbon \
        --out results/federation_forecast

Per scenario: proportional split (the reference), hourly greedy, ours (``carbon-aware``: forecast from
the past only) and ``carbon-aware:perfect=1`` (the same rule reading the true series), and the
forecast's error: mean |forecast − truth| / mean truth over every hour of the horizon and every lead
of 1-24 h, per cluster, averaged. Writes rows (CSV), a summary per set (CSV + table) and plots.
Carbon: Electricity Maps (ODbL).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from federation import scenario_arguments, scenarios
from quasched.federation.engine import make_view
from quasched.federation.evaluate import evaluate
from quasched.federation.forecast import Forecast
from quasched.federation.report import plot_savings, write_rows
from quasched.federation.scenario import Scenario
from quasched.traces.carbon import ATTRIBUTION

DISPATCHERS = ["greedy", "carbon-aware", "carbon-aware:perfect=1"]
LEADS = np.arange(1, 25)


def forecast_error_pct(scenario: Scenario) -> float:
    """Mean over clusters of mean |forecast − truth| / mean truth, over hours and leads of 1-24 h, %."""
    view = make_view(scenario)
    truth = view.intensity
    forecast = Forecast(view.history, truth)
    last = truth.shape[1] - 1
    errors = [np.abs(forecast.at(h, h + LEADS) - truth[:, h + LEADS]).mean(axis=1) for h in range(last - LEADS[-1] + 1)]
    return float(100 * np.mean(np.mean(errors, axis=0) / np.maximum(truth.mean(axis=1), 1e-9)))


def main() -> None:
    parser = scenario_arguments(__doc__)
    parser.add_argument("--out", type=Path, default=Path("results/federation_forecast"))
    args = parser.parse_args()
    rows = []
    for name, seed, scenario in scenarios(args):
        error = forecast_error_pct(scenario)
        rows += [{**r, "forecast_error_pct": error} for r in evaluate(scenario, DISPATCHERS, seed=seed, oracle=False,
                                                                       set=name)]
    frame = pd.DataFrame(rows)
    per = {f"{label} ": frame.pivot_table(index="set", columns="dispatcher", values=key, sort=False)[DISPATCHERS]
           for label, key in (("saving %", "saving_pct"), ("missed", "missed"))}
    table = pd.concat([t.add_prefix(label) for label, t in per.items()]
                      + [frame.groupby("set", sort=False)["forecast_error_pct"].mean().rename("forecast error %")], axis=1)
    print(table.round(2).T.to_string())
    write_rows(args.out / "federation_forecast_rows.csv", rows)
    table.round(2).T.to_csv(args.out / "federation_forecast_summary.csv")
    for name in frame["set"].unique():
        plot_savings(args.out / f"forecast_{name.replace(' ', '_')}.png", frame[frame.set == name].to_dict("records"),
                     title=f"{name}: ours with the forecast vs the true future", ours="carbon-aware")
    print(ATTRIBUTION)


if __name__ == "__main__":
    main()
