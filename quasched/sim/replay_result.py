"""What a time-based replay (:mod:`.replay`) takes and gives: :class:`ReplayConfig`, the per-pod
:class:`PodOutcomes` with the pod states, and :class:`ReplayResult` with its energy, carbon, failure
and headline figures; time averages are of step functions over the event times."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from quasched.metrics.power import SECONDS_PER_HOUR, WATTS_PER_KW, PowerMode, carbon_kg, energy_kwh
from quasched.metrics.typical import TypicalPods
from quasched.model.cluster import Cluster
from quasched.model.nodes import NodeSpec
from quasched.model.workload import Workload
from quasched.sim.engine import RngKind
from quasched.sim.events import MissingCreation, Timeline
from quasched.sim.failures import FailureConfig
from quasched.sim.records import ARRIVE, DOWN, QUEUE, UP, EventRecords
from quasched.sim.work_ledger import WorkLedger
from quasched.traces.carbon import CarbonIntensity

DepartureMode = Literal["trace", "duration"]

#: Pod states (``PodOutcomes.status``).
PENDING, RUNNING, QUEUED, DONE, WITHDRAWN, SKIPPED = range(6)
STATUS_NAMES = ("pending", "running", "queued", "done", "withdrawn", "skipped")


@dataclass(frozen=True)
class ReplayConfig:
    """Parameters of one replay."""

    policy: str = "fgd"
    seed: int = 42
    departure: DepartureMode = "duration"
    missing_creation: MissingCreation = "start"
    typical_threshold: float = 95.0
    rng: RngKind = "native"
    compat_data: Path | None = None
    #: GPU failure process and job recovery (None = no failures)
    failures: FailureConfig | None = None


@dataclass
class PodOutcomes:
    """Per workload row (index = row): what happened to the pod."""

    arrival: np.ndarray
    #: first placement (a pod restarted after a failure keeps it)
    placed: np.ndarray
    departed: np.ndarray
    node: np.ndarray
    devices: np.ndarray
    status: np.ndarray

    @property
    def wait(self) -> np.ndarray:
        """Placement − arrival in seconds; NaN for pods never placed or skipped."""
        return self.placed - self.arrival

    @property
    def was_placed(self) -> np.ndarray:
        return np.isfinite(self.placed)

    @property
    def never_placed(self) -> np.ndarray:
        """Rows that arrived but never ran (withdrawn, or still queued at the end)."""
        return (self.status == WITHDRAWN) | (self.status == QUEUED)


@dataclass
class ReplayResult:
    """Everything one replay produced."""

    config: ReplayConfig
    nodes: NodeSpec
    workload: Workload
    timeline: Timeline
    rank: np.ndarray
    typical: TypicalPods
    events: EventRecords
    pods: PodOutcomes
    cluster: Cluster
    elapsed_s: float = 0.0
    #: hourly intensity for :meth:`carbon_kg` in :meth:`summary` (None = no carbon figures)
    carbon: CarbonIntensity | None = None
    #: UTC time of the first event on the intensity series' clock (None = its first hour)
    carbon_start: np.datetime64 | None = None
    #: power usage effectiveness: facility energy / IT energy
    pue: float = 1.0
    #: lost and allocated work of a run with failures (None = no failures)
    ledger: WorkLedger | None = None
    #: GPU warnings seen and nodes drained (runs with failures)
    warnings: int = 0
    drains: int = 0

    @property
    def wait(self) -> np.ndarray:
        return self.pods.wait

    def power_series(self, mode: PowerMode = "step") -> np.ndarray:
        """Modelled cluster power after each event, W."""
        return self.events.power_w if mode == "step" else self.events.power_linear_w

    def energy_kwh(self, mode: PowerMode = "step") -> float:
        """IT energy from the first to the last event (× ``pue`` for the facility), kWh."""
        return self.pue * energy_kwh(self.events.time, self.power_series(mode))

    def carbon_kg(self, carbon: CarbonIntensity | None = None, mode: PowerMode = "step",
                  start: np.datetime64 | None = None) -> float:
        """Emissions of :meth:`energy_kwh` under ``carbon`` (default: the run's), kg CO2eq.

        The first event happens at ``start`` (default :attr:`carbon_start`, else the series'
        first hour); the series wraps around if the replay runs past its end.
        """
        carbon = carbon or self.carbon
        if carbon is None:
            raise ValueError("no carbon intensity series: pass one (quasched.traces.carbon.load_carbon)")
        times = self.events.time
        if len(times) == 0:
            return 0.0
        when = start if start is not None else self.carbon_start if self.carbon_start is not None else carbon.start
        at = np.asarray(when, dtype="datetime64[s]")
        into_hour = float((at - at.astype("datetime64[h]")) / np.timedelta64(1, "s"))
        hour0 = float(times[0]) - into_hour
        hours = int(np.ceil((float(times[-1]) - hour0) / SECONDS_PER_HOUR)) + 1
        return carbon_kg(times, self.power_series(mode), carbon.hours_from(when, hours), hour0, pue=self.pue)

    def failure_summary(self) -> dict[str, float | int]:
        """Device failures and recoveries, interruptions, lost GPU-hours and goodput (:class:`WorkLedger`)."""
        assert self.ledger is not None, "the replay ran without failures"
        kinds = self.events.kind
        return {"device_failures": int(np.sum(kinds == DOWN)), "device_recoveries": int(np.sum(kinds == UP)),
                "warnings": self.warnings, "drains": self.drains, **self.ledger.summary()}

    def time_average(self, values: np.ndarray) -> float:
        """Time average of a per-event step series from the first to the last event."""
        return time_average(self.events.time, values)

    def summary(self) -> dict[str, float | int | str]:
        """Headline figures (times in seconds, allocation and fragmentation in %)."""
        ev, pods = self.events, self.pods
        placed = pods.was_placed
        waits = pods.wait[placed]
        arrived = pods.status != SKIPPED

        def stat(fn) -> float:
            return float(fn(waits)) if len(waits) else float("nan")

        return {
            "policy": self.config.policy,
            "seed": self.config.seed,
            "departure": self.config.departure,
            "nodes": len(self.nodes),
            "gpus": self.nodes.total_gpus,
            "pods": len(self.workload),
            "skipped": self.timeline.n_skipped,
            "arrived": int(arrived.sum()),
            "placed": int(placed.sum()),
            "placed_on_arrival": int(np.sum(ev.kind == ARRIVE)),
            "queued": int(np.sum(ev.kind == QUEUE)),
            "never_placed": int(pods.never_placed.sum()),
            "withdrawn": int(np.sum(pods.status == WITHDRAWN)),
            "still_queued": int(np.sum(pods.status == QUEUED)),
            "wait_mean_s": stat(np.mean),
            "wait_p50_s": stat(lambda w: np.percentile(w, 50)),
            "wait_p95_s": stat(lambda w: np.percentile(w, 95)),
            "wait_max_s": stat(np.max),
            "gpu_alloc_avg_pct": self.time_average(ev.gpu_alloc_pct),
            "cpu_alloc_avg_pct": self.time_average(ev.cpu_alloc_pct),
            "frag_ratio_avg_pct": self.time_average(ev.frag_ratio),
            "peak_gpu_alloc_pct": float(ev.gpu_alloc_pct.max(initial=0.0)),
            "peak_queue": int(ev.queue_len.max(initial=0)),
            "power_avg_kw": self.time_average(ev.power_w) / WATTS_PER_KW,
            "power_linear_avg_kw": self.time_average(ev.power_linear_w) / WATTS_PER_KW,
            "energy_kwh": self.energy_kwh("step"),
            "energy_linear_kwh": self.energy_kwh("linear"),
            **({"carbon_zone": self.carbon.zone, "carbon_kg": self.carbon_kg(mode="step"),
                "carbon_linear_kg": self.carbon_kg(mode="linear"), "carbon_source": self.carbon.source}
               if self.carbon is not None else {}),
            **(self.failure_summary() if self.ledger is not None else {}),
            "events": len(ev),
            "start_s": float(ev.time[0]) if len(ev) else float("nan"),
            "end_s": float(ev.time[-1]) if len(ev) else float("nan"),
            "elapsed_s": round(self.elapsed_s, 3),
        }


def time_average(times: np.ndarray, values: np.ndarray) -> float:
    """Mean of a step function (value i holds from ``times[i]`` to ``times[i+1]``).

    Events that share a timestamp get no weight except the last of them; with
    a single distinct timestamp the last value is returned.
    """
    if len(times) == 0:
        return float("nan")
    span = float(times[-1] - times[0])
    if span <= 0:
        return float(values[-1])
    return float(np.dot(np.diff(times), values[:-1]) / span)
