"""The protection price of :mod:`.carbon_defer`: Littlewood's rule for clean room.

Inflexible jobs (no slack) are the high fare for a clean cluster's room, flexible ones the low fare: they
could wait or go elsewhere. A flexible job ``j`` that takes room of cluster ``c`` in slot ``k`` is charged
the expected carbon of the inflexible jobs it turns away to a dirtier cluster::

    rate[c, k] += (g / q_j) × gap[c, k] × sum_{i < m} P(D_L ≥ R[c, k] − i),   m = ceil(q_j / g)
    D_L ~ Poisson(mu(L)),   mu(L) = sum_a exp(−(now − t_a) / tau) min(d_a, L) / tau

``D_L``: the inflexible GPU jobs that arrive in ``(now, now + L]`` and still run at slot ``k`` (``L`` = end
of ``k`` − now), their rate exponentially smoothed over the past inflexible arrivals ``a`` that asked for GPUs
(time ``t_a``, duration ``d_a``; never the future); ``g`` their mean GPU milli, weighted alike, so ``g`` is at
least the smallest GPU request seen and the ``m`` terms of the sum stay bounded (jobs without GPUs take no GPU
room and are not counted: with them ``g`` could shrink towards 0 and ``m`` grow without bound). ``R[c, k]``: the room
for such jobs, ``floor(free GPU / g)``, summed over ``c`` and the clusters greener than ``c`` in slot ``k``
(they fill greenest first); ``gap``: the intensity of the next dirtier cluster minus ``c``'s (0 on the
dirtiest), where the marginal one goes. A displaced job is taken to draw the power per GPU of ``j``, hence
the factor ``g / q_j`` per kW of ``j``. Intensities and room are those of the rule (forecast, ledger).
Inflexible jobs, and jobs without GPUs, pay no protection. One constant, ``tau`` (hours); ``carbon-defer:protect=false``
turns the protection off.
"""

from __future__ import annotations

import numpy as np

from quasched.federation.carbon_aware import kernels
from quasched.federation.dispatch import SLOT_S, View
from quasched.federation.displacement import LEAD_SLOTS
from quasched.metrics.power import SECONDS_PER_HOUR as HOUR
from quasched.model.odds import at_least


class Protection:
    """The protection price (module docstring) over ``view``; ``top``: the plan's GPU ceiling per cluster, ``tau`` in
    hours."""

    def __init__(self, view: View, top: np.ndarray, tau: float = 24.0) -> None:
        self.view, self.top, self.tau = view, top, tau * HOUR
        self.lead_s = np.arange(LEAD_SLOTS + 1) * SLOT_S
        self.jobs = np.zeros(LEAD_SLOTS + 1)  # sum_a w_a min(d_a, L) / tau, w_a = exp(−(t0 − t_a) / tau)
        self.gpu = np.zeros(LEAD_SLOTS + 1)  # the same, × GPU milli of a
        self.since = 0.0  # t0: the time the sums are discounted to

    def record(self, job: int, now: float) -> None:
        """Discounts the sums to ``now`` and adds arriving ``job`` if it is inflexible and takes GPU room."""
        decay = np.exp(-(now - self.since) / self.tau)
        self.jobs *= decay
        self.gpu *= decay
        self.since = now
        v = self.view
        if v.latest_start[job] <= now and v.demand[0, job] > 0:
            run = np.minimum(v.duration[job], self.lead_s) / self.tau
            self.jobs += run
            self.gpu += run * v.demand[0, job]

    def add(self, rate: np.ndarray, job: int, now: float, index: np.ndarray, intensity: np.ndarray,
            used: np.ndarray) -> np.ndarray:
        """``rate`` (``(clusters, slots)`` of ``index``) plus the charge of ``job`` (none for an inflexible one or one
        without GPUs), from the ``intensity`` expected there and the GPU ledger ``used`` of those slots."""
        q = float(self.view.demand[0, job])
        if self.view.latest_start[job] <= now or q <= 0:
            return rate
        ahead = kernels().leads(index, now, LEAD_SLOTS)
        return rate + charge(self.top, q, self.jobs[ahead], self.gpu[ahead], intensity, used)


def charge(top: np.ndarray, q: float, mu: np.ndarray, load: np.ndarray, intensity: np.ndarray,
           used: np.ndarray) -> np.ndarray:
    """``(clusters, slots)``: the added rate of a flexible job of ``q`` GPU milli (module docstring), from the GPU
    ceiling ``top`` per cluster, the expected inflexible jobs ``mu`` and their GPU milli ``load`` per slot,
    ``intensity`` and the GPU ledger ``used``."""
    g, live, order, room, gap = kernels().protection_terms(load, mu, top, used, intensity)
    if not live.any():
        return np.zeros(intensity.shape)
    units = int(np.ceil(q / g[live].min()))
    steps = np.arange(units)[:, None, None]
    needed = np.ceil(q / g)  # m per slot
    odds = np.where(steps < needed, at_least(room - steps, mu), 0.0).sum(axis=0)
    return kernels().protection_charge(odds, gap, g, q, order, live)
