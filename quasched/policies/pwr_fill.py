"""Scarce-GPU power with a smooth price: the switch of :mod:`quasched.policies.pwr_scarce` replaced by the expected fill.

``pwr_scarce`` charges a cheap model's shadow price ``λ_m`` only if the whole-GPU pods alone (share
``D`` of the typical pods' GPU demand) fill it within the horizon, an on/off switch: openb-default's
``D = 0.694`` is just above the T4s' threshold 0.678, so a mix with a few % fewer whole-GPU pods
loses the term. Here ``λ_m`` is scaled by the share of model ``m``'s idle GPUs that the whole-GPU
demand arriving within the horizon takes, cheapest model first::

    W   = D · horizon/100 · (capacity − allocated) / 1000       (whole GPUs arriving within the horizon)
    φ_m = clip((W − I_<m) / I_m, 0, 1)                           (I_m = 0: 1 if W > I_<m, else 0)
    λ_m = κ · max(0, s_ref − s_m) · φ_m

``I_m``: idle GPUs of model ``m``; ``I_<m``: those of the models of smaller swing. A model the
whole-GPU pods will fill is priced fully (on openb-default as before), one they fill partly by that
share, and without whole-GPU pods (gpushare100) not at all; cost and score as in ``pwr_scarce``.
"""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.workload import FULL_GPU_MILLI
from quasched.policies.pwr_scarce import ScarcePower


class FillPower(ScarcePower):
    """:class:`~quasched.policies.pwr_scarce.ScarcePower` with ``λ_m`` scaled by ``φ_m`` (module docstring)."""

    name = "pwr-fill"

    def gate(self, cluster: Cluster, reach: float) -> np.ndarray:
        idle_gpus = (cluster.gpu_free == FULL_GPU_MILLI).sum(axis=1) * cluster.present
        idle = np.bincount(cluster.model_id, idle_gpus, len(cluster.models))[self._order]
        whole = self.whole * self.horizon / 100 * (cluster.total_gpus - cluster.gpu_allocated / FULL_GPU_MILLI)
        ahead = whole - (np.cumsum(idle) - idle)
        phi = np.empty(len(idle))
        phi[self._order] = np.clip(np.divide(ahead, idle, out=(ahead > 0).astype(float), where=idle > 0), 0.0, 1.0)
        return phi
