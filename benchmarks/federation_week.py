"""Why ours loses to hourly greedy on 7-day federation windows (issue 11 item 3): a decomposition of the gap.

    cd benchmarks && python federation_week.py --data-dir ../../shared/traces --carbon-dir ../../shared/carbon \\
        --seeds 1,2,10 --days 7 --out ../results/federation_diag7

Findings: BENCHMARKS.md, "7-day windows: where ours loses to greedy (branch ``diag7``)".

The scenarios are the CLI's (``quasched federation``: all zones, ``draw_scenario`` with its defaults). Per seed,
``greedy``, ``ours``, ``ours`` with the true intensities (``perfect=1``: what the forecast costs) and the :func:`probe`
counterfactual are replayed, and ``proportional`` for the saving's reference. Figures (job model: kg = kw × ∫
intensity × PUE over the run):

- per run (``totals``): kg, saving = 100 (1 − kg / proportional's), misses, hours with a queue on the cleanest cluster;
- per cluster (rank 0 = cleanest mean intensity × PUE over the window): GPUs, GPU-hours and mean intensity paid
  (g/kWh = kg / kWh) of greedy and ours;
- per job class, ours − greedy kg: inflexible / flexible × same / other cluster (:func:`federation_gap.decompose`);
  jobs ours deferred (released after arrival) and jobs that queued (placed after release) in either run; runs over
  72 h; jobs greedy missed; inflexible jobs ours ran elsewhere at a higher cost, and what held greedy's cluster then
  (:func:`occupants`);
- ``top_jobs``: the jobs with the largest gap; ``queued``: jobs that waited over 1 h in a queue; ``sent_away``: the
  inflexible jobs ours sent away from greedy's pick in its own state, and why (:func:`recorded`);
- per day of the window: ours − greedy kg of the jobs arriving that day;
- forecast: mean absolute error (g/kWh) of the forecast made at each hour for the next 24 h, and how often its
  cleanest cluster 1-24 h ahead is not the true one, per day of the window.

Writes the rows (CSV) and prints them. Carbon: Electricity Maps (ODbL).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from federation_gap import decompose, per_job_kg

from quasched.federation.carbon_aware import CarbonAware, occupancy
from quasched.federation.dispatch import SLOT_S, SLOTS_PER_HOUR, Decision, Dispatcher
from quasched.federation.engine import FederationRun, run_federation
from quasched.federation.forecast import Forecast
from quasched.federation.metrics import missed
from quasched.federation.registry import make_dispatcher
from quasched.federation.report import write_rows
from quasched.federation.scenario import Scenario, draw_scenario
from quasched.metrics.power import SECONDS_PER_HOUR
from quasched.traces.carbon import ATTRIBUTION, carbon_zones, load_carbon
from quasched.traces.catalog import load_trace

DAY_S = 24 * SECONDS_PER_HOUR


def cluster_rows(seed: int, runs: dict[str, FederationRun]) -> list[dict]:
    """Per cluster: GPUs, PUE, window mean intensity × PUE, and per run GPU-hours, kWh and mean g/kWh paid."""
    some = next(iter(runs.values()))
    sc, view = some.scenario, some.view
    mean = view.intensity.mean(axis=1)
    rank = np.argsort(np.argsort(mean))
    hours = sc.duration / SECONDS_PER_HOUR
    rows = []
    for c, m in enumerate(sc.members):
        row: dict = {"seed": seed, "cluster": m.name, "rank": int(rank[c]), "gpus": int(m.nodes.num_gpus.sum()),
                     "pue": m.pue, "mean_g_kwh": float(mean[c])}
        for name, run in runs.items():
            kg = per_job_kg(run)
            on = np.isfinite(run.placed) & (run.cluster == c)
            kwh = float((view.kw[on, c] * hours[on]).sum())
            row[f"gpu_h {name}"] = float((sc.workload.gpu_request[on] / 1000 * hours[on]).sum())
            row[f"g_kwh {name}"] = 1000 * float(kg[on].sum()) / kwh if kwh else float("nan")
        rows.append(row)
    return rows


def class_row(seed: int, greedy: FederationRun, ours: FederationRun) -> dict:
    """ours − greedy kg by class (:func:`decompose`), deferred and queued jobs, and per day of arrival."""
    sc = ours.scenario
    a, b = per_job_kg(ours), per_job_kg(greedy)
    both = np.isfinite(a) & np.isfinite(b)
    gap = {k.replace("oracle", "greedy"): v for k, v in decompose(ours, greedy).items() if not k.startswith("kWh")}
    flexible = sc.slack > 0
    deferred = both & (ours.released > sc.arrival + 1e-6)
    row = {"seed": seed, **gap, "flexible jobs": int(flexible.sum()), "deferred by ours": int(deferred.sum()),
           "deferred: ours kg": float(a[deferred].sum()), "deferred: greedy kg": float(b[deferred].sum()),
           "deferred: other cluster": int((deferred & (ours.cluster != greedy.cluster)).sum())}
    for name, run in (("greedy", greedy), ("ours", ours)):
        queued = np.isfinite(run.placed) & (run.placed > run.released + 1e-6)
        wait = (run.placed - run.released)[queued] / SECONDS_PER_HOUR
        row[f"queued {name}"] = int(queued.sum())
        row[f"queued {name} mean wait h"] = float(wait.mean()) if len(wait) else 0.0
        row[f"queued {name}: ours − greedy kg"] = float((a - b)[queued & both].sum())
        row[f"missed {name}"] = int(missed(run).sum())
    long = both & (sc.duration > 3 * DAY_S)
    row["runs > 72 h: jobs"] = int(long.sum())
    row["runs > 72 h: greedy kg"] = float(b[long].sum())
    row["runs > 72 h: ours − greedy kg"] = float((a - b)[long].sum())
    late = missed(greedy) & both
    row["greedy missed: jobs"] = int(late.sum())
    row["greedy missed: ours − greedy kg"] = float((a - b)[late].sum())
    lost = np.flatnonzero(both & ~flexible & (ours.cluster != greedy.cluster) & (a > b))
    row["inflexible elsewhere, dearer: jobs"] = len(lost)
    row["inflexible elsewhere, dearer: kg"] = float((a - b)[lost].sum())
    for who, run in (("ours", ours), ("greedy", greedy)):
        seen = pd.DataFrame([occupants(run, int(greedy.cluster[j]), float(sc.arrival[j])) for j in lost])
        weight = (a - b)[lost] / max(float((a - b)[lost].sum()), 1e-12)
        for k in seen.columns if len(lost) else ():
            row[f"  kg-weighted, {who} on greedy's cluster: {k}"] = float(seen[k].to_numpy() @ weight)
        if len(lost):
            row[f"  kg share with a queue on greedy's cluster, {who}"] = float((seen["queued"].to_numpy() > 0) @ weight)
    day = (sc.arrival // DAY_S).astype(int)
    for d in range(int(day.max()) + 1):
        pick = both & (day == d)
        row[f"day {d}: ours − greedy kg"] = float((a - b)[pick].sum())
        row[f"day {d}: greedy kg"] = float(b[pick].sum())
    return row


def occupants(run: FederationRun, cluster: int, t: float) -> dict[str, float]:
    """GPUs of ``cluster`` at ``t`` in ``run``: running inflexible jobs, running flexible ones (of them deferred past
    arrival), free; and the jobs waiting in its queue."""
    sc = run.scenario
    gpus = sc.workload.gpu_request / 1000
    on = (run.cluster == cluster) & (run.placed <= t) & (t < run.placed + sc.duration)
    flexible = sc.slack > 0
    return {"inflexible": float(gpus[on & ~flexible].sum()), "flexible": float(gpus[on & flexible].sum()),
            "deferred": float(gpus[on & flexible & (run.released > sc.arrival + 1e-6)].sum()),
            "free": float(sc.members[cluster].nodes.num_gpus.sum() - gpus[on].sum()),
            "queued": int(((run.cluster == cluster) & (run.released <= t) & ~(run.placed <= t)).sum())}


def blocked_hours(run: FederationRun, cluster: int, end_s: float) -> float:
    """Hours of ``[0, end_s)`` with somebody waiting in ``cluster``'s queue (the union of its queued jobs' waits)."""
    sc = run.scenario
    waited = np.flatnonzero((run.cluster == cluster) & np.isfinite(run.released) & ~(run.placed <= run.released))
    spans = sorted((float(run.released[j]), float(np.nan_to_num(run.placed[j], nan=end_s))) for j in waited)
    total, reach = 0.0, 0.0
    for lo, hi in spans:
        lo, hi = max(lo, reach), min(hi, end_s)
        total += max(0.0, hi - lo)
        reach = max(reach, hi)
    return total / SECONDS_PER_HOUR


def queue_rows(seed: int, runs: dict[str, FederationRun], min_wait_h: float = 1.0) -> list[dict]:
    """Jobs that waited over ``min_wait_h`` in a queue: class, size, deferral, cluster's cleanliness rank, wait."""
    rows = []
    for name, run in runs.items():
        sc = run.scenario
        rank = np.argsort(np.argsort(run.view.intensity.mean(axis=1)))
        wait = (np.nan_to_num(run.placed, nan=np.inf) - run.released) / SECONDS_PER_HOUR
        for j in np.flatnonzero(wait > min_wait_h):
            rows.append({"seed": seed, "run": name, "job": int(j), "rank": int(rank[run.cluster[j]]),
                         "slack_h": sc.slack[j] / SECONDS_PER_HOUR, "gpu_milli": int(sc.workload.gpu_request[j]),
                         "cpu_milli": int(sc.workload.cpu_milli[j]), "duration_h": sc.duration[j] / SECONDS_PER_HOUR,
                         "deferred_h": (run.released[j] - sc.arrival[j]) / SECONDS_PER_HOUR, "wait_h": float(wait[j])})
    return rows


