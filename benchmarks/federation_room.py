"""Why a dispatcher's inflexible jobs land elsewhere than the oracle's, and trials to keep room for them (development data).

    python benchmarks/federation_room.py --data-dir ../shared/traces --carbon-dir ../shared/carbon \
        --sets 'fresh4 synthetic,fresh3 synthetic' --out results/federation_nested/room

Per scenario, ``--ours`` (a dispatcher with node-level starts; default ``ours-redecide-hourly``, ours when the diagnosis
was made, before ``ours-nested``) is replayed with its options, fits and node checks
recorded at every arrival, and the oracle held to its misses. Each inflexible job the two sent to different clusters is
classed by the oracle's cluster as ours saw it at the arrival: *closed* (full, queued, planned full, or no node holds the
job; split into jobs that need a whole node and smaller ones) or *open* (ours chose another: forecast or prices); the
cause of *closed* is kept too (:class:`Recorded`). Then
each ``--trials`` spec (a registered dispatcher, or one of the trial rules below) is replayed on the same scenarios and
its carbon divided by that oracle's (its misses are printed beside: the ratio is at equal misses only where they are
equal). Trial rules (none kept, BENCHMARKS.md "Where the remaining gap is"):

- ``whole-class``: ``ours-redecide-hourly`` plus a second protection class, the inflexible arrivals that need a whole
  node (their rate and GPU milli smoothed alike), charged to flexible jobs (``whole-class-all``: to every smaller job);
- ``all-pay``: the protection charged to inflexible jobs too;
- ``last-node``: a start now blocked where it would take the last node that holds the latest whole-node inflexible job's
  pod (when no other node of that cluster holds the job);
- ``nested-firm``: ``ours-nested``, but a booking in its job's last candidate slot (no later start left) is held at once:
  an inflexible job may not bump it;
- ``erlang`` (session 11): ``ours-nested`` whose protection odds ``P(Poisson(mu) ≥ R − i)`` are the implied cost of
  one unit of room in an Erlang loss system instead (Kelly; Key), ``mu (B(R − i − 1, mu) − B(R − i, mu))``, ``B`` Erlang's
  loss formula, 1 where ``R − i ≤ 0``.

Carbon: Electricity Maps (ODbL).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
from scipy.special import pdtr
from scipy.stats import poisson

from federation import scenario_arguments, scenarios
from federation_gap import per_job_kg
from quasched.federation.carbon_aware import add_run, kernels
from quasched.federation.dispatch import SLOT_S, Decision, Dispatcher, View
from quasched.federation.displacement import LEAD_SLOTS
from quasched.federation.engine import run_federation
from quasched.federation.held import HourlyRedecideHeld, NodeHeld
from quasched.federation.metrics import missed
from quasched.federation.nested import NestedBookings
from quasched.federation.oracle import at_most, replay_plans
from quasched.federation.protection import ProtectionPriced
from quasched.federation.registry import make_dispatcher
from quasched.model.workload import Pod
from quasched.policies.filter import demand_key
from quasched.traces.carbon import ATTRIBUTION


def whole_node(view: View) -> float:
    """GPU milli of a job that needs a whole node: the most GPUs of any node of the federation."""
    return 1000.0 * max(int(c.num_gpus.max(initial=0)) for c in view.nodes)


class WholeClass(HourlyRedecideHeld):
    """Trial: a second protection class, inflexible arrivals of at least ``whole`` GPU milli (module docstring)."""

    name = "whole-class"

    def __init__(self, every: bool = False, **rule: float) -> None:
        super().__init__(**rule)
        self.every = every

    def reset(self, view: View) -> None:
        super().reset(view)
        self.whole = whole_node(view)
        self.arrivals = np.zeros((2, LEAD_SLOTS + 1))  # smoothed count and GPU milli, as ProtectionPriced's
        self.since_whole = 0.0

    def dispatch(self, job: int, now: float) -> Decision:
        v = self.view
        self.arrivals *= np.exp(-(now - self.since_whole) / self.tau)
        self.since_whole = now
        if v.latest_start[job] <= now and v.demand[0, job] >= self.whole:
            run = np.minimum(v.duration[job], self.lead_s) / self.tau
            self.arrivals += [run, run * v.demand[0, job]]
        return super().dispatch(job, now)

    def rate(self, job: int, now: float, index: np.ndarray, ledger: np.ndarray) -> np.ndarray:
        rate = super().rate(job, now, index, ledger)
        q = float(self.view.demand[0, job])
        if q <= 0 or q >= self.whole or not (self.every or self.view.latest_start[job] > now):
            return rate
        count, gpu = self.arrivals[:, kernels().leads(index, now, LEAD_SLOTS)]
        return rate + self.protection(q, count, gpu, self.priced(now, index)[0], ledger[0])


class AllPay(HourlyRedecideHeld):
    """Trial: inflexible jobs pay the protection too."""

    name = "all-pay"

    def rate(self, job: int, now: float, index: np.ndarray, ledger: np.ndarray) -> np.ndarray:
        rate = super(ProtectionPriced, self).rate(job, now, index, ledger)  # the displacement-priced rule's
        q = float(self.view.demand[0, job])
        if q <= 0:
            return rate
        lead = kernels().leads(index, now, LEAD_SLOTS)
        return rate + self.protection(q, self.jobs[lead], self.gpu[lead], self.priced(now, index)[0], ledger[0])


class LastNode(WholeClass):
    """Trial: no start now on the last node that holds the latest whole-node inflexible pod."""

    name = "last-node"

    def reset(self, view: View) -> None:
        super().reset(view)
        self.whole_pod: Pod | None = None

    def dispatch(self, job: int, now: float) -> Decision:
        if self.view.latest_start[job] <= now and self.view.demand[0, job] >= self.whole:
            self.whole_pod = self.view.pod(job)
        return HourlyRedecideHeld.dispatch(self, job, now)

    def rate(self, job: int, now: float, index: np.ndarray, ledger: np.ndarray) -> np.ndarray:
        return HourlyRedecideHeld.rate(self, job, now, index, ledger)

    def choose(self, job: int, now: float, starts: np.ndarray, cost: np.ndarray, planned: np.ndarray) -> Decision:
        v, big = self.view, self.whole_pod
        if big is not None and v.demand[0, job] < self.whole:
            pod, planned = v.pod(job), planned.copy()
            for c in np.flatnonzero(~planned[:, 0]):
                mine = self.feasible[c].mask(pod, demand_key(pod))
                whole = self.feasible[c].mask(big, demand_key(big))
                planned[c, 0] = whole.sum() == 1 and mine.any() and not (mine & ~whole).any()
        return super().choose(job, now, starts, cost, planned)


class NestedFirm(NestedBookings):
    """Trial: ``ours-nested`` whose bookings in the job's last candidate slot are held at once."""

    name = "nested-firm"

    def reset(self, view: View) -> None:
        super().reset(view)
        self.firm: dict[int, Decision] = {}

    def book(self, job: int, pick: Decision) -> Decision:
        super().book(job, pick)
        if pick.start + SLOT_S > self.view.latest_start[job]:
            add_run(self.held, self.view, job, pick)
            self.firm[job] = pick
        return pick

    def release(self, job: int, now: float, cluster: int) -> Decision:
        if job in self.firm:  # held early: the release holds its (last) booking itself
            add_run(self.held, self.view, job, self.firm.pop(job), -1.0)
        pick = super().release(job, now, cluster)
        if job in self.firm and pick.start <= now:  # booked firm by this release, and held by it too
            add_run(self.held, self.view, job, self.firm.pop(job), -1.0)
        return pick


