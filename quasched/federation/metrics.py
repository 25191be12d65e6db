"""Figures of a federated run: carbon (dynamic and idle, two power models), energy, waits, deadlines.

Carbon is split into what a dispatcher can move and what it cannot:

- *dynamic*: the power above the empty clusters' (PowerMeter, linear and step models), per hour
  × PUE × the zone's intensity of that hour. ``carbon_job_kg`` is the same quantity in the oracle's
  job model (each job's ``kw`` × the integral of intensity × PUE over its run), the one compared
  with the oracle's bound.
- *idle*: every node powered all the time, over the scenario's horizon (the same for every dispatcher).

``total = idle + dynamic``. A job misses its deadline if it finishes after it or never runs. A count of misses weighs a
one-GPU job a minute late like an eight-GPU job two days late, so :func:`late_gpu_hours` weighs them by size and delay.
"""

from __future__ import annotations

import numpy as np

from quasched.federation.engine import FederationRun
from quasched.metrics.power import GRAMS_PER_KG, SECONDS_PER_HOUR, WATTS_PER_KW, hourly_energy_kwh


def missed(run: FederationRun) -> np.ndarray:
    """Per job: finished after its deadline, or never placed."""
    finish = run.placed + run.scenario.duration
    return ~np.isfinite(run.placed) | (finish > run.scenario.deadline + 1e-6)


def late_gpu_hours(run: FederationRun) -> float:
    """``sum_j gpus_j × max(0, finish_j − deadline_j)`` in GPU-hours over the placed jobs (never placed: counted by
    ``placed``), ``gpus_j`` = GPU milli / 1000."""
    ok = np.isfinite(run.placed)
    late = np.clip(run.placed[ok] + run.scenario.duration[ok] - run.scenario.deadline[ok], 0, None)
    return float(np.dot(run.scenario.workload.gpu_request[ok] / 1000, late) / SECONDS_PER_HOUR)


def job_carbon_kg(run: FederationRun) -> float:
    """Dynamic carbon of the placed jobs in the job model, kg."""
    ok = np.flatnonzero(np.isfinite(run.placed))
    return float(run.view.run_grams(ok, run.cluster[ok], run.placed[ok]).sum() / GRAMS_PER_KG)


def summarize(run: FederationRun) -> dict[str, float | int | str]:
    """Headline figures (waits = placement − arrival, deferral included, in hours)."""
    sc = run.scenario
    last = max(float(p.time[-1]) for p in run.power)
    hours = max(sc.horizon_hours, int(np.ceil(last / SECONDS_PER_HOUR)) + 1)
    intensity = sc.intensity(hours)  # includes PUE
    pue = np.array([m.pue for m in sc.members])
    out: dict[str, float | int | str] = {"dispatcher": run.dispatcher, "jobs": len(sc.workload)}
    ok = np.isfinite(run.placed)
    wait = (run.placed - sc.arrival)[ok] / SECONDS_PER_HOUR
    out |= {"placed": int(ok.sum()), "missed": int(missed(run).sum()),
            "late_gpu_h": late_gpu_hours(run),
            "wait_p50_h": float(np.percentile(wait, 50)) if len(wait) else float("nan"),
            "wait_p95_h": float(np.percentile(wait, 95)) if len(wait) else float("nan"),
            "carbon_job_kg": job_carbon_kg(run)}
    idle_hours = intensity[:, :sc.horizon_hours].sum(axis=1)
    for mode in ("linear", "step"):
        dyn_kwh = np.array([hourly_energy_kwh(p.time, getattr(p, f"{mode}_w") - getattr(p, f"idle_{mode}_w"), 0.0, hours)
                            for p in run.power])
        idle_w = np.array([getattr(p, f"idle_{mode}_w") for p in run.power])
        dyn_kg = float((dyn_kwh * intensity).sum() / GRAMS_PER_KG)
        idle_kg = float(np.dot(idle_w / WATTS_PER_KW, idle_hours) / GRAMS_PER_KG)
        out |= {f"carbon_dyn_{mode}_kg": dyn_kg, f"carbon_total_{mode}_kg": dyn_kg + idle_kg,
                f"energy_dyn_{mode}_kwh": float((dyn_kwh.sum(axis=1) * pue).sum()),
                f"energy_total_{mode}_kwh": float((dyn_kwh.sum(axis=1) * pue).sum()
                                                  + np.dot(idle_w / WATTS_PER_KW * sc.horizon_hours, pue))}
    gpu_hours = sc.workload.gpu_request * sc.duration
    for c, m in enumerate(sc.members):
        share = gpu_hours[ok & (run.cluster == c)].sum() / max(gpu_hours[ok].sum(), 1)
        out[f"gpu_share_{m.name}_pct"] = 100 * float(share)
    out["elapsed_s"], out["cpu_s"] = run.elapsed_s, run.cpu_s
    return out


def saving_pct(carbon: float, reference: float) -> float:
    """``100 (1 − carbon / reference)``: the percentage points of ``reference`` saved."""
    return 100 * (1 - carbon / reference) if reference > 0 else float("nan")

