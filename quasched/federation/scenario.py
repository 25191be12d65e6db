"""A federation: clusters in grid zones (with PUE) and one stream of jobs with deadlines.

Time is in seconds from the scenario's ``start`` (UTC, an hour boundary); hour ``h`` covers
``[3600 h, 3600 (h + 1))`` and has each member's intensity ``carbon.hours_from(start, ...)[h]``.

Jobs are the rows of a workload with creation/deletion times (:func:`~quasched.sim.events.build_timeline`,
rows without a creation time arrive at 0). A job runs ``duration`` seconds once placed and must
finish by its ``deadline = arrival + slack + duration``: ``slack = 0`` (inflexible) means any wait
is a miss; a flexible job may be deferred within its slack (:func:`assign_slack`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Sequence

import numpy as np

from quasched.metrics.power import PWR_MODEL, SECONDS_PER_HOUR, PowerModel
from quasched.model.cluster import Cluster, NodeSpec
from quasched.model.fit import Demand, fit_matrix
from quasched.model.workload import FULL_GPU_MILLI, Workload
from quasched.sim.events import build_timeline
from quasched.traces.carbon import CarbonIntensity
from quasched.traces.dlrm import peak_demand


@dataclass(frozen=True)
class Member:
    """One cluster of the federation: its nodes, grid zone and power usage effectiveness."""

    name: str
    nodes: NodeSpec
    carbon: CarbonIntensity
    pue: float = 1.0

    def __post_init__(self) -> None:
        if self.pue < 1:
            raise ValueError(f"cluster {self.name}: PUE is facility / IT energy, at least 1; got {self.pue}")


@dataclass(frozen=True)
class Scenario:
    """Members, jobs (one per workload row) with their timing, and the UTC time of ``t = 0``."""

    members: tuple[Member, ...]
    workload: Workload
    arrival: np.ndarray
    duration: np.ndarray
    slack: np.ndarray
    start: np.datetime64 = field(default_factory=lambda: np.datetime64("2023-01-01T00", "h"))
    power: PowerModel = PWR_MODEL

    def __post_init__(self) -> None:
        n = len(self.workload)
        for name in ("arrival", "duration", "slack"):
            column = np.asarray(getattr(self, name), dtype=float)
            if len(column) != n or not np.all(np.isfinite(column)) or np.any(column < 0):
                raise ValueError(f"scenario: {name} needs {n} finite non-negative values (one per job)")
        if not self.members:
            raise ValueError("scenario: a federation needs at least one cluster")

    @property
    def deadline(self) -> np.ndarray:
        return self.arrival + self.slack + self.duration

    @cached_property
    def horizon_hours(self) -> int:
        """Hours up to the last deadline: the accounting window of every dispatcher."""
        return int(np.ceil(float(self.deadline.max(initial=0.0)) / SECONDS_PER_HOUR)) + 1

    def intensity(self, hours: int, first: int = 0) -> np.ndarray:
        """``(clusters, hours)`` grid intensity × PUE from hour ``first`` (negative: before ``start``),
        gCO2eq per kWh of IT energy."""
        when = self.start + np.timedelta64(first, "h")
        return np.vstack([m.pue * m.carbon.hours_from(when, hours) for m in self.members])

    @cached_property
    def placeable(self) -> np.ndarray:
        """``(jobs, clusters)``: can the job run on some node of the cluster when it is empty (the
        cluster's own filter: resources, GPU model and devices; a job that fits no node there would
        wait forever)."""
        pods = [self.workload.pod(j) for j in range(len(self.workload))]
        kinds: dict[tuple, int] = {}
        kind = np.array([kinds.setdefault(p.fit_key, len(kinds)) for p in pods], dtype=np.int64)
        first = np.unique(kind, return_index=True)[1]
        demand = Demand.of([pods[j] for j in first]) if len(first) else None
        fits = [np.asarray(fit_matrix(Cluster(m.nodes), demand).any(axis=1)) if demand is not None
                else np.zeros(0, bool) for m in self.members]
        return np.stack([f[kind] for f in fits], axis=1)

    @cached_property
    def job_kw(self) -> np.ndarray:
        """``(jobs, clusters)`` dynamic IT power of each job on each cluster, kW (:func:`dynamic_kw`)."""
        return dynamic_kw(self.workload.gpu_request, self.workload.cpu_milli, [m.nodes for m in self.members],
                          self.power)


def dynamic_kw(gpu_request: np.ndarray, cpu_milli: np.ndarray, clusters: Sequence[NodeSpec],
               power: PowerModel = PWR_MODEL) -> np.ndarray:
    """``(jobs, clusters)`` dynamic IT power of jobs asking ``gpu_request`` GPU milli and ``cpu_milli`` on each of
    ``clusters`` (linear model), kW: the GPU share × (full − idle) of the cluster's mean GPU, the vCPUs × (full −
    idle) per vCPU of a socket."""
    cpu = power.cpu
    cpu_w = (cpu.full_w - cpu.idle_w) / (2 * cpu.cores_per_socket) * np.asarray(cpu_milli) / 1000
    gpu_w = []
    for nodes in clusters:
        idle, full = power.gpu_watts(list(nodes.gpu_model))
        gpus = nodes.num_gpus
        gpu_w.append(float(np.dot(full - idle, gpus) / max(gpus.sum(), 1)))
    share = np.asarray(gpu_request) / FULL_GPU_MILLI
    return (np.outer(share, gpu_w) + cpu_w[:, None]) / 1000


def jobs_of(workload: Workload) -> tuple[np.ndarray, np.ndarray]:
    """``(arrival, duration)`` per row (no creation time: arrives at 0; no deletion: runs to the trace end)."""
    timeline = build_timeline(workload, "start")
    arrival = timeline.arrival - timeline.start
    return arrival, timeline.deletion - timeline.start - arrival


def assign_slack(duration: np.ndarray, seed: int, share: float = 0.5, max_duration_h: float = 24.0,
                 slack_h: tuple[float, float] = (4.0, 24.0)) -> np.ndarray:
    """Slack per job, s: a seeded ``share`` of the jobs of at most ``max_duration_h`` hours is flexible,
    with a slack drawn uniformly from ``slack_h`` hours; the rest get 0."""
    rng = np.random.default_rng(seed)
    flexible = (duration <= max_duration_h * SECONDS_PER_HOUR) & (rng.random(len(duration)) < share)
    return np.where(flexible, rng.uniform(*slack_h, len(duration)) * SECONDS_PER_HOUR, 0.0)


def repeat_workload(workload: Workload, times: int) -> Workload:
    """``times`` copies of a trace back to back (e.g. a month to a year): copy ``k`` is shifted by
    ``k`` trace lengths; a row without a creation time starts at its copy's start, one without a
    deletion time ends at its copy's end."""
    arrival, duration = jobs_of(workload)
    period = float((arrival + duration).max(initial=0.0))
    rows = np.tile(np.arange(len(workload)), times)
    shift = np.repeat(np.arange(times) * period, len(workload))
    names = [f"{n}@{k}" for k in range(times) for n in workload.name]
    return replace(workload.take(rows, names), creation_time=arrival[rows] + shift,
                   deletion_time=arrival[rows] + duration[rows] + shift, source=f"{workload.source} x{times}")