def erlang_loss(n: np.ndarray, load: np.ndarray) -> np.ndarray:
    """Erlang's loss formula ``B(n, load) = pmf(n) / cdf(n)`` of Poisson(``load``) (1 at ``n = 0``), ``n ≥ 0``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        b = poisson.pmf(n, load) / pdtr(n, load)
    return np.where(load > 0, np.nan_to_num(b), np.where(n == 0, 1.0, 0.0))


def implied_odds(room: np.ndarray, load: np.ndarray) -> np.ndarray:
    """The implied cost of one of ``room`` free units for an Erlang loss ``load``: ``load (B(room − 1) − B(room))``, 1
    where ``room ≤ 0``."""
    n = np.maximum(room, 1)
    return np.where(room <= 0, 1.0, load * (erlang_loss(n - 1, load) - erlang_loss(n, load)))


class Erlang(NestedBookings):
    """Trial: ``ours-nested`` with the Erlang implied cost as the protection's odds (module docstring)."""

    name = "erlang"
    odds = staticmethod(implied_odds)


TRIALS: dict[str, Callable[[], Dispatcher]] = {"whole-class": WholeClass, "whole-class-all": lambda: WholeClass(every=True),
                                               "all-pay": AllPay, "last-node": LastNode, "nested-firm": NestedFirm,
                                               "erlang": Erlang}


