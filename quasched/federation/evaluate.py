"""One scenario under every dispatcher (and the oracle): rows for tables, CSV files and plots.

``saving_pct`` of a row = ``100 (1 − carbon_job_kg / carbon_job_kg of proportional split)``:
dynamic carbon (the part a dispatcher can move) in the oracle's job model. The oracle gives three
rows: ``oracle-bound`` (the LP optimum: fluid, no misses by construction), ``oracle-plan`` (each
job's largest LP share, replayed through the engine like any dispatcher) and ``oracle`` (the
cheapest replayed plan over the capacity deratings that misses at most as many deadlines as
``equal_to``, by default the last dispatcher: :func:`~.oracle.at_most`). ``also_at`` adds one row
``oracle@name`` per dispatcher, the same choice at that dispatcher's misses (no further solve), so
dispatchers that miss different numbers of deadlines are each compared with the oracle at their own.
"""

from __future__ import annotations

from typing import Sequence

from quasched.federation.engine import run_federation
from quasched.federation.metrics import saving_pct, summarize
from quasched.federation.oracle import at_most, replay_plans
from quasched.federation.registry import DEFAULT_DISPATCHERS, make_dispatcher
from quasched.federation.scenario import Scenario

REFERENCE = "proportional"


def evaluate(scenario: Scenario, dispatchers: Sequence[str] = DEFAULT_DISPATCHERS, policy: str = "fgd",
             seed: int = 42, oracle: bool = True, equal_to: str | None = None, also_at: Sequence[str] = (),
             **labels: object) -> list[dict]:
    """One row per dispatcher (``labels`` and ``seed`` prepended to each); the reference is always run.
    ``oracle``: add the three oracle rows, the executable one at most at ``equal_to``'s misses, and one
    ``oracle@name`` row per name of ``also_at`` (module docstring)."""
    names = [REFERENCE, *[d for d in dispatchers if d != REFERENCE]]
    rows = [{**summarize(run_federation(scenario, make_dispatcher(name), policy, seed)), "dispatcher": name}
            for name in names]
    if oracle:
        missed = {str(r["dispatcher"]): int(r["missed"]) for r in rows}
        unknown = [d for d in (equal_to or names[-1], *also_at) if d not in missed]
        if unknown:
            raise ValueError(f"equal_to/also_at {', '.join(unknown)} not among the dispatchers run: {', '.join(missed)}")
        target = missed[equal_to or names[-1]]
        tried = replay_plans(scenario, policy, seed)
        bound = tried[0].result
        rows.append({"dispatcher": "oracle-bound", "jobs": len(scenario.workload), "missed": 0,
                     "carbon_job_kg": bound.bound_kg, "oracle_status": bound.status, "elapsed_s": bound.time_s})
        chosen = [("oracle-plan", tried[0], tried[:1], target), ("oracle", at_most(tried, target), tried, target)]
        chosen += [(f"oracle@{d}", at_most(tried, missed[d]), tried, missed[d]) for d in also_at]
        for name, e, used, goal in chosen:
            rows.append({**summarize(e.run), "dispatcher": name, "derate": e.derate, "fractional": e.result.fractional,
                         "plan_kg": e.result.plan_kg, "target_missed": goal,
                         "elapsed_s": sum(t.result.time_s + t.run.elapsed_s for t in used)})
    reference = float(rows[0]["carbon_job_kg"])
    zones = ",".join(f"{m.carbon.zone}@{m.pue:g}" for m in scenario.members)
    return [{**labels, "seed": seed, "zones": zones, **row, "saving_pct": saving_pct(float(row["carbon_job_kg"]), reference)}
            for row in rows]
