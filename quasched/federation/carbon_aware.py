"""Ours: carbon-, fragmentation- and queue-aware dispatch that defers flexible jobs within their slack.

Candidates are ``(cluster c, start s)`` with ``s`` = now or an hour boundary up to the job's
latest start (arrival + slack; inflexible jobs: now only). Each is scored by the job's dynamic
carbon ``kw[j, c] * integral of intensity_c * PUE_c over [s, s + d]`` times ``1 + delay * (s - now) / 1 h``
(a small price on waiting, so a job is not deferred for a negligible gain).

Feasible candidates keep a plan within reach of the real cluster: a ledger holds, per cluster
and hour, the mean GPU and CPU milli that already dispatched jobs will use (their planned runs);
a candidate is feasible if the ledger plus this job stays under ``fill`` × capacity in every
hour of its run (``fill < 1`` leaves the room fragmentation takes: a cluster's scheduler cannot
fill every last GPU), and, for a start now, if nobody waits in that cluster's queue. The
cheapest feasible candidate wins (ties: earliest, then cluster order); with none, the job goes
at once to the least-loaded cluster. The chosen run is added to the ledger.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from quasched.federation.dispatch import Decision, Dispatcher, View
from quasched.metrics.power import SECONDS_PER_HOUR


def candidate_starts(now: float, latest: float) -> np.ndarray:
    """``now``, then every hour boundary up to ``latest``."""
    hours = np.arange(np.floor(now / SECONDS_PER_HOUR) + 1, np.floor(max(now, latest) / SECONDS_PER_HOUR) + 1)
    return np.concatenate([[now], hours[hours * SECONDS_PER_HOUR <= latest] * SECONDS_PER_HOUR])


def occupancy(start: float, duration: float) -> tuple[int, np.ndarray]:
    """First hour of ``[start, start + duration)`` and the share of each hour from it that the run covers
    (at least one entry)."""
    first = int(start // SECONDS_PER_HOUR)
    last = max(first + 1, int(np.ceil((start + duration) / SECONDS_PER_HOUR)))
    edges = np.arange(first, last + 1) * SECONDS_PER_HOUR
    covered = np.minimum(edges[1:], start + duration) - np.maximum(edges[:-1], start)
    return first, np.clip(covered, 0, None) / SECONDS_PER_HOUR


class CarbonAware(Dispatcher):
    name = "carbon-aware"

    def __init__(self, fill: float = 1.0, defer_fill: float = 0.6, delay: float = 0.002) -> None:
        if not 0 < defer_fill <= fill <= 1 or delay < 0:
            raise ValueError(f"need 0 < defer_fill <= fill <= 1 and delay >= 0; got {fill}, {defer_fill}, {delay}")
        self.fill, self.defer_fill, self.delay = fill, defer_fill, delay

    def reset(self, view: View) -> None:
        super().reset(view)
        self.ledger = np.zeros((2, view.clusters, view.intensity.shape[1] + 1))

    def peaks(self, now: float, duration: float, count: int) -> np.ndarray:
        """``(2, clusters, count)``: the ledger's largest hourly use over the hours each candidate covers
        (candidate 0 starts at ``now``, candidate ``k`` at the ``k``-th next hour boundary)."""
        hours = self.ledger.shape[2]
        first, share = occupancy(now, duration)
        out = np.empty(self.ledger.shape[:2] + (count,))
        out[:, :, 0] = self.ledger[:, :, min(first, hours - 1):min(first + len(share), hours)].max(axis=2)
        if count > 1:
            span = max(1, int(np.ceil(duration / SECONDS_PER_HOUR)))
            window = self.ledger[:, :, min(first + 1, hours):first + count + span - 1]
            window = np.pad(window, ((0, 0), (0, 0), (0, count + span - 2 - window.shape[2])))
            out[:, :, 1:] = sliding_window_view(window, span, axis=2).max(axis=3)[:, :, :count - 1]
        return out

    def dispatch(self, job: int, now: float) -> Decision:
        v = self.view
        hours = self.ledger.shape[2]
        starts = candidate_starts(now, float(v.latest_start[job]))
        clusters = np.arange(v.clusters)[:, None]
        cost = v.run_grams(np.full((v.clusters, len(starts)), job), clusters, starts[None, :])
        cost *= 1 + self.delay * (starts - now) / SECONDS_PER_HOUR
        peak = self.peaks(now, float(v.duration[job]), len(starts))
        limit = np.where(np.arange(len(starts)) == 0, self.fill, self.defer_fill)
        room = np.all(peak + v.demand[:, job, None, None] <= limit * v.capacity[:, :, None] + 1e-9, axis=0)
        room[:, 0] &= (v.queued == 0) & (v.load_after(job) <= 1)
        if not room.any():
            pick = Decision(int(np.argmin(v.load_after(job))), now)
        else:
            c, s = np.unravel_index(np.argmin(np.where(room, cost, np.inf).T), (len(starts), v.clusters))[::-1]
            pick = Decision(int(c), float(starts[s]))
        hour, share = occupancy(pick.start, float(v.duration[job]))
        stop = min(hour + len(share), hours)
        if hour < hours:
            self.ledger[:, pick.cluster, hour:stop] += v.demand[:, job, None] * share[:stop - hour]
        return pick