def top_jobs(seed: int, greedy: FederationRun, ours: FederationRun, count: int = 8) -> list[dict]:
    """The ``count`` jobs with the largest ours − greedy kg: class, size, where and when each run placed them."""
    sc = ours.scenario
    gap = per_job_kg(ours) - per_job_kg(greedy)
    rows = []
    for j in np.argsort(-np.nan_to_num(gap, nan=-np.inf))[:count]:
        row = {"seed": seed, "job": int(j), "gap_kg": float(gap[j]), "slack_h": sc.slack[j] / SECONDS_PER_HOUR,
               "gpu_milli": int(sc.workload.gpu_request[j]), "duration_h": sc.duration[j] / SECONDS_PER_HOUR,
               "arrival_h": sc.arrival[j] / SECONDS_PER_HOUR}
        for name, run in (("greedy", greedy), ("ours", ours)):
            row[f"{name} cluster"] = int(run.cluster[j])
            row[f"{name} release wait h"] = (run.released[j] - sc.arrival[j]) / SECONDS_PER_HOUR
            row[f"{name} queue wait h"] = (run.placed[j] - run.released[j]) / SECONDS_PER_HOUR
        seen = occupants(ours, int(greedy.cluster[j]), float(sc.arrival[j]))
        row |= {f"ours on greedy's cluster: {k}": v for k, v in seen.items()}
        rows.append(row)
    return rows


