"""Modelled electrical power of GPU nodes, energy and carbon (``docs/simulator-spec.md``, Power).

Anchor: Lettich, Carlini, Nardini, Perego, Trani, *Power- and Fragmentation-aware Online
Scheduling for GPU Datacenters*, IEEE CCGrid 2025 (arXiv 2412.17484), "PWR". Its simulator is
a fork of the FGD artifact (``Fr4nz83/PWR-plugin-kubernetes``); the constants below are those
of its ``pkg/type/open-gpu-share/utils/const.go`` and the node model that of
``NodeResource.GetEnergyConsumptionNode`` (``pkg/type/resource.go``).

Node power ``P = P_gpu + P_cpu`` in watts, two models (:data:`PowerMode`):

``"step"`` (PWR's)
    A GPU with nothing allocated draws ``idle``, a GPU with *any* allocation ``full`` (its
    TDP). CPU: a node of ``V`` vCPUs has ``C = ceil(V / 2)`` physical cores (two vCPUs per
    core) in ``S = ceil(C / cores_per_socket)`` sockets; with ``F`` free vCPUs,
    ``W = C - floor(F / 2)`` cores work and ``A = ceil(W / cores_per_socket)`` sockets are
    active; each active socket draws ``full``, each other ``idle``.
``"linear"`` (fractional)
    Each GPU draws ``idle + (full - idle) * allocated share``; each socket ``idle`` plus
    ``(full - idle)`` × the share of its cores working, cores packed into sockets:
    ``S * idle + (full - idle) * W / cores_per_socket``.

The step model flatters packing (a 10 % GPU share costs a whole TDP); report both.

Everything is vectorised over node arrays. :class:`PowerMeter` keeps the power of every node
of a :class:`~quasched.model.cluster.Cluster` up to date incrementally (only the nodes
:meth:`~quasched.model.cluster.Cluster.changes_since` lists are recomputed), for the per-event records of every engine.
:func:`energy_kwh` and :func:`carbon_kg` integrate a per-event power step series over time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.resources import CPU
from quasched.model.workload import FULL_GPU_MILLI

PowerMode = Literal["step", "linear"]
POWER_MODES: tuple[PowerMode, ...] = ("step", "linear")

_PWR_CONST = "PWR artifact, Fr4nz83/PWR-plugin-kubernetes, pkg/type/open-gpu-share/utils/const.go"

#: vCPUs per physical core: Alibaba ECS instances expose two hyper-threads per core (PWR's assumption)
VCPUS_PER_CORE = 2
#: CPU quantities are in milli-vCPU
MILLI_PER_VCPU = 1000
#: 1 kWh in joules (W·s)
JOULES_PER_KWH = 3.6e6
SECONDS_PER_HOUR = 3600.0
WATTS_PER_KW = 1000.0
#: grams per kilogram (intensities are gCO2eq/kWh, emissions are reported in kg)
GRAMS_PER_KG = 1000.0


@dataclass(frozen=True)
class DevicePower:
    """Idle and full (TDP) draw of one GPU or one CPU socket, in watts, with the source of the figures."""

    idle_w: float
    full_w: float
    source: str
    #: physical cores per socket (CPU sockets only)
    cores_per_socket: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.idle_w <= self.full_w:
            raise ValueError(f"need 0 <= idle <= full W, got idle {self.idle_w}, full {self.full_w}")


#: GPU profiles of PWR (idle W from the cited measurements, full W = the data-sheet TDP).
GPU_PROFILES: dict[str, DevicePower] = {
    "T4": DevicePower(10, 70, f"{_PWR_CONST}; NVIDIA T4 data sheet (70 W TDP)"),
    "A10": DevicePower(30, 150, f"{_PWR_CONST}; NVIDIA A10 data sheet (150 W TDP)"),
    "P100": DevicePower(25, 250, f"{_PWR_CONST}; SC20 poster rpost131s2 (P100 idle/full)"),
    "V100": DevicePower(30, 300, f"{_PWR_CONST}; SC20 poster rpost131s2 (V100 idle/full)"),
    "A100": DevicePower(50, 400, f"{_PWR_CONST}; NVIDIA Ampere architecture white paper (A100 400 W)"),
}

#: openb GPU model -> the profile it is modelled as (docs/simulator-spec.md, Power: G2 as A10, G3 as A100)
OPENB_GPU_MODELS: dict[str, str] = {
    "T4": "T4", "A10": "A10", "G2": "A10", "P100": "P100", "V100M16": "V100", "V100M32": "V100",
    "G3": "A100", "A100": "A100", "V100": "V100",
}

#: CPU socket profiles of PWR's const.go (idle W, full W, cores per socket)
CPU_PROFILES: dict[str, DevicePower] = {
    "xeon-e5-2682-v4": DevicePower(15, 120, f"{_PWR_CONST} (Intel-Xeon-ES-2682-V4; the paper's CPU for every node)",
                                   cores_per_socket=16),
    "xeon-8269cy": DevicePower(20, 205, f"{_PWR_CONST} (Intel-Xeon-8269CY)", cores_per_socket=26),
    "xeon-8163": DevicePower(20, 165, f"{_PWR_CONST} (Intel-Xeon-8163)", cores_per_socket=24),
    "xeon-6326": DevicePower(20, 185, f"{_PWR_CONST} (Intel-Xeon-6326)", cores_per_socket=16),
    "xeon-8369b": DevicePower(20, 270, f"{_PWR_CONST} (Intel-Xeon-8369B)", cores_per_socket=32),
}
#: CPU models are not in the traces; the PWR paper assumes this one for every node
DEFAULT_CPU = "xeon-e5-2682-v4"


@dataclass(frozen=True)
class PowerModel:
    """Which profiles a cluster's nodes draw: GPU model name -> profile, one CPU profile for every node.

    ``fallback`` names the GPU profile of models not in ``gpu_models`` (e.g. the DLRM trace's
    anonymous ``GPU``); empty = such a model is an error.
    """

    cpu: DevicePower = CPU_PROFILES[DEFAULT_CPU]
    gpu_models: Mapping[str, str] = field(default_factory=lambda: dict(OPENB_GPU_MODELS))
    gpu_profiles: Mapping[str, DevicePower] = field(default_factory=lambda: dict(GPU_PROFILES))
    fallback: str = "A100"

    def gpu_profile(self, model: str) -> DevicePower:
        name = self.gpu_models.get(model, self.fallback)
        if not name or name not in self.gpu_profiles:
            raise KeyError(f"no power profile for GPU model {model!r}; known: {', '.join(sorted(self.gpu_models))}")
        return self.gpu_profiles[name]

    def gpu_watts(self, models: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(idle, full)`` W per entry of ``models`` (a cluster's model list); models without GPUs draw 0."""
        profiles = [self.gpu_profile(m) if m else DevicePower(0, 0, "no GPU") for m in models]
        return np.array([p.idle_w for p in profiles], dtype=float), np.array([p.full_w for p in profiles], dtype=float)


