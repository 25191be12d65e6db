"""The work a replay's pods lose to GPU failures and migrations (:class:`WorkLedger`), per pod and
in total: a killed pod keeps its progress up to its last checkpoint (every ``checkpoint_min`` of
progress within a run, counted from the end of its restart overhead), a migrated one all of it
but holds its GPUs ``checkpoint_cost_min`` longer; a restarted run first reloads for
``restart_min`` (counted as lost). Lost GPU-hours = Σ GPUs × (work thrown away + restart
overheads + on-demand checkpoints); goodput = 1 − lost / allocated GPU-hours. Also the records of
every kill and migration, and the what-if of a migrated pod that had stayed (:func:`stay_kills`)."""

from __future__ import annotations

from typing import Iterable, NamedTuple

import numpy as np

from quasched.metrics.power import SECONDS_PER_HOUR
from quasched.model.workload import FULL_GPU_MILLI
from quasched.sim.failures import DeviceFailure


class Migration(NamedTuple):
    """A pod checkpointed at ``time`` and left ``devices`` of ``node``; where it was then
    (:meth:`WorkLedger.position`) and what its checkpoint took (0 at a periodic checkpoint)."""

    time: float
    uid: int
    node: int
    devices: tuple[int, ...]
    done_s: float
    left_s: float
    to_checkpoint_s: float
    since_s: float
    cost_s: float = 0.0

    def stay_loss(self, kill_after_s: float, checkpoint_s: float, restart_s: float) -> float:
        """Seconds per GPU it would have lost had it stayed and been killed ``kill_after_s`` later (inf: never)."""
        return (self.since_s + kill_after_s) % checkpoint_s + restart_s if np.isfinite(kill_after_s) else 0.0


class Kill(NamedTuple):
    """Pod ``uid`` was killed at ``time`` on ``node`` in a run started at ``run_start``; it lost ``lost_gpu_s``
    GPU-seconds (the work since its last checkpoint plus the reload to come)."""

    time: float
    uid: int
    node: int
    run_start: float
    lost_gpu_s: float


