"""GPU failures for the replay: a seeded failure process, device repairs and the work jobs lose
(accounted in :mod:`.work_ledger`).

Rate. Llama 3's pre-training (Meta, 2024, §3.3.4) saw 419 unexpected interruptions in 54 days
on 16,384 H100s, i.e. 16,384 × 54 × 24 = 21.23 M GPU-hours: 419 / 21.23 M = 1.97e-5 per
GPU-hour. 58.7 % of them were GPU-related (faulty GPUs, HBM3, ...): 246 / 21.23 M = 1.16e-5.
The default ``rate = 2e-5`` is the first figure: the 0.587 share is *not* folded in, every
unexpected interruption (host, network and software ones kill the job too) is modelled as
the failure of one GPU device.

Heterogeneity (observed, sizes assumed). Failures are not uniform: Meta's study of its
research clusters (Kokolis et al., HPCA 2025) finds "lemon nodes" that fail again and again
and removes them; Llama 3's report and Alibaba's describe the same. A share ``flaky_share``
of the nodes (drawn once per ``seed``) fails ``flaky_factor`` times as often as the others;
the base rate is scaled so that the mean over all GPUs is still ``rate``. The defaults (5 %,
20×) are assumptions, not fitted to any data.

Precursors (observed, sizes assumed). GPUs report non-fatal errors before some fatal ones:
pending row remaps (Xid 63/64) and rising corrected-ECC rates (Xid 92) precede memory
failures, and NVIDIA's Xid catalog tells operators to drain or reset on them. Here a share
``precursor_share`` of the fatal failures is preceded by a *warning* on the same device, an
exponential ``precursor_ahead_h`` hours earlier (at most ``chunk_days``; never before the
trace starts), and ``false_warnings`` warnings per true one come before nothing (a Poisson
process on every device, in proportion to its rate). A warning kills nothing: it goes to the
error log. No published figure gives the share, warning time or false-alarm ratio: all three are
assumptions, and the default 0 turns precursors off. With neither flaky nodes nor precursors
no placement can change a job's failure odds, and health-awareness cannot save anything.

Process. Each GPU device fails as a Poisson process at its rate, independently of what runs
on it, drawn in ``chunk_days`` windows from the trace start with ``default_rng([seed, 1, k])``
for window ``k``; so the failures of a seed are the same for every policy (common random
numbers) and do not depend on how long a replay runs. A failure is transient (share
``transient_share``: the device is back after ``reset_min`` minutes) or fatal (back after an
exponential repair time of mean ``repair_h`` hours); a failure drawn while the device is
still down is dropped. Health is applied through :meth:`Cluster.set_device_health`: an
unhealthy device takes no pod (Filter) until it is back.

Jobs (:class:`~quasched.sim.work_ledger.WorkLedger`). A pod on a failed device is killed and loses the work since its
last checkpoint (every ``checkpoint_min`` minutes of progress within a run, counted from the
end of its restart overhead); it re-enters the scheduler at once and, when placed, runs for
``restart_min`` (reloading, counted as lost) plus the work left. Lost GPU-hours = Σ GPUs ×
(work thrown away + restart overheads); goodput = 1 − lost / allocated GPU-hours.

Remediation (scheduler side, off by default). *Drain*: a node with ``drain_errors`` errors
(failures or warnings) within ``drain_window_h`` hours is cordoned for ``drain_h`` hours: no
new pods, running ones finish (its failure rate does not change), or with ``evict`` they all
migrate (``kubectl drain`` with a checkpoint); ``drain_h = inf`` cordons it for good. With
``drain_flaky``, a node is also cordoned while the posterior probability that it is flaky (Bayes on its errors
and clean time, from the model's own prior, :meth:`FailureConfig.error_prior`) is at least ``drain_flaky``;
each error extends the hold. With ``drain_lift``
(κ), a drained node takes pods while the longest-waiting pod has waited longer than κ × the extra GPU time per
GPU a pod expects to lose there (:meth:`FailureConfig.lift_wait_s`; its run: the workload's mean, or with
``drain_lift_run="known"`` that pod's work left), and is cordoned again when no pod has. *Migrate*: right
after an error, the pods on the erring device (``migrate="device"``) or node (``"node"``) checkpoint on demand and
re-enter the scheduler: they keep all progress but lose ``checkpoint_cost_min`` of their GPUs
(writing the checkpoint) plus the restart overhead.

Migrate only when it pays (``migrate_rule``, :func:`plan_migration`; ``migrate="device"``, on
warnings). Per GPU, staying loses ``p(R) · (C/2 + r)`` in expectation: ``p(x)`` is the chance
that the warned device fails fatally within ``x`` seconds, from the model's own parameters
(a warning is true with odds ``1 / (1 + false_warnings)``, its time ahead of the failure is exponential with mean
``precursor_ahead_h``); ``R`` the pod's remaining work; a kill lands on average half-way
through the checkpoint interval ``C``; ``r`` the reload. Moving now costs ``k + r`` (``k``
the on-demand checkpoint). With ``migrate_at="checkpoint"`` the pod may instead keep running
to its next periodic checkpoint, ``w`` seconds away (``w < R``), and move then for free:
``r + p(w) · (φ + w/2)``, ``φ`` its progress since its last checkpoint. The cheapest wins (a
tie: stay). ``"pays"`` knows ``R`` (the trace's duration, as a user-declared run time);
``"pays_lindy"`` estimates it by the work already done (Lindy: a job that ran for ``x`` runs
about ``x`` more). Open-ended pods count as ``R = ∞``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from itertools import count
from typing import Iterable, Iterator, Literal, NamedTuple

import numpy as np

from quasched.metrics.power import SECONDS_PER_HOUR
from quasched.model.health import ErrorPrior

MigrateScope = Literal["off", "device", "node"]
#: migrate every pod on a warned device, or only when its expected loss from staying is larger
MigrateRule = Literal["always", "pays", "pays_lindy"]
#: what a migration that pays does: nothing, checkpoint on demand now, or move at the next periodic checkpoint
Move = Literal["stay", "now", "checkpoint"]
#: what :meth:`DeviceFaults.pop` returns: a failure, a warning, a device back, a drained node back, a deferred
#: migration due, a drained node's lift check (``drain_lift``)
FaultKind = Literal["fail", "warn", "back", "uncordon", "move", "check"]


@dataclass(frozen=True)
class FailureConfig:
    """Failure process and job recovery (module docstring); rates per GPU-hour, times as named."""

    rate: float = 2e-5
    seed: int = 0
    transient_share: float = 0.5
    reset_min: float = 10.0
    repair_h: float = 24.0
    flaky_share: float = 0.05
    flaky_factor: float = 20.0
    checkpoint_min: float = 30.0
    restart_min: float = 0.0
    chunk_days: float = 7.0
    precursor_share: float = 0.0
    precursor_ahead_h: float = 24.0
    false_warnings: float = 1.0
    drain_errors: int = 0
    drain_window_h: float = 168.0
    drain_h: float = 72.0
    #: cordon a node while its posterior probability of being flaky (:meth:`error_prior`) is at least this (0 = never)
    drain_flaky: float = 0.0
    #: a drained node takes pods while the longest-waiting pod has waited this many times the expected extra loss
    #: (GPU-seconds per GPU) of a pod on it (:meth:`lift_wait_s`; 0 = never)
    drain_lift: float = 0.0
    #: the run that loss is priced on: the workload's mean (``"mean"``, no durations) or the pod's work left
    drain_lift_run: Literal["mean", "known"] = "mean"
    migrate: MigrateScope = "off"
    evict: bool = False
    checkpoint_cost_min: float = 1.0
    migrate_rule: MigrateRule = "always"
    #: ``"checkpoint"``: a migration that pays may wait for the pod's next periodic checkpoint
    migrate_at: Literal["now", "checkpoint"] = "now"

    def __post_init__(self) -> None:
        for name in ("rate", "reset_min", "repair_h", "restart_min", "precursor_ahead_h", "false_warnings",
                     "drain_errors", "drain_window_h", "drain_h", "drain_lift", "checkpoint_cost_min"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"failure option {name}={getattr(self, name)} must be at least 0")
        for name in ("checkpoint_min", "chunk_days"):
            if not getattr(self, name) > 0:
                raise ValueError(f"failure option {name}={getattr(self, name)} must be positive")
        if not 0 <= self.drain_flaky < 1:
            raise ValueError(f"failure option drain_flaky={self.drain_flaky} must be within 0..1 (1 excluded)")
        for name in ("transient_share", "flaky_share", "precursor_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"failure option {name}={getattr(self, name)} must be within 0..1")
        if not self.flaky_factor >= 1:
            raise ValueError(f"failure option flaky_factor={self.flaky_factor} must be at least 1")
        for name in ("rate", "restart_min", "precursor_ahead_h", "false_warnings", "drain_lift", "checkpoint_cost_min",
                     "checkpoint_min", "chunk_days", "flaky_factor"):  # only outage and drain times may be inf
            if not np.isfinite(getattr(self, name)):
                raise ValueError(f"failure option {name}={getattr(self, name)} must be a finite number")
        if self.drain_lift_run not in ("mean", "known"):
            raise ValueError(f"failure option drain_lift_run={self.drain_lift_run!r}: choose from mean, known")
        if self.drain_lift and not np.isfinite(self.drain_h):
            raise ValueError("failure option drain_lift needs a finite drain_h: a drain for good is never lifted")
        if self.migrate not in ("off", "device", "node"):
            raise ValueError(f"failure option migrate={self.migrate!r}: choose from off, device, node")
        if self.migrate_rule not in ("always", "pays", "pays_lindy"):
            raise ValueError(f"failure option migrate_rule={self.migrate_rule!r}: choose from always, pays, pays_lindy")
        if self.migrate_at not in ("now", "checkpoint"):
            raise ValueError(f"failure option migrate_at={self.migrate_at!r}: choose from now, checkpoint")
        if self.migrate_rule != "always" and self.migrate != "device":
            raise ValueError(f"failure option migrate_rule={self.migrate_rule!r} weighs a warned device's failure "
                             f"odds: it needs migrate='device', not {self.migrate!r}")
        if self.migrate_at != "now" and self.migrate_rule == "always":
            raise ValueError(f"failure option migrate_at={self.migrate_at!r} is a choice of the expected-loss rule: "
                             "it needs migrate_rule='pays' or 'pays_lindy'")

    def error_prior(self, since: float) -> ErrorPrior:
        """The node-flakiness prior of this model as the error log sees it: every error (failure or warning)
        counts, ``1 + (1 − transient_share) · precursor_share · (1 + false_warnings)`` per failure on average; the
        ordinary GPU's rate keeps the mean at ``rate`` with the expected flaky share."""
        per_failure = 1 + (1 - self.transient_share) * self.precursor_share * (1 + self.false_warnings)
        return ErrorPrior(self.flaky_share, self.flaky_factor, self.ordinary_rate * per_failure, since)

    @property
    def ordinary_rate(self) -> float:
        """Failures per second of an ordinary (not flaky) GPU: the mean ``rate`` over the expected flaky share."""
        return self.rate / (1 - self.flaky_share + self.flaky_share * self.flaky_factor) / SECONDS_PER_HOUR

    def lift_wait_s(self, flaky_p: float, run_s: float) -> float:
        """Seconds a pod waits before a drained node whose posterior of being flaky is ``flaky_p`` takes it
        (``drain_lift`` = κ): κ × the extra GPU-seconds per GPU that a pod running ``run_s`` seconds there loses in
        expectation against an ordinary node, ``κ · p (f − 1) λ R (C/2 + r)`` (to first order in the kill odds)."""
        excess = flaky_p * (self.flaky_factor - 1) * self.ordinary_rate
        return self.drain_lift * excess * run_s * (self.checkpoint_min * 30 + self.restart_min * 60)

    def fatal_within(self, seconds: float) -> float:
        """Odds that a warned device fails fatally within ``seconds`` (the model's false-alarm share and warning time)."""
        lead_s = self.precursor_ahead_h * SECONDS_PER_HOUR
        near = 1.0 - np.exp(-seconds / lead_s) if lead_s > 0 else float(seconds >= 0)
        return float(near) / (1.0 + self.false_warnings)