def recorded(spec: str, log: list[dict]) -> Dispatcher:
    """``spec``'s dispatcher (a rule of :mod:`.carbon_aware`), unchanged, that logs each inflexible job it sends away
    from greedy's pick (the current hour's cleanest cluster with room now and an empty queue) into ``log``:
    why (``ledger full``: some slot of its run on greedy's pick is booked full; else ``priced``: the rule's rate costs
    more there), hours ahead of the first full slot, and greedy's pick − ours's kg (true intensities, forecast ones,
    and the rule's priced cost)."""
    rule = make_dispatcher(spec)
    assert isinstance(rule, CarbonAware), f"{spec} is not a carbon-aware rule"
    inner = rule.choose

    def choose(job: int, now: float, starts: np.ndarray, cost: np.ndarray, planned: np.ndarray) -> Decision:
        pick = inner(job, now, starts, cost, planned)
        v = rule.view
        hour = min(int(now // SECONDS_PER_HOUR), v.intensity.shape[1] - 1)
        cleanest = rule.first_with_room(job, np.argsort(v.intensity[:, hour], kind="stable"))
        if v.latest_start[job] > now or cleanest == pick.cluster:
            return pick
        both = np.array([cleanest, pick.cluster])
        slot, used = occupancy(now, float(v.duration[job]))
        span = np.arange(slot, min(slot + len(used), rule.ledger.shape[2]))
        full = (rule.ledger[:, cleanest, span] + v.demand[:, job, None] > rule.limit[:, cleanest]).any(axis=0)
        hours = np.minimum(span // SLOTS_PER_HOUR, v.intensity.shape[1] - 1)
        forecast = rule.expected(now, np.arange(hour, hours[-1] + 1))[:, hours - hour] @ used[:len(span)]
        true = v.run_grams(np.array([job, job]), both, np.array([now, now]))
        log.append({"job": job, "duration_h": v.duration[job] / SECONDS_PER_HOUR, "gpu_milli": int(v.demand[0, job]),
                    "greedy": cleanest, "ours": pick.cluster, "why": "ledger full" if full.any() else "priced",
                    "full_in_h": float(np.argmax(full) / SLOTS_PER_HOUR) if full.any() else float("nan"),
                    "true_kg": float(true[0] - true[1]) / 1000,
                    "forecast_kg": float((v.kw[job, both] * forecast[both]).dot([1, -1]) * SLOT_S / SECONDS_PER_HOUR / 1000),
                    "priced_kg": float(cost[cleanest, 0] - cost[pick.cluster, 0]) / 1000})
        return pick

    rule.choose = choose  # type: ignore[method-assign]
    return rule


def probe(spec: str) -> Dispatcher:
    """A counterfactual, not a dispatcher: ``spec``'s rule, except that a released job no node of its cluster holds
    goes at once to the other clusters where it is placeable, current cleanest first, and queues only if none holds
    it (the engine's ``reroute`` hook; the ledger keeps the original booking). Tests whether the stuck queue heads
    cause the gap."""
    rule = make_dispatcher(spec)

    def reroute(job: int, now: float, cluster: int) -> list[int]:
        v = rule.view
        hour = min(int(now // SECONDS_PER_HOUR), v.intensity.shape[1] - 1)
        return [int(c) for c in np.argsort(v.intensity[:, hour], kind="stable") if c != cluster and v.placeable[job, c]]

    rule.reroute = reroute  # type: ignore[method-assign]
    return rule


def forecast_rows(seed: int, view_history: np.ndarray, intensity: np.ndarray, days: int) -> list[dict]:
    """Per day of the window: forecast MAE over the next 24 h and the share of hours ahead whose forecast
    cleanest cluster is not the true cleanest."""
    forecast = Forecast(view_history, intensity)
    rows = []
    for d in range(days):
        err, wrong, n = 0.0, 0, 0
        for h in range(24 * d, 24 * (d + 1)):
            ahead = np.arange(h + 1, min(h + 25, intensity.shape[1]))
            if not len(ahead):
                continue
            f, truth = forecast.at(h, ahead), intensity[:, ahead]
            err += float(np.abs(f - truth).mean()) * len(ahead)
            wrong += int((f.argmin(axis=0) != truth.argmin(axis=0)).sum())
            n += len(ahead)
        rows.append({"seed": seed, "day": d, "mae_g_kwh": err / n, "wrong_cleanest_pct": 100 * wrong / n,
                     "spread_g_kwh": float(np.ptp(intensity[:, 24 * d:24 * (d + 1)], axis=0).mean())})
    return rows


def scenario_for(seed: int, args: argparse.Namespace) -> Scenario:
    """The CLI's scenario of ``seed``: all zones, 4 clusters, ``args.days`` window, its defaults otherwise."""
    nodes, workload = load_trace("openb-default", args.data_dir)
    zones = [load_carbon(z, args.carbon_dir) for z in carbon_zones(args.carbon_dir)]
    return draw_scenario(nodes, workload, zones, seed, days=args.days)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../../shared/traces"))
    parser.add_argument("--carbon-dir", type=Path, default=Path("../../shared/carbon"))
    parser.add_argument("--seeds", default="1,2,10")
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--ours", default="ours-protect")
    parser.add_argument("--out", type=Path, default=Path("../results/federation_diag7"))
    args = parser.parse_args()
    perfect = f"{args.ours}{',' if ':' in args.ours else ':'}perfect=1"
    clusters, classes, forecasts, totals, tops, sent, queues = [], [], [], [], [], [], []
    for seed in (int(s) for s in args.seeds.split(",")):
        sc = scenario_for(seed, args)
        log: list[dict] = []
        runs = {name: run_federation(sc, rule, seed=seed) for name, rule in
                (("proportional", make_dispatcher("proportional")), ("greedy", make_dispatcher("greedy")),
                 ("ours", recorded(args.ours, log)), ("perfect", make_dispatcher(perfect)),
                 ("probe", probe(args.ours)))}
        sent += [{"seed": seed, **row} for row in log]
        base = float(np.nansum(per_job_kg(runs["proportional"])))
        for name, run in runs.items():
            kg = float(np.nansum(per_job_kg(run)))
            cleanest = int(np.argmin(run.view.intensity.mean(axis=1)))
            totals.append({"seed": seed, "run": name, "kg": kg, "saving_pct": 100 * (1 - kg / base),
                           "missed": int(missed(run).sum()), "cpu_s": run.cpu_s,
                           "cleanest queue h": blocked_hours(run, cleanest, args.days * DAY_S)})
        clusters += cluster_rows(seed, {k: runs[k] for k in ("greedy", "ours", "perfect")})
        classes.append(class_row(seed, runs["greedy"], runs["ours"]))
        queues += queue_rows(seed, {k: runs[k] for k in ("greedy", "ours")})
        tops += top_jobs(seed, runs["greedy"], runs["ours"])
        view = runs["greedy"].view
        forecasts += forecast_rows(seed, view.history, view.intensity, int(np.ceil(args.days)))
        print(pd.DataFrame(totals[-len(runs):]).round(2).to_string(index=False), flush=True)
    with pd.option_context("display.width", 250, "display.max_columns", 40, "display.max_rows", 200):
        for label, rows in (("totals", totals), ("clusters", clusters), ("classes", classes), ("forecast", forecasts),
                            ("top_jobs", tops), ("queued", queues)):
            frame = pd.DataFrame(rows)
            write_rows(args.out / f"{label}.csv", frame.to_dict("records"))
            print(f"\n{label}\n", (frame.T if label == "classes" else frame).round(2).to_string())
        away = pd.DataFrame(sent)
        write_rows(args.out / "sent_away.csv", away.to_dict("records"))
        away["long"] = np.where(away.duration_h > 24, "> 24 h", "<= 24 h")
        print("\ninflexible jobs ours sent away from greedy's pick\n",
              away.groupby(["seed", "why", "long"])[["true_kg", "forecast_kg", "priced_kg", "full_in_h"]]
              .agg(["count", "sum", "median"]).round(2).to_string())
    print(ATTRIBUTION)


if __name__ == "__main__":
    main()