class WorkLedger:
    """Per pod: work left, the current run, interruptions; totals of lost and allocated GPU-seconds.

    ``work_s``: each pod's work in seconds (NaN = open-ended: it runs until the trace ends
    and keeps no work count); ``gpus``: GPU devices' worth it holds (0.5 for 500 milli).
    """

    def __init__(self, work_s: np.ndarray, gpus: np.ndarray, checkpoint_s: float, restart_s: float) -> None:
        self.work = np.asarray(work_s, dtype=float).copy()
        self.left = self.work.copy()
        self.gpus = np.asarray(gpus, dtype=float)
        self.checkpoint_s, self.restart_s = checkpoint_s, restart_s
        n = len(self.left)
        self.run_start, self.overhead = np.full(n, np.nan), np.zeros(n)
        self.killed_at = np.full(n, np.nan)
        self.restarting = np.zeros(n, dtype=bool)
        self.interruptions = np.zeros(n, dtype=np.int64)
        self.migrations = np.zeros(n, dtype=np.int64)
        self.moves: list[Migration] = []
        self.kills: list[Kill] = []
        self.requeue_waits: list[float] = []
        self.lost_gpu_s = self.alloc_gpu_s = 0.0
        #: the lost GPU-seconds by cause: work since the last checkpoint, restart overheads, on-demand checkpoints
        self.lost_by = {"work": 0.0, "reload": 0.0, "checkpoint": 0.0}
        #: ``(time, lost GPU-seconds)``: a restart's overhead when it starts, the rest of a stop's loss at the stop
        self.losses: list[tuple[float, float]] = []

    def begin(self, uid: int, t: float) -> float:
        """A run of ``uid`` starts at ``t``; returns its length (restart overhead + work left; NaN = open-ended)."""
        self.overhead[uid] = self.restart_s if self.restarting[uid] else 0.0
        self.restarting[uid] = False
        self.run_start[uid] = t
        self._lose(t, self.overhead[uid] * self.gpus[uid], "reload")
        if np.isfinite(self.killed_at[uid]):
            self.requeue_waits.append(t - self.killed_at[uid])
            self.killed_at[uid] = np.nan
        return self.overhead[uid] + self.left[uid]

    def end(self, uid: int, t: float) -> None:
        """The run finished: all but its restart overhead (lost when it started) was useful."""
        self.alloc_gpu_s += (t - self.run_start[uid]) * self.gpus[uid]

    def kill(self, uid: int, t: float, node: int = -1) -> float:
        """The run is killed at ``t`` on ``node`` (kept in :attr:`kills`): keep the progress up to the last
        checkpoint; returns the seconds lost."""
        self.interruptions[uid] += 1
        lost = self._stop(uid, t, periodic=True, extra_s=0.0)
        work_s = lost - self.overhead[uid] + self.restart_s
        self.kills.append(Kill(t, uid, node, float(self.run_start[uid]), float(work_s * self.gpus[uid])))
        return lost

    def migrate(self, uid: int, t: float, cost_s: float, node: int = -1, devices: tuple[int, ...] = ()) -> float:
        """The run checkpoints at ``t`` (taking ``cost_s`` more on its GPUs) and leaves ``devices`` of ``node``
        (kept in :attr:`moves`); returns the seconds lost."""
        self.migrations[uid] += 1
        self.moves.append(Migration(t, uid, node, devices, *self.position(uid, t), cost_s))
        return self._stop(uid, t, periodic=False, extra_s=cost_s)

    def position(self, uid: int, t: float) -> tuple[float, float, float, float]:
        """Where the running ``uid`` is at ``t``: seconds of work done and left (NaN: open-ended), seconds to
        its next periodic checkpoint and of progress since its last one."""
        ran = t - self.run_start[uid]
        progress = max(ran - self.overhead[uid], 0.0)
        since = progress % self.checkpoint_s
        to_next = (self.checkpoint_s - since) % self.checkpoint_s + max(self.overhead[uid] - ran, 0.0)
        done = self.work[uid] - self.left[uid] + progress
        return done, self.left[uid] - progress, to_next, since

    def _stop(self, uid: int, t: float, periodic: bool, extra_s: float) -> float:
        """Keep the progress up to the last (``periodic``) checkpoint or all of it; ``extra_s`` more is held, lost."""
        ran = t - self.run_start[uid]
        progress = max(ran - self.overhead[uid], 0.0)
        saved = np.floor(progress / self.checkpoint_s) * self.checkpoint_s if periodic else progress
        self.left[uid] -= saved
        self.alloc_gpu_s += (ran + extra_s) * self.gpus[uid]
        self._lose(t, extra_s * self.gpus[uid], "checkpoint")
        self._lose(t, (ran - saved - self.overhead[uid]) * self.gpus[uid], "work")  # < 0 if stopped while reloading
        self.restarting[uid] = True
        self.killed_at[uid] = t
        return ran + extra_s - saved

    def _lose(self, t: float, gpu_s: float, cause: str) -> None:
        if gpu_s != 0:
            self.lost_gpu_s += gpu_s
            self.lost_by[cause] += gpu_s
            self.losses.append((t, float(gpu_s)))

    def summary(self) -> dict[str, float | int]:
        """Interruptions, migrations, lost and allocated GPU-hours, goodput (%) and requeue waits (s)."""
        waits = np.asarray(self.requeue_waits)
        return {
            "interruptions": int(self.interruptions.sum()),
            "pods_interrupted": int(np.count_nonzero(self.interruptions)),
            "migrations": int(self.migrations.sum()),
            "lost_gpu_h": float(self.lost_gpu_s) / SECONDS_PER_HOUR,
            **{f"lost_{cause}_gpu_h": float(v) / SECONDS_PER_HOUR for cause, v in self.lost_by.items()},
            "alloc_gpu_h": float(self.alloc_gpu_s) / SECONDS_PER_HOUR,
            "goodput_pct": float(100 * (1 - self.lost_gpu_s / self.alloc_gpu_s)) if self.alloc_gpu_s else float("nan"),
            "requeue_wait_mean_s": float(waits.mean()) if len(waits) else float("nan"),
            "requeue_wait_max_s": float(waits.max()) if len(waits) else float("nan"),
        }


def stay_kills(moves: list[Migration], failures: Iterable[DeviceFailure]) -> np.ndarray:
    """Seconds after each migration at which a failure of one of its devices would have killed the pod had it
    stayed (a what-if on the same failures; inf: none before its work was done)."""
    if not moves:
        return np.zeros(0)
    ends = [m.time + m.left_s if np.isfinite(m.left_s) else np.inf for m in moves]  # open-ended: to the horizon
    horizon = max((e for e in ends if np.isfinite(e)), default=max(m.time for m in moves))
    times_of: dict[tuple[int, int], list[float]] = {}
    for f in failures:
        if f.time > horizon:
            break
        if not f.warning:
            times_of.setdefault((f.node, f.device), []).append(f.time)
    return np.array([min([t - m.time for d in m.devices for t in times_of.get((m.node, d), []) if m.time < t < end],
                          default=np.inf) for m, end in zip(moves, ends)])


def gpu_share(gpu_milli: np.ndarray, num_gpu: np.ndarray) -> np.ndarray:
    """GPU devices' worth of each pod: ``gpu_milli × num_gpu / 1000``."""
    return np.asarray(gpu_milli, dtype=float) * np.asarray(num_gpu) / FULL_GPU_MILLI
