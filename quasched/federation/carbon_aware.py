"""The carbon-aware rule (``carbon-aware``): defers flexible jobs within their slack to forecast-green slots, crowding
priced; :mod:`.carbon_defer` builds on it.

Candidates are ``(cluster c, start s)`` with ``s`` = now or a 15-minute slot boundary up to the job's
latest start (arrival + slack; inflexible jobs: now only). Each costs the job's dynamic power
``kw[j, c]`` × the integral over its run of a *priced* intensity, × ``1 + delay × (s − now) / 1 h``
(a small price on waiting, so a job is not deferred for a negligible gain)::

    rate[c, k] = I[c, k] + price × gap[c, k] × min(1, u[c, k]) ** power
    gap[c, k]  = max(0, ref[k] − I[c, k])        ref = mean + toward × (max − mean) over clusters of I[., k]

``I[c, k]`` is intensity × PUE of slot ``k``'s hour *as known at dispatch*: the observed value for
the current hour, the :class:`~.forecast.Forecast` (past week's daily profile + today's departure,
fading) for later hours; never the future itself (``perfect=true`` reads the true series instead, to
measure what forecasting costs).

``u[c, k]`` is the larger of the GPU and CPU share of cluster ``c`` that a ledger plans for slot
``k`` once this job is added: the mean use of the runs already dispatched (planned start to planned
end). The price is an online primal-dual estimate of the carbon a later job pays when a green hour
is full and it has to go elsewhere: zero on an empty cluster, up to the gap to an average cluster
on a full one. Without it, flexible jobs crowd the green hours and push inflexible ones to dirty
zones (measured in BENCHMARKS.md).

Feasible candidates keep the ledger within ``fill`` × capacity in every slot of the run (room
for fragmentation when ``fill < 1``); a start now also needs the job to fit the cluster's current
aggregate free capacity with nobody waiting in its queue (the cluster's own scheduler then packs
it, e.g. FGD); a cluster where no node could ever hold the job is never a candidate. The cheapest
feasible candidate wins (ties: earliest, then cluster order); with none, the job starts now on the
cheapest cluster where it fits with nobody waiting, else on the least-loaded one. The chosen run is
added to the ledger.
"""

from __future__ import annotations

from functools import cache
from types import ModuleType

import numpy as np

from quasched.federation.dispatch import SLOT_S, SLOTS_PER_HOUR, Decision, Dispatcher, View
from quasched.federation.forecast import Forecast
from quasched.metrics.power import SECONDS_PER_HOUR


@cache
def kernels() -> ModuleType:
    """The compiled per-slot kernels (:mod:`.slot_kernel`), imported on first use: numba loads only when a run needs it."""
    from quasched.federation import slot_kernel

    return slot_kernel


def candidate_starts(now: float, latest: float) -> np.ndarray:
    """``now``, then every slot boundary up to ``latest``."""
    return kernels().boundaries(now, latest, SLOT_S)


def occupancy(start: float, duration: float) -> tuple[int, np.ndarray]:
    """First slot of ``[start, start + duration)`` and the share of each slot from it that the run
    covers (at least one entry)."""
    first, last = span(start, start + duration)
    return first, kernels().covered(first, last, start, start + duration, SLOT_S)


