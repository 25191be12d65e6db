"""The displacement price of :mod:`.carbon_defer`: the carbon a job's run is expected to displace from jobs not yet arrived.

The rule of :mod:`.carbon_aware` prices a crowded green slot by ``price × gap × u ** power``, a stand-in for the jobs
not yet arrived; this term prices them from the past arrivals. For each slot ``k`` of a
candidate run on cluster ``c``, the load expected to arrive between now and ``k`` and still run then is
a divisible load shared greenest first among the room the ledger leaves in the clusters (the fluid LP of
:mod:`.fluid` on one slot: a water-filling). The job pays what its use ``q_j`` of ``c`` adds to that
load's carbon, averaged over load samples ``s``::

    added rate[c, k] = mean_s (F_s(room − q_j on c) − F_s(room)) / kw[j, c]
    F_s(room)  = min  sum_c z_c P_s[c] I[c, k] + (1 − sum_c z_c) max_c P_s[c] I[c, k]       (g/h)
                 s.t. 0 <= z_c <= min_r room[r, c, k] / D_s[r],  sum_c z_c <= 1

(an overflow runs on the dirtiest cluster). Sample ``s`` is one of the past ``memory`` whole hours; the
jobs that arrived in it, arriving at that rate over ``(now, now + L]``, ``L`` = end of slot ``k`` − now,
leave ``D_s[r] = sum_i q[r, i] min(d_i, L) / 1 h`` of resource ``r`` and ``P_s[c] = sum_i kw[i, c]
min(d_i, L) / 1 h`` of power on ``c`` running at ``k`` (flexible jobs weigh ``flexible``). The difference
``F_s(room − q_j) − F_s(room)`` is the LP's capacity duals integrated over ``q_j``: zero while the
expected load fits the cleaner clusters, the gap to the marginal cluster once it does not; the spread
of the hourly samples smooths it. ``I`` is the rule's (observed hour, then the forecast), and so is the
ledger. The term has no constant but ``memory`` and ``flexible``; the rule's own price is kept beside it.
The difference is computed only where it can be non-zero (some sample exceeds some cluster's room after the
job), once per set of alike slots: the same result, less CPU.
"""

from __future__ import annotations

import numpy as np

from quasched.federation.carbon_aware import kernels
from quasched.federation.dispatch import SLOT_S, SLOTS_PER_HOUR, View
from quasched.metrics.power import SECONDS_PER_HOUR as HOUR

#: the farthest the expected load looks ahead, in slots (later slots use it)
LEAD_SLOTS = 48 * SLOTS_PER_HOUR


class Displacement:
    """The expected displaced carbon of a run (module docstring) over ``view``; ``top``: the plan's ceiling
    ``(2, clusters)``, ``fill`` × capacity."""

    def __init__(self, view: View, top: np.ndarray, memory: int = 24, flexible: float = 0.0) -> None:
        self.view, self.top, self.memory, self.flexible = view, top, memory, flexible
        self.lead_h = np.arange(LEAD_SLOTS + 1) * SLOT_S / HOUR
        self.samples = np.zeros((memory + 1, 2 + view.clusters, LEAD_SLOTS + 1))  # ring: demand (2), power
        self.sample_hour = np.full(memory + 1, np.iinfo(np.int64).min // 2)  # none yet
        self.cached = -1

    def record(self, job: int, now: float) -> None:
        """Adds arriving ``job`` to the sample of the current hour (module docstring)."""
        v, hour = self.view, int(now // HOUR)
        weight = self.flexible if v.latest_start[job] > now else 1.0
        i = hour % len(self.sample_hour)
        if self.sample_hour[i] != hour:
            self.samples[i], self.sample_hour[i] = 0.0, hour
        if weight > 0:
            run = weight * np.minimum(v.duration[job] / HOUR, self.lead_h)
            self.samples[i] += np.concatenate([v.demand[:, job], v.kw[job]])[:, None] * run

    def add(self, rate: np.ndarray, job: int, now: float, index: np.ndarray, ledger: np.ndarray,
            expected: np.ndarray) -> np.ndarray:
        """``rate`` (``(clusters, slots)`` of ``index``) plus the term, from the ``ledger`` of those slots and the
        intensity ``expected`` there."""
        hour = int(now // HOUR)
        past, most = self.past(hour)
        if not len(past):
            return rate
        found = kernels().busy_slots(ledger, self.view.demand[:, job], self.top, most,
                                     kernels().leads(index, now, LEAD_SLOTS), expected, past)
        busy, alike, room, after, sample, priced = found  # runs of alike busy slots (e.g. far ahead) priced once
        if not len(busy):  # elsewhere every sample fits any cluster
            return rate
        displaced = kernels().displaced_each(sample, room, after, priced).sum(axis=1)
        return kernels().with_displaced(rate, displaced, busy, alike, min(hour, self.memory), self.view.kw[job])

    def past(self, hour: int) -> tuple[np.ndarray, np.ndarray]:
        """The samples of the whole hours of the past ``memory`` before ``hour`` and, per resource and time ahead, their
        largest demand (cached for the hour: those samples no longer change)."""
        if self.cached != hour:
            valid = (self.sample_hour >= hour - self.memory) & (self.sample_hour < hour)
            self.cached, self.past_samples = hour, self.samples[valid]
            self.most = self.past_samples[:, :2].max(axis=0) if valid.any() else np.zeros((2, LEAD_SLOTS + 1))
        return self.past_samples, self.most
