"""PWR: power-aware placement (Lettich et al., CCGrid 2025; ``docs/simulator-spec.md``, Power).

A placement scores ``P(before) − P(after)`` on its node, i.e. minus the modelled power it
adds (:mod:`quasched.metrics.power`; 0 when the pod lands on GPUs and CPU sockets that are
already powered), truncated to whole watts, then min-max normalised over the cycle's
feasible nodes into 0..100 (all equal: 100), as the PWR artifact's ``pwr_score.go``.

The added power is exact for the devices the pod gets:

- whole-GPU (and multi-GPU) pods take the lowest-index devices with enough free milli
  (:func:`quasched.policies.devices.exclusive`); under the step model each of them that
  was idle adds its swing ``full − idle``;
- a GPU-sharing pod is scored on its best device: an already busy device that fits adds
  nothing, else the first idle one adds its swing. The plugin returns the node's best score
  (not per-device columns), so in a mix with FGD the node score is ``w_pwr · PWR + w_fgd ·
  FGD(best device)`` and FGD picks the device, as in the artifact's mixes (``-gpusel FGD``);
  alone, the policy's "tightest" Reserve rule takes a busy fitting device when there is one,
  which adds no power, else that first idle one;
- under the linear model a pod adds ``(full − idle) · num_gpu · gpu_milli / 1000``
  wherever it goes, so only the CPU term and the GPU model differ between nodes.

A device's swing under the step model is its measured one where the cluster knows it
(:attr:`~quasched.model.cluster.Cluster.measured_swing_w`: the service sets it from the
GPUs' live state to the enforced power limit minus the draw, at least 0, of the last fresh
reading taken while no pod held the device, and a stale reading forgets it), else its GPU
model's ``full − idle``: two GPUs of one model differ by what they were measured to draw.
The linear model and the scarce-GPU terms (:mod:`.pwr_scarce`), which price GPU models
against each other, keep the models' swings; the simulators measure nothing, so their
placements are the model's.

``until`` (percent, default 100 = always on): once the cluster's allocated GPU milli reaches
``until`` % of its GPU capacity the plugin scores every node alike (it stops steering), so a
composition can save power while the cluster has room and leave the last placements, which
decide how full the cluster gets, to its fragmentation terms (``power``).
``terms`` counts only the GPUs' (``gpu``) or only the CPU sockets' (``cpu``) power.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from quasched.metrics.power import PWR_MODEL, PowerMode, PowerModel, cpu_power_w
from quasched.model.cluster import Cluster
from quasched.model.random import RandomStream
from quasched.model.resources import CPU
from quasched.model.workload import FULL_GPU_MILLI, Pod
from quasched.policies.base import CycleState, ScorePlugin

#: which power the score counts: GPUs and CPU sockets, or one of them
Terms = Literal["all", "gpu", "cpu"]


def added_power_w(cluster: Cluster, pod: Pod, nodes: np.ndarray, gpu_idle_w: np.ndarray, gpu_full_w: np.ndarray,
                  model: PowerModel = PWR_MODEL, mode: PowerMode = "step", terms: Terms = "all") -> np.ndarray:
    """Power ``pod`` adds on each of the feasible ``nodes``, W (GPU devices as in the module docstring).

    ``gpu_idle_w``/``gpu_full_w``: per-device draw per entry of ``cluster.models``; ``terms``:
    the GPUs' and the CPU sockets' power (``all``), or one of them.
    """
    added = np.zeros(len(nodes))
    if terms != "gpu":
        cap, free = cluster.capacity[nodes, CPU], cluster.free[nodes, CPU]
        added += cpu_power_w(cap, free - pod.cpu_milli, model.cpu, mode) - cpu_power_w(cap, free, model.cpu, mode)
    if not pod.is_gpu or terms == "cpu":
        return added
    mid = cluster.model_id[nodes]
    swing = gpu_full_w[mid] - gpu_idle_w[mid]
    if mode == "linear":
        return added + swing * (pod.gpu_request / FULL_GPU_MILLI)
    gpu_free = cluster.gpu_free[nodes]
    idle = gpu_free == FULL_GPU_MILLI
    devices = device_swing_w(cluster, nodes, swing) if cluster.measured_devices else None
    if pod.is_sharing:
        busy_fits = ((gpu_free >= pod.gpu_milli) & ~idle).any(axis=1)
        if devices is not None:
            swing = devices[np.arange(len(nodes)), idle.argmax(axis=1)]  # the first idle device's
        return added + np.where(busy_fits, 0.0, swing)
    need = min(pod.gpu_milli, FULL_GPU_MILLI)
    fits = gpu_free >= need
    woken = fits & (np.cumsum(fits, axis=1) <= pod.num_gpu) & idle  # the idle devices it takes
    if devices is not None:
        return added + (devices * woken).sum(axis=1)
    return added + swing * np.count_nonzero(woken, axis=1)


def device_swing_w(cluster: Cluster, nodes: np.ndarray, swing: np.ndarray) -> np.ndarray:
    """``(len(nodes), D)``: each device's idle→full swing, W, measured where known, else ``swing`` (its node's GPU
    model's; module docstring)."""
    measured = cluster.measured_swing_w[nodes]
    return np.where(np.isnan(measured), swing[:, None], measured)


@dataclass(repr=False, eq=False)
class PWR(ScorePlugin):
    """Minus the power a placement adds, min-max normalised per cycle (module docstring)."""

    name = "pwr"
    mode: PowerMode = "step"
    model: PowerModel = PWR_MODEL
    until: float = 100.0
    terms: Terms = "all"

    def attach(self, cluster: Cluster, rng: RandomStream) -> None:
        super().attach(cluster, rng)
        self._layout = -1

    def steering(self, cluster: Cluster) -> bool:
        """False from ``until`` % allocated on (then every node scores alike); refreshes the per-model
        watts when the cluster's layout changed (:meth:`refresh`)."""
        if cluster.layout != self._layout:  # GPU models may have changed
            self._layout = cluster.layout
            self.refresh(cluster)
        return self.until >= 100 or cluster.gpu_allocated < self._stop_milli

    def refresh(self, cluster: Cluster) -> None:
        """Per-model idle and full watts and the ``until`` threshold of ``cluster``'s layout."""
        self._idle, self._full = self.model.gpu_watts(cluster.models)
        self._stop_milli = self.until / 100 * FULL_GPU_MILLI * cluster.total_gpus

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        if not self.steering(cluster):
            return np.zeros(len(nodes), dtype=np.int64)
        added = added_power_w(cluster, pod, nodes, self._idle, self._full, self.model, self.mode, self.terms)
        return np.trunc(-added).astype(np.int64)

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        if len(scores) == 0:
            return scores
        hi, lo = scores.max(), scores.min()
        if hi == lo:
            return np.full_like(scores, 100)
        return ((scores - lo) * 100) // (hi - lo)

    def __repr__(self) -> str:
        return f"PWR(mode={self.mode!r}, until={self.until:g}, terms={self.terms!r})"