class Recorded(NodeHeld):
    """Mixin: each arrival records, per cluster, whether the job could start there now and if not, the first reason in
    the order the rule checks them: ``GPU`` / ``CPU`` (the aggregate room now, running + waiting + the job; ``GPU+CPU``
    both), ``queue`` (someone waiting), ``plan`` (the ledger's room ahead), ``node`` (no node holds it), else ``open``."""

    seen: dict[int, list[str]]

    def dispatch(self, job: int, now: float) -> Decision:
        _, _, blocked = self.options(job, now)
        v, pod = self.view, self.view.pod(job)
        short = (v.used + v.waiting + v.demand[:, job, None]) > v.capacity
        self.seen[job] = ["+".join(r for r, s in zip(("GPU", "CPU"), short[:, c]) if s) or
                          ("queue" if v.queued[c] else "plan" if blocked[c, 0] else "open" if self.holds(c, pod) else "node")
                          for c in range(v.clusters)]
        return super().dispatch(job, now)


def recorded(spec: str) -> Recorded:
    """``spec``'s dispatcher (node-level starts: :class:`~quasched.federation.held.NodeHeld`), recording."""
    d = make_dispatcher(spec)
    if not isinstance(d, NodeHeld):
        raise SystemExit(f"--ours {spec!r}: needs a dispatcher with node-level starts (ours-redecide-hourly, ours-nested, ...)")
    d.__class__ = type(f"Recorded{type(d).__name__}", (Recorded, type(d)), {})
    d.seen = {}  # type: ignore[attr-defined]
    return d  # type: ignore[return-value]


def classify(item: tuple, ours: str) -> tuple[list[dict], dict]:
    """Per inflexible job placed elsewhere than the oracle placed it: its gap and class; and the scenario's oracle."""
    name, seed, sc = item
    d = recorded(ours)
    run = run_federation(sc, d, seed=seed)
    oracle = at_most(replay_plans(sc, seed=seed), int(missed(run).sum())).run
    a, b = per_job_kg(run), per_job_kg(oracle)
    whole = whole_node(run.view)
    other = (sc.slack <= 0) & (run.cluster != oracle.cluster) & np.isfinite(a) & np.isfinite(b)
    cause = {int(j): d.seen[int(j)][oracle.cluster[j]] for j in np.flatnonzero(other)}
    jobs = [{"set": name, "seed": seed, "gap_kg": a[j] - b[j], "cause": cause[j],
             "class": "open" if cause[j] == "open" else
             "closed, whole node" if run.view.demand[0, j] >= whole else "closed, smaller"}
            for j in cause]
    return jobs, {"set": name, "seed": seed, "oracle_kg": float(np.nansum(b)), "oracle_missed": int(missed(oracle).sum())}


def trial(spec: str, item: tuple) -> dict:
    name, seed, sc = item
    run = run_federation(sc, TRIALS[spec]() if spec in TRIALS else make_dispatcher(spec), seed=seed)
    return {"set": name, "seed": seed, "spec": spec, "kg": float(np.nansum(per_job_kg(run))),
            "missed": int(missed(run).sum())}


def main() -> None:
    parser = scenario_arguments(__doc__)
    parser.add_argument("--ours", default="ours-redecide-hourly",
                        help="the dispatcher diagnosed (node-level starts); the oracle is held to its misses")
    parser.add_argument("--trials", default="ours-redecide-hourly;ours-redecide-hourly:perfect=1;whole-class;"
                        "whole-class-all;all-pay;last-node;ours-redecide-hourly:tau=12;ours-redecide-hourly:tau=48;ours-nested;"
                        "nested-firm", help="';'-separated dispatcher specs or trial rules (module docstring), each divided by the oracle")
    parser.add_argument("--out", default="results/federation_nested/room", help="jobs.csv and trials.csv go here")
    args = parser.parse_args()
    items = list(scenarios(args))
    jobs, oracles = [], []
    for item in items:
        j, o = classify(item, args.ours)
        jobs += j
        oracles.append(o)
    jobs_frame, oracle_frame = pd.DataFrame(jobs), pd.DataFrame(oracles)
    print(jobs_frame.groupby("class")["gap_kg"].agg(["count", "sum"]).round(1).to_string())
    print(jobs_frame.groupby("cause")["gap_kg"].agg(["count", "sum"]).round(1).to_string())
    runs = pd.DataFrame([trial(s, item) for s in args.trials.split(";") for item in items]).merge(oracle_frame)
    runs["ratio"] = runs.kg / runs.oracle_kg
    table = runs.groupby(["set", "spec"], sort=False).agg(ratio=("ratio", "mean"), kg=("kg", "sum"),
                                                          oracle_kg=("oracle_kg", "sum"), missed=("missed", "mean"),
                                                          oracle_missed=("oracle_missed", "mean"))
    with pd.option_context("display.width", 200):
        print(table.round(3).to_string())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs_frame.to_csv(out / "jobs.csv", index=False)
    runs.to_csv(out / "trials.csv", index=False)
    print(ATTRIBUTION)


if __name__ == "__main__":
    main()