def split_nodes(nodes: NodeSpec, parts: int, seed: int, gpus: float | None = None) -> list[NodeSpec]:
    """A seeded random partition of ``nodes`` into ``parts`` clusters of near-equal size, each cut
    to about ``gpus / parts`` GPUs when ``gpus`` is given (the federation's total)."""
    order = np.random.default_rng(seed).permutation(len(nodes))
    chunks = np.array_split(order, parts)
    if gpus is not None:
        chunks = [c[:max(1, int(np.searchsorted(np.cumsum(nodes.num_gpus[c]), gpus / parts)) + 1)] for c in chunks]
    return [nodes.take(np.sort(c)) for c in chunks]


def federation_gpus(workload: Workload, capacity: float) -> float:
    """``capacity`` × the workload's peak concurrent GPU demand, in GPUs."""
    return capacity * peak_demand(workload)["gpu_milli"] / FULL_GPU_MILLI


def draw_members(nodes: NodeSpec, zones: Sequence[CarbonIntensity], seed: int, clusters: int = 4,
                 gpus: float | None = None, pue: tuple[float, float] = (1.1, 1.5)) -> tuple[Member, ...]:
    """``clusters`` members from a seeded draw of distinct zones and a seeded node split; PUE uniform in ``pue``."""
    if len(zones) < clusters:
        raise ValueError(f"need {clusters} zones to draw from, got {len(zones)}: pass more --zones (or 'all') "
                         f"or fewer --clusters")
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(zones), clusters, replace=False)
    parts = split_nodes(nodes, clusters, seed, gpus)
    return tuple(Member(f"c{i}-{zones[z].zone}", part, zones[z], round(float(rng.uniform(*pue)), 2))
                 for i, (z, part) in enumerate(zip(picked.tolist(), parts)))


def build_scenario(nodes: NodeSpec, workload: Workload, zones: Sequence[CarbonIntensity], seed: int,
                   clusters: int = 4, gpus: float | None = None, share: float = 0.5,
                   slack_h: tuple[float, float] = (4.0, 24.0)) -> Scenario:
    """Every job of ``workload`` (:func:`jobs_of`) on :func:`draw_members`, slack by :func:`assign_slack`;
    ``t = 0`` is a seeded random day of the zones' year."""
    rng = np.random.default_rng(seed)
    arrival, duration = jobs_of(workload)
    days = int(np.ceil(float((arrival + duration).max(initial=0.0)) / (24 * SECONDS_PER_HOUR)))
    day = int(rng.integers(0, max(1, len(zones[0]) // 24 - days - 2)))
    return Scenario(draw_members(nodes, zones, seed, clusters, gpus), workload, arrival, duration,
                    assign_slack(duration, seed, share, slack_h=slack_h),
                    zones[0].start.astype("datetime64[h]") + np.timedelta64(24 * day, "h"))


def draw_scenario(nodes: NodeSpec, workload: Workload, zones: Sequence[CarbonIntensity], seed: int,
                  clusters: int = 4, capacity: float = 1.5, days: float = 7.0, share: float = 0.5,
                  slack_h: tuple[float, float] = (4.0, 24.0)) -> Scenario:
    """:func:`build_scenario` on the jobs arriving in a ``days`` window of the trace from a seeded random
    job's arrival (durations cut to the window), with ``capacity`` × the window's peak GPU demand."""
    arrival, duration = jobs_of(workload)
    window = days * 24 * SECONDS_PER_HOUR
    early = arrival[arrival <= arrival.max() - window]
    t0 = np.floor(np.random.default_rng(seed).choice(early if len(early) else arrival) / SECONDS_PER_HOUR)
    t0 *= SECONDS_PER_HOUR
    rows = np.flatnonzero((arrival >= t0) & (arrival < t0 + window))
    arr = arrival[rows] - t0
    jobs = replace(workload.take(rows), creation_time=arr, deletion_time=arr + np.minimum(duration[rows], window))
    return build_scenario(nodes, jobs, zones, seed, clusters, federation_gpus(jobs, capacity), share, slack_h)