def plan_migration(config: FailureConfig, remaining_s: float, to_checkpoint_s: float,
                   since_checkpoint_s: float) -> Move:
    """What a pod on a warned device does (module docstring): the choice of least expected lost GPU time."""
    checkpoint_s, reload_s = config.checkpoint_min * 60, config.restart_min * 60
    cost: dict[Move, float] = {"stay": config.fatal_within(remaining_s) * (checkpoint_s / 2 + reload_s),
                               "now": config.checkpoint_cost_min * 60 + reload_s}
    if config.migrate_at == "checkpoint" and to_checkpoint_s < remaining_s:
        risk = config.fatal_within(to_checkpoint_s)
        cost["checkpoint"] = reload_s + risk * (since_checkpoint_s + to_checkpoint_s / 2)
    return min(cost, key=lambda move: cost[move])


class DeviceFailure(NamedTuple):
    """Device ``device`` of node ``node`` fails at ``time`` and is down for ``down_s`` seconds."""

    time: float
    node: int
    device: int
    fatal: bool
    down_s: float
    #: a non-fatal error (e.g. a pending row remap): logged, the device stays up, nothing is killed
    warning: bool = False


def device_rates(config: FailureConfig, num_gpus: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Failure rate per GPU-second of every device (node-major order) and the flaky-node mask."""
    flaky = np.random.default_rng([config.seed, 0]).random(len(num_gpus)) < config.flaky_share
    weight = np.repeat(np.where(flaky, config.flaky_factor, 1.0), num_gpus)
    scale = config.rate / SECONDS_PER_HOUR * len(weight) / max(weight.sum(), 1.0)
    return weight * scale, flaky


def failure_stream(config: FailureConfig, num_gpus: np.ndarray, start: float) -> Iterator[DeviceFailure]:
    """Every device's failures and warnings from ``start`` on, in time order (endless; module docstring)."""
    rates, _ = device_rates(config, num_gpus)
    if not rates.sum() > 0:
        return
    window = config.chunk_days * 24 * SECONDS_PER_HOUR
    pending: list[tuple[float, int, DeviceFailure]] = []
    seq = count()
    for k in count():
        for event in _window(config, rates, num_gpus, start, k):
            heapq.heappush(pending, (event.time, next(seq), event))
        # later windows add nothing before this one's start (a warning leads by one window at most)
        while pending and pending[0][0] < start + k * window:
            yield heapq.heappop(pending)[2]


def _window(config: FailureConfig, rates: np.ndarray, num_gpus: np.ndarray, start: float,
            k: int) -> list[DeviceFailure]:
    """Window ``k``'s failures in time order, then the warnings drawn with them (``default_rng([seed, 2, k])``)."""
    window = config.chunk_days * 24 * SECONDS_PER_HOUR
    t0 = start + k * window
    node_of = np.repeat(np.arange(len(num_gpus)), num_gpus)
    device_of = np.arange(len(node_of)) - np.repeat(np.cumsum(num_gpus) - num_gpus, num_gpus)
    rng = np.random.default_rng([config.seed, 1, k])
    dev = np.repeat(np.arange(len(rates)), rng.poisson(rates * window))
    times = t0 + rng.uniform(0, window, len(dev))
    fatal = rng.random(len(dev)) >= config.transient_share
    down = np.where(fatal, rng.exponential(config.repair_h * SECONDS_PER_HOUR, len(dev)), config.reset_min * 60)
    order = np.argsort(times, kind="stable").tolist()
    events = [DeviceFailure(float(times[i]), int(node_of[dev[i]]), int(device_of[dev[i]]), bool(fatal[i]),
                            float(down[i])) for i in order]
    if config.precursor_share > 0:
        wrng = np.random.default_rng([config.seed, 2, k])
        warned = fatal & (wrng.random(len(dev)) < config.precursor_share)
        ahead = np.minimum(wrng.exponential(config.precursor_ahead_h * SECONDS_PER_HOUR, len(dev)), window)
        false_rate = rates * window * (1 - config.transient_share) * config.precursor_share * config.false_warnings
        false_dev = np.repeat(np.arange(len(rates)), wrng.poisson(false_rate))
        w_dev = np.r_[dev[warned], false_dev]
        w_time = np.r_[times[warned] - ahead[warned], t0 + wrng.uniform(0, window, len(false_dev))]
        events += [DeviceFailure(float(w_time[i]), int(node_of[w_dev[i]]), int(device_of[w_dev[i]]), False, 0.0,
                                 True) for i in np.argsort(w_time, kind="stable").tolist() if w_time[i] >= start]
    return events


class DeviceFaults:
    """Failures, warnings, recoveries, ends of drains and deferred migrations in time order (the last three
    first on equal times)."""

    def __init__(self, failures: Iterable[DeviceFailure]) -> None:
        self._failures = iter(failures)
        self._next = next(self._failures, None)
        #: ``(time, node, device, kind)`` of devices coming back (``"back"``), drained nodes (``"uncordon"``, device
        #: -1) and deferred migrations (``"move"``, device = the pod)
        self._back: list[tuple[float, int, int, FaultKind]] = []
        self.down: set[tuple[int, int]] = set()
        self.failed = self.warned = self.drained = 0

    @property
    def recovering(self) -> bool:
        return bool(self._back)

    def next_time(self, failures: bool = True) -> float:
        """Time of the next event; ``failures=False``: of the next recovery only."""
        back = self._back[0][0] if self._back else np.inf
        return min(back, self._next.time) if failures and self._next is not None else back

    def hold(self, node: int, until: float) -> None:
        """``node`` is drained until ``until`` (then :meth:`pop` returns its ``"uncordon"``; inf: never)."""
        if np.isfinite(until):
            heapq.heappush(self._back, (until, node, -1, "uncordon"))
        self.drained += 1

    def check(self, node: int, when: float) -> None:
        """Drained ``node``'s lift is to be checked at ``when`` (:meth:`pop` returns ``(when, node, -1, "check")``)."""
        heapq.heappush(self._back, (when, node, -1, "check"))

    def defer(self, uid: int, node: int, when: float) -> None:
        """Pod ``uid`` on ``node`` is to migrate at ``when`` (:meth:`pop` returns ``(when, node, uid, "move")``)."""
        heapq.heappush(self._back, (when, node, uid, "move"))

    def pop(self, failures: bool = True) -> tuple[float, int, int, FaultKind] | None:
        """The next event ``(time, node, device, kind)``; None for a failure or warning that is dropped
        (its device is down, or ``failures=False``: only recoveries are wanted)."""
        nxt = self._next
        if nxt is not None and (not self._back or nxt.time < self._back[0][0]):
            self._next = next(self._failures, None)
            if not failures or (nxt.node, nxt.device) in self.down:
                return None
            if nxt.warning:
                self.warned += 1
                return nxt.time, nxt.node, nxt.device, "warn"
            self.down.add((nxt.node, nxt.device))
            heapq.heappush(self._back, (nxt.time + nxt.down_s, nxt.node, nxt.device, "back"))
            self.failed += 1
            return nxt.time, nxt.node, nxt.device, "fail"
        t, node, device, kind = heapq.heappop(self._back)
        if kind == "back":
            self.down.discard((node, device))
        return t, node, device, kind
