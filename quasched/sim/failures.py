"""GPU failures for the replay: a seeded failure process, device repairs and the work jobs lose.

Rate. Llama 3's pre-training (Meta, 2024, §3.3.4) saw 419 unexpected interruptions in 54 days
on 16,384 H100s, i.e. 16,384 × 54 × 24 = 21.23 M GPU-hours: 419 / 21.23 M = 1.97e-5 per
GPU-hour. 58.7 % of them were GPU-related (faulty GPUs, HBM3, ...): 246 / 21.23 M = 1.16e-5.
The default ``rate = 2e-5`` is the first figure: the 0.587 share is *not* folded in, every
unexpected interruption (host, network and software ones kill the job too) is modelled as
the failure of one GPU device.

Heterogeneity. Failures are not uniform: both Meta and Alibaba report that a few hosts fail
again and again. A share ``flaky_share`` of the nodes (drawn once per ``seed``) fails
``flaky_factor`` times as often as the others; the base rate is scaled so that the mean over
all GPUs is still ``rate``. Without this (``flaky_share=0``) no placement can change a job's
failure odds, and a health-aware policy cannot save anything.

Process. Each GPU device fails as a Poisson process at its rate, independently of what runs
on it, drawn in ``chunk_days`` windows from the trace start with ``default_rng([seed, 1, k])``
for window ``k``; so the failures of a seed are the same for every policy (common random
numbers) and do not depend on how long a replay runs. A failure is transient (share
``transient_share``: the device is back after ``reset_min`` minutes) or fatal (back after an
exponential repair time of mean ``repair_h`` hours); a failure drawn while the device is
still down is dropped. Health is applied through :meth:`Cluster.set_device_health`: an
unhealthy device takes no pod (Filter) until it is back.

Jobs (:class:`WorkLedger`). A pod on a failed device is killed and loses the work since its
last checkpoint (every ``checkpoint_min`` minutes of progress within a run, counted from the
end of its restart overhead); it re-enters the scheduler at once and, when placed, runs for
``restart_min`` (reloading, counted as lost) plus the work left. Lost GPU-hours = Σ GPUs ×
(work thrown away + restart overheads); goodput = 1 − lost / allocated GPU-hours.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple

import numpy as np

from quasched.metrics.power import SECONDS_PER_HOUR
from quasched.model.workload import FULL_GPU_MILLI


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

    def __post_init__(self) -> None:
        for name in ("rate", "reset_min", "repair_h", "restart_min"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"failure option {name}={getattr(self, name)} must be at least 0")
        for name in ("checkpoint_min", "chunk_days"):
            if not getattr(self, name) > 0:
                raise ValueError(f"failure option {name}={getattr(self, name)} must be positive")
        for name in ("transient_share", "flaky_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"failure option {name}={getattr(self, name)} must be within 0..1")
        if self.flaky_factor < 1:
            raise ValueError(f"failure option flaky_factor={self.flaky_factor} must be at least 1")


class DeviceFailure(NamedTuple):
    """Device ``device`` of node ``node`` fails at ``time`` and is down for ``down_s`` seconds."""

    time: float
    node: int
    device: int
    fatal: bool
    down_s: float


def device_rates(config: FailureConfig, num_gpus: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Failure rate per GPU-second of every device (node-major order) and the flaky-node mask."""
    flaky = np.random.default_rng([config.seed, 0]).random(len(num_gpus)) < config.flaky_share
    weight = np.repeat(np.where(flaky, config.flaky_factor, 1.0), num_gpus)
    scale = config.rate / SECONDS_PER_HOUR * len(weight) / max(weight.sum(), 1.0)
    return weight * scale, flaky


def failure_stream(config: FailureConfig, num_gpus: np.ndarray, start: float) -> Iterator[DeviceFailure]:
    """Every device's failures from ``start`` on, in time order (endless; module docstring)."""
    rates, _ = device_rates(config, num_gpus)
    if not rates.sum() > 0:
        return
    node_of = np.repeat(np.arange(len(num_gpus)), num_gpus)
    device_of = np.arange(len(node_of)) - np.repeat(np.cumsum(num_gpus) - num_gpus, num_gpus)
    window = config.chunk_days * 24 * SECONDS_PER_HOUR
    for k in range(np.iinfo(np.int64).max):
        rng = np.random.default_rng([config.seed, 1, k])
        dev = np.repeat(np.arange(len(rates)), rng.poisson(rates * window))
        times = start + k * window + rng.uniform(0, window, len(dev))
        fatal = rng.random(len(dev)) >= config.transient_share
        down = np.where(fatal, rng.exponential(config.repair_h * SECONDS_PER_HOUR, len(dev)), config.reset_min * 60)
        for i in np.argsort(times, kind="stable").tolist():
            yield DeviceFailure(float(times[i]), int(node_of[dev[i]]), int(device_of[dev[i]]), bool(fatal[i]),
                                float(down[i]))


