"""One scenario under every dispatcher (and the oracle): rows for tables, CSV files and plots.

``saving_pct`` of a row = ``100 (1 − carbon_job_kg / carbon_job_kg of proportional split)``:
dynamic carbon (the part a dispatcher can move) in the oracle's job model. The oracle gives two
rows: ``oracle-bound`` (the LP optimum: fluid, no misses by construction) and ``oracle-plan``
(each job's largest LP share, replayed through the engine like any dispatcher).
"""

from __future__ import annotations

from typing import Sequence

from quasched.federation.engine import make_view, run_federation
from quasched.federation.metrics import saving_pct, summarize
from quasched.federation.oracle import OraclePlan, solve_oracle
from quasched.federation.registry import DISPATCHERS, make_dispatcher
from quasched.federation.scenario import Scenario

REFERENCE = "proportional"


def evaluate(scenario: Scenario, dispatchers: Sequence[str] = tuple(DISPATCHERS), policy: str = "fgd",
             seed: int = 42, oracle: bool = True, **labels: object) -> list[dict]:
    """One row per dispatcher (``labels`` and ``seed`` prepended to each); the reference is always run."""
    names = [REFERENCE, *[d for d in dispatchers if d != REFERENCE]]
    rows = [{**summarize(run_federation(scenario, make_dispatcher(name), policy, seed)), "dispatcher": name}
            for name in names]
    if oracle:
        result = solve_oracle(make_view(scenario), scenario.arrival)
        rows.append({"dispatcher": "oracle-bound", "jobs": len(scenario.workload), "missed": 0,
                     "carbon_job_kg": result.bound_kg, "oracle_status": result.status, "elapsed_s": result.time_s})
        rows.append(summarize(run_federation(scenario, OraclePlan(result.plan), policy, seed)))
    reference = float(rows[0]["carbon_job_kg"])
    zones = ",".join(f"{m.carbon.zone}@{m.pue:g}" for m in scenario.members)
    return [{**labels, "seed": seed, "zones": zones, **row, "saving_pct": saving_pct(float(row["carbon_job_kg"]), reference)}
            for row in rows]