def span(start: float, end: float) -> tuple[int, int]:
    """The first slot of the run ``[start, end)`` and the one after its last (at least one slot)."""
    first = int(start // SLOT_S)
    return first, max(first + 1, int(np.ceil(end / SLOT_S)))


class CarbonAware(Dispatcher):
    """The rule of the module docstring; its parameters are checked by the registry (:mod:`.registry`)."""

    name = "carbon-aware"

    def __init__(self, price: float = 2.0, power: float = 8.0, fill: float = 1.0, delay: float = 0.002,
                 toward: float = 0.5, perfect: bool = False) -> None:
        self.price, self.power, self.fill, self.delay, self.toward = price, power, fill, delay, toward
        self.perfect = perfect

    def reset(self, view: View) -> None:
        super().reset(view)
        self.ledger = np.zeros((2, view.clusters, view.slots))
        self.forecast = Forecast.over(view.series)
        self.priced_key: tuple[int, int] = (-1, -1)  # (hour of now, first slot) of priced_slots: expected, gap
        self.priced_slots: tuple[np.ndarray, np.ndarray] = (np.zeros((view.clusters, 0)),) * 2
        self.capacity = np.where(view.capacity > 0, view.capacity, np.inf)[:, :, None]
        self.top = self.fill * self.capacity  # the plan's ceiling
        self.limit = self.top + 1e-9  # a ledger above it is full

    def expected(self, now: float, hours: np.ndarray) -> np.ndarray:
        """``(clusters, len(hours))`` intensity × PUE of ``hours`` as known at ``now`` (module docstring)."""
        hour = min(int(now // SECONDS_PER_HOUR), self.view.intensity.shape[1] - 1)
        if self.perfect:
            return self.view.intensity[:, np.minimum(hours, self.view.intensity.shape[1] - 1)]
        return self.forecast.at(hour, np.maximum(hours, hour))

    def priced(self, now: float, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per slot of ``index`` (ascending): the intensity expected at ``now`` (module docstring) and its gap. Both are
        elementwise per hour, so they are kept per slot for the hour of ``now`` from the hour of ``index[0]`` on, as far as
        a run has asked (doubled when a run asks for more); a run of consecutive slots reads a view of them."""
        first = int(index[0]) - int(index[0]) % SLOTS_PER_HOUR
        key = (int(now // SECONDS_PER_HOUR), first)
        kept = self.priced_slots[0].shape[1] // SLOTS_PER_HOUR if key == self.priced_key else 0  # hours
        if index[-1] >= first + kept * SLOTS_PER_HOUR:
            start = first // SLOTS_PER_HOUR
            expected = self.expected(now, np.arange(start, max(int(index[-1]) // SLOTS_PER_HOUR + 1, start + 2 * kept)))
            mean, worst = expected.mean(axis=0), expected.max(axis=0)
            gap = np.clip(mean + self.toward * (worst - mean) - expected, 0, None)
            self.priced_key = key
            self.priced_slots = np.repeat(expected, SLOTS_PER_HOUR, axis=1), np.repeat(gap, SLOTS_PER_HOUR, axis=1)
        expected, gap = self.priced_slots
        at = int(index[0]) - first
        if index[-1] - index[0] == len(index) - 1:
            return expected[:, at:at + len(index)], gap[:, at:at + len(index)]
        return expected[:, index - first], gap[:, index - first]

    def rate(self, job: int, now: float, index: np.ndarray, ledger: np.ndarray) -> np.ndarray:
        """``(clusters, len(index))`` priced intensity of ``job``'s run in the slots ``index`` (module docstring);
        ``ledger``: the planned use of those slots, without the job."""
        return self.crowded(job, *self.priced(now, index), ledger)

    def crowded(self, job: int, expected: np.ndarray, gap: np.ndarray, ledger: np.ndarray) -> np.ndarray:
        """The rate from the intensity ``expected`` and its ``gap``: ``I + price × gap × min(1, u) ** power`` (module
        docstring)."""
        after = kernels().load_share(ledger, self.view.demand[:, job], self.capacity[:, :, 0])  # min(1, u)
        scale = np.power(after, self.power, out=np.zeros_like(after), where=gap > 0)  # the rest is multiplied by 0
        return kernels().crowded(expected, gap, scale, self.price)

    def dispatch(self, job: int, now: float) -> Decision:
        return self.book(job, self.choose(job, now, *self.options(job, now)))

    def options(self, job: int, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The candidate starts of ``job``, their ``(clusters, starts)`` costs and which the plan rules out (the
        ledger's room, placeability; module docstring)."""
        v = self.view
        booked = self.ledger_for(job, now)
        slots = booked.shape[2]
        duration = float(v.duration[job])
        starts = candidate_starts(now, float(v.latest_start[job]))
        first, share_now = occupancy(now, duration)
        share = occupancy(0.0, duration)[1]  # a slot-aligned start
        index = np.minimum(first + np.arange(max(len(share_now), len(starts) - 1 + len(share)) + 1), slots - 1)
        stop = first + len(index)
        ledger = booked[:, :, first:stop] if index[-1] == stop - 1 else booked[:, :, index]  # consecutive: a view
        rate = self.rate(job, now, index, ledger)
        cost = np.empty((v.clusters, len(starts)))
        cost[:, 0] = rate[:, :len(share_now)] @ share_now  # BLAS sums in its own order: these stay in NumPy
        if len(starts) == 2:
            cost[:, 1:] = rate[:, None, 1:1 + len(share)] @ share
        blocked = kernels().plan(ledger, v.demand[:, job], self.limit[:, :, 0], rate, len(share_now), share, starts,
                                 now, v.kw[job], self.delay, v.placeable[job], cost)
        return starts, cost, blocked

    def ledger_for(self, job: int, now: float) -> np.ndarray:
        """The ledger whose room and prices ``job``'s options at ``now`` read (here: every booking; :mod:`.carbon_defer`
        gives inflexible jobs only the released ones)."""
        return self.ledger

    def choose(self, job: int, now: float, starts: np.ndarray, cost: np.ndarray, planned: np.ndarray) -> Decision:
        """The cheapest feasible candidate of :meth:`options` (``planned``: those the plan rules out; a start now
        also needs room now and an empty queue), else the fallback (module docstring)."""
        load, fits, blocked = self.open_now(job, planned)
        return fallback(now, cost, fits, load) if blocked.all() else cheapest(starts, cost, blocked)

    def open_now(self, job: int, planned: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per cluster the share used after ``job`` (:meth:`View.load_after`) and whether it may start there now (room
        in its aggregate free capacity, nobody waiting in its queue); and ``planned`` with the starts now it may not
        take blocked too (a copy)."""
        load = self.view.load_after(job)
        fits = (load <= 1) & (self.view.queued == 0)
        blocked = planned.copy()
        blocked[:, 0] |= ~fits
        return load, fits, blocked

    def book(self, job: int, pick: Decision) -> Decision:
        """Adds ``job``'s run from ``pick`` to the ledger; returns ``pick``."""
        add_run(self.ledger, self.view, job, pick)
        return pick


def cheapest(starts: np.ndarray, cost: np.ndarray, blocked: np.ndarray) -> Decision:
    """The cheapest ``(cluster, start)`` not ``blocked`` (ties: the earliest start, then cluster order)."""
    c, s = kernels().cheapest(cost, blocked)
    return Decision(c, float(starts[s]))


def fallback(now: float, cost: np.ndarray, fits: np.ndarray, load: np.ndarray) -> Decision:
    """No room in the plan: now, on the cheapest cluster where the job ``fits`` now, else on the least loaded."""
    return Decision(int(np.argmin(np.where(fits, cost[:, 0], np.inf)) if fits.any() else np.argmin(load)), now)


def add_run(ledger: np.ndarray, view: View, job: int, pick: Decision, sign: float = 1.0) -> None:
    """Adds (``sign`` -1: removes) ``job``'s run from ``pick`` to a ``(2, clusters, slots)`` ledger of mean use per slot."""
    end = pick.start + float(view.duration[job])
    first, last = span(pick.start, end)
    kernels().add_run(ledger, pick.cluster, first, min(last, ledger.shape[2]), pick.start, end, view.demand[:, job], sign)