class DeviceFaults:
    """Failures and recoveries of devices in time order (a recovery first on equal times)."""

    def __init__(self, failures: Iterable[DeviceFailure]) -> None:
        self._failures = iter(failures)
        self._next = next(self._failures, None)
        self._back: list[tuple[float, int, int]] = []
        self.down: set[tuple[int, int]] = set()
        self.failed = 0

    @property
    def recovering(self) -> bool:
        return bool(self._back)

    def next_time(self, failures: bool = True) -> float:
        """Time of the next event; ``failures=False``: of the next recovery only."""
        back = self._back[0][0] if self._back else np.inf
        return min(back, self._next.time) if failures and self._next is not None else back

    def pop(self, failures: bool = True) -> tuple[float, int, int, bool] | None:
        """The next event ``(time, node, device, failed)``; None for a failure that is dropped
        (its device is already down, or ``failures=False``: only recoveries are wanted)."""
        nxt = self._next
        if nxt is not None and (not self._back or nxt.time < self._back[0][0]):
            self._next = next(self._failures, None)
            if not failures or (nxt.node, nxt.device) in self.down:
                return None
            self.down.add((nxt.node, nxt.device))
            heapq.heappush(self._back, (nxt.time + nxt.down_s, nxt.node, nxt.device))
            self.failed += 1
            return nxt.time, nxt.node, nxt.device, True
        t, node, device = heapq.heappop(self._back)
        self.down.discard((node, device))
        return t, node, device, False


class WorkLedger:
    """Per pod: work left, the current run, interruptions; totals of lost and allocated GPU-seconds.

    ``work_s``: each pod's work in seconds (NaN = open-ended: it runs until the trace ends
    and keeps no work count); ``gpus``: GPU devices' worth it holds (0.5 for 500 milli).
    """

    def __init__(self, work_s: np.ndarray, gpus: np.ndarray, checkpoint_s: float, restart_s: float) -> None:
        self.left = np.asarray(work_s, dtype=float).copy()
        self.gpus = np.asarray(gpus, dtype=float)
        self.checkpoint_s, self.restart_s = checkpoint_s, restart_s
        n = len(self.left)
        self.run_start, self.overhead = np.full(n, np.nan), np.zeros(n)
        self.killed_at = np.full(n, np.nan)
        self.interruptions = np.zeros(n, dtype=np.int64)
        self.requeue_waits: list[float] = []
        self.lost_gpu_s = self.alloc_gpu_s = 0.0
        #: ``(time, lost GPU-seconds)``: a restart's overhead when it starts, the rest of a kill's loss at the kill
        self.losses: list[tuple[float, float]] = []

    def begin(self, uid: int, t: float) -> float:
        """A run of ``uid`` starts at ``t``; returns its length (restart overhead + work left; NaN = open-ended)."""
        self.overhead[uid] = self.restart_s if self.interruptions[uid] else 0.0
        self.run_start[uid] = t
        self._lose(t, self.overhead[uid] * self.gpus[uid])
        if np.isfinite(self.killed_at[uid]):
            self.requeue_waits.append(t - self.killed_at[uid])
            self.killed_at[uid] = np.nan
        return self.overhead[uid] + self.left[uid]

    def end(self, uid: int, t: float) -> None:
        """The run finished: all but its restart overhead (lost when it started) was useful."""
        self.alloc_gpu_s += (t - self.run_start[uid]) * self.gpus[uid]

    def kill(self, uid: int, t: float) -> float:
        """The run is killed at ``t``: keep the progress up to the last checkpoint; returns the seconds lost."""
        ran = t - self.run_start[uid]
        progress = max(ran - self.overhead[uid], 0.0)
        saved = np.floor(progress / self.checkpoint_s) * self.checkpoint_s
        self.left[uid] -= saved
        self.alloc_gpu_s += ran * self.gpus[uid]
        self._lose(t, (ran - saved - self.overhead[uid]) * self.gpus[uid])  # < 0 if killed while reloading
        self.interruptions[uid] += 1
        self.killed_at[uid] = t
        return ran - saved

    def _lose(self, t: float, gpu_s: float) -> None:
        if gpu_s != 0:
            self.lost_gpu_s += gpu_s
            self.losses.append((t, float(gpu_s)))

    def summary(self) -> dict[str, float | int]:
        """Interruptions, lost and allocated GPU-hours, goodput (%) and requeue waits (s)."""
        waits = np.asarray(self.requeue_waits)
        return {
            "interruptions": int(self.interruptions.sum()),
            "pods_interrupted": int(np.count_nonzero(self.interruptions)),
            "lost_gpu_h": float(self.lost_gpu_s) / SECONDS_PER_HOUR,
            "alloc_gpu_h": float(self.alloc_gpu_s) / SECONDS_PER_HOUR,
            "goodput_pct": float(100 * (1 - self.lost_gpu_s / self.alloc_gpu_s)) if self.alloc_gpu_s else float("nan"),
            "requeue_wait_mean_s": float(waits.mean()) if len(waits) else float("nan"),
            "requeue_wait_max_s": float(waits.max()) if len(waits) else float("nan"),
        }


def gpu_share(gpu_milli: np.ndarray, num_gpu: np.ndarray) -> np.ndarray:
    """GPU devices' worth of each pod: ``gpu_milli × num_gpu / 1000``."""
    return np.asarray(gpu_milli, dtype=float) * np.asarray(num_gpu) / FULL_GPU_MILLI
