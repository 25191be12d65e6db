"""Ours with protection levels (``ours-protect``): ``ours-displace`` plus Littlewood's rule for clean room.

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
Inflexible jobs, and jobs without GPUs, pay no protection. One constant, ``tau`` (hours); ``protect=0`` turns the
protection off (the rules built on this one without it: BENCHMARKS.md, session 11).
"""

from __future__ import annotations

import numpy as np

from quasched.federation.carbon_aware import kernels
from quasched.federation.dispatch import SLOT_S, Decision, View
from quasched.federation.displacement import LEAD_SLOTS, DisplacementPriced
from quasched.metrics.power import SECONDS_PER_HOUR as HOUR
from quasched.model.odds import at_least


class ProtectionPriced(DisplacementPriced):
    """``ours-displace`` plus the expected carbon of the inflexible jobs a flexible one turns away (module docstring)."""

    name = "ours-protect"
    #: the odds ``P(D_L ≥ r)`` per unit of room ``r`` left (module docstring)
    odds = staticmethod(at_least)

    def __init__(self, tau: float = 24.0, protect: float = 1, **rule: float) -> None:
        super().__init__(**rule)
        if tau <= 0 or protect not in (0, 1):
            raise ValueError(f"need tau > 0 (hours) and protect 0 or 1; got {tau}, {protect}")
        self.tau, self.protect = tau * HOUR, bool(protect)

    def reset(self, view: View) -> None:
        super().reset(view)
        self.lead_s = np.arange(LEAD_SLOTS + 1) * SLOT_S
        self.jobs = np.zeros(LEAD_SLOTS + 1)  # sum_a w_a min(d_a, L) / tau, w_a = exp(−(t0 − t_a) / tau)
        self.gpu = np.zeros(LEAD_SLOTS + 1)  # the same, × GPU milli of a
        self.since = 0.0  # t0: the time the sums are discounted to

    def dispatch(self, job: int, now: float) -> Decision:
        decay = np.exp(-(now - self.since) / self.tau)
        self.jobs *= decay
        self.gpu *= decay
        self.since = now
        v = self.view
        if v.latest_start[job] <= now and v.demand[0, job] > 0:  # an inflexible arrival that takes GPU room
            run = np.minimum(v.duration[job], self.lead_s) / self.tau
            self.jobs += run
            self.gpu += run * v.demand[0, job]
        return super().dispatch(job, now)

    def rate(self, job: int, now: float, index: np.ndarray, ledger: np.ndarray) -> np.ndarray:
        rate = super().rate(job, now, index, ledger)
        q = float(self.view.demand[0, job])
        if not self.protect or self.view.latest_start[job] <= now or q <= 0:
            return rate
        lead = kernels().leads(index, now, LEAD_SLOTS)
        return rate + self.protection(q, self.jobs[lead], self.gpu[lead], self.priced(now, index)[0], ledger[0])

    def protection(self, q: float, mu: np.ndarray, load: np.ndarray, intensity: np.ndarray,
                   used: np.ndarray) -> np.ndarray:
        """``(clusters, slots)``: the added rate of a flexible job of ``q`` GPU milli (module docstring), from the
        expected inflexible jobs ``mu`` and their GPU milli ``load`` per slot, ``intensity`` and the GPU ledger ``used``."""
        g, live, order, room, gap = kernels().protection_terms(load, mu, self.top[0, :, 0], used, intensity)
        if not live.any():
            return np.zeros(intensity.shape)
        units = int(np.ceil(q / g[live].min()))
        steps = np.arange(units)[:, None, None]
        needed = np.ceil(q / g)  # m per slot
        odds = np.where(steps < needed, self.odds(room - steps, mu), 0.0).sum(axis=0)
        return kernels().protection_charge(odds, gap, g, q, order, live)