PWR_MODEL = PowerModel()


def _ceil_div(a: np.ndarray, b: int) -> np.ndarray:
    return -(-a // b)


def gpu_power_w(alloc_milli: np.ndarray, num_gpus: np.ndarray, idle_w: np.ndarray, full_w: np.ndarray,
                mode: PowerMode = "step") -> np.ndarray:
    """GPU power per node: ``alloc_milli`` ``(N, D)`` milli allocated per device (0 on padding devices),
    ``num_gpus`` ``(N,)`` devices, ``idle_w``/``full_w`` ``(N,)`` per-device draw of each node's model."""
    alloc_milli = np.asarray(alloc_milli)
    if mode == "step":
        busy = np.count_nonzero(alloc_milli, axis=1)
        return idle_w * (num_gpus - busy) + full_w * busy
    if mode == "linear":
        return idle_w * num_gpus + (full_w - idle_w) * (alloc_milli.sum(axis=1) / FULL_GPU_MILLI)
    raise ValueError(f"unknown power mode {mode!r}; use {' or '.join(POWER_MODES)}")


def cpu_power_w(capacity_milli: np.ndarray, free_milli: np.ndarray, cpu: DevicePower = PWR_MODEL.cpu,
                mode: PowerMode = "step") -> np.ndarray:
    """CPU power per node from capacity and free CPU in milli-vCPU (module docstring)."""
    milli_per_core = MILLI_PER_VCPU * VCPUS_PER_CORE
    cores = _ceil_div(np.asarray(capacity_milli, dtype=np.int64), milli_per_core)
    working = cores - np.asarray(free_milli, dtype=np.int64) // milli_per_core
    sockets = _ceil_div(cores, cpu.cores_per_socket)
    if mode == "step":
        active = _ceil_div(working, cpu.cores_per_socket)
        return cpu.idle_w * (sockets - active) + cpu.full_w * active
    if mode == "linear":
        return cpu.idle_w * sockets + (cpu.full_w - cpu.idle_w) * (working / cpu.cores_per_socket)
    raise ValueError(f"unknown power mode {mode!r}; use {' or '.join(POWER_MODES)}")


def node_power_w(cluster: Cluster, model: PowerModel = PWR_MODEL, mode: PowerMode = "step",
                 nodes: np.ndarray | slice = slice(None),
                 gpu_watts: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Power of ``nodes`` (all by default) of ``cluster``; 0 for absent node slots.

    ``gpu_watts``: ``model.gpu_watts(cluster.models)`` if already at hand.
    """
    idle, full = gpu_watts if gpu_watts is not None else model.gpu_watts(cluster.models)
    mid = cluster.model_id[nodes]
    gpu = gpu_power_w(cluster.gpu_alloc[nodes], cluster.num_gpus[nodes], idle[mid], full[mid], mode)
    cpu = cpu_power_w(cluster.capacity[nodes, CPU], cluster.free[nodes, CPU], model.cpu, mode)
    return np.where(cluster.present[nodes], gpu + cpu, 0.0)


def cluster_power_w(cluster: Cluster, model: PowerModel = PWR_MODEL, mode: PowerMode = "step") -> float:
    """Total modelled power of the present nodes, W."""
    return float(node_power_w(cluster, model, mode).sum())


class PowerMeter:
    """Per-node power of a cluster under both modes, refreshed only for the nodes changed since the last refresh.

    One event changes one node or a few: those are recomputed in plain Python (the same
    formulas as :func:`node_power_w`, checked equal in the tests), many at once vectorised.
    """

    #: above this many changed nodes, recompute vectorised
    VECTOR_FROM = 8

    def __init__(self, cluster: Cluster, model: PowerModel = PWR_MODEL) -> None:
        self.cluster = cluster
        self.model = model
        self._layout = -1
        self._mark = -1
        self.refresh()

    def refresh(self) -> tuple[float, float]:
        """``(step, linear)`` cluster power, W, after recomputing the nodes that changed."""
        c = self.cluster
        changed = c.changes_since(self._mark) if c.layout == self._layout else None
        self._mark = c.change_mark
        if changed is None:
            self._layout = c.layout
            self._watts = self.model.gpu_watts(c.models)
            self._idle, self._full = self._watts[0].tolist(), self._watts[1].tolist()
            self.step = node_power_w(c, self.model, "step", gpu_watts=self._watts)
            self.linear = node_power_w(c, self.model, "linear", gpu_watts=self._watts)
            self.step_total, self.linear_total = float(self.step.sum()), float(self.linear.sum())
        elif len(changed) > self.VECTOR_FROM:
            nodes = np.array(changed)
            step = node_power_w(c, self.model, "step", nodes, self._watts)
            linear = node_power_w(c, self.model, "linear", nodes, self._watts)
            self.step_total += float(step.sum() - self.step[nodes].sum())
            self.linear_total += float(linear.sum() - self.linear[nodes].sum())
            self.step[nodes], self.linear[nodes] = step, linear
        else:
            for node in changed:
                one_step, one_linear = self._one(node)
                self.step_total += one_step - self.step[node]
                self.linear_total += one_linear - self.linear[node]
                self.step[node], self.linear[node] = one_step, one_linear
        return self.step_total, self.linear_total

    def _one(self, node: int) -> tuple[float, float]:
        """``(step, linear)`` W of one node (scalar :func:`gpu_power_w` + :func:`cpu_power_w`)."""
        c = self.cluster
        if not c.present[node]:
            return 0.0, 0.0
        row = c.gpu_alloc[node].tolist()
        gpus, busy, milli = int(c.num_gpus[node]), len(row) - row.count(0), sum(row)
        m = int(c.model_id[node])
        idle, full = self._idle[m], self._full[m]
        cpu = self.model.cpu
        per_core = MILLI_PER_VCPU * VCPUS_PER_CORE
        cores = -(-int(c.capacity[node, CPU]) // per_core)
        working = cores - int(c.free[node, CPU]) // per_core
        sockets = -(-cores // cpu.cores_per_socket)
        active = -(-working // cpu.cores_per_socket)
        step = idle * (gpus - busy) + full * busy + cpu.idle_w * (sockets - active) + cpu.full_w * active
        linear = (idle * gpus + (full - idle) * (milli / FULL_GPU_MILLI)
                  + cpu.idle_w * sockets + (cpu.full_w - cpu.idle_w) * (working / cpu.cores_per_socket))
        return float(step), float(linear)


def energy_kwh(times_s: np.ndarray, power_w: np.ndarray, end_s: float | None = None) -> float:
    """Energy of a step series (``power_w[i]`` holds from ``times_s[i]`` to ``times_s[i+1]``), kWh.

    The last value holds until ``end_s`` (default: the last time, i.e. it adds nothing).
    """
    times_s, power_w = np.asarray(times_s, dtype=float), np.asarray(power_w, dtype=float)
    if len(times_s) == 0:
        return 0.0
    edges = np.append(times_s, times_s[-1] if end_s is None else max(end_s, times_s[-1]))
    return float(np.dot(np.diff(edges), power_w) / JOULES_PER_KWH)


def hourly_energy_kwh(times_s: np.ndarray, power_w: np.ndarray, hour0_s: float, hours: int,
                      end_s: float | None = None) -> np.ndarray:
    """Energy of a step series per hour ``h`` = ``[hour0_s + 3600 h, hour0_s + 3600 (h + 1))``, kWh, ``(hours,)``.

    The cumulative energy is piecewise linear in time, so evaluating it at the hour edges
    gives exact per-hour energies; time outside the series draws nothing.
    """
    times_s, power_w = np.asarray(times_s, dtype=float), np.asarray(power_w, dtype=float)
    if len(times_s) == 0:
        return np.zeros(hours)
    edges = np.append(times_s, times_s[-1] if end_s is None else max(end_s, times_s[-1]))
    cumulative = np.concatenate([[0.0], np.cumsum(np.diff(edges) * power_w)])  # J at each edge
    at = hour0_s + SECONDS_PER_HOUR * np.arange(hours + 1)
    return np.diff(np.interp(at, edges, cumulative)) / JOULES_PER_KWH


def carbon_kg(times_s: np.ndarray, power_w: np.ndarray, intensity_g_per_kwh: np.ndarray, hour0_s: float,
              end_s: float | None = None, pue: float = 1.0) -> float:
    """Emissions of a step power series under an hourly intensity series, kg CO2eq.

    Hour ``h`` of ``intensity_g_per_kwh`` (gCO2eq/kWh) covers ``[hour0_s + 3600 h, hour0_s + 3600 (h + 1))``
    in the series' time axis; ``pue`` scales IT energy to facility energy. The intensity
    series must cover the whole power series (:class:`ValueError` otherwise).
    """
    intensity = np.asarray(intensity_g_per_kwh, dtype=float)
    times_s = np.asarray(times_s, dtype=float)
    if len(times_s) == 0:
        return 0.0
    last = times_s[-1] if end_s is None else max(end_s, times_s[-1])
    if times_s[0] < hour0_s or last > hour0_s + SECONDS_PER_HOUR * len(intensity):
        raise ValueError(f"intensity series covers [{hour0_s}, {hour0_s + SECONDS_PER_HOUR * len(intensity)}] s; "
                         f"the power series spans [{times_s[0]}, {last}] s")
    per_hour = hourly_energy_kwh(times_s, power_w, hour0_s, len(intensity), end_s)
    return float(pue * np.dot(per_hour, intensity) / GRAMS_PER_KG)
