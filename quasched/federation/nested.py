"""Nested bookings (``ours-nested``): an inflexible job may take the room that a deferred job has only booked.

The rule books every decision in its ledger, also the runs of flexible jobs deferred to a green slot hours ahead.
Such a booking is a plan, not a use: the job has not started and can still start elsewhere or later (it has slack).
Yet an inflexible job arriving meanwhile (no slack: it starts now or misses its deadline) reads those bookings as full
and goes to a dirtier cluster, for its whole run. Of ``ours-redecide-hourly``'s carbon gap to the oracle on the development
sets, almost all was inflexible jobs sent elsewhere than the oracle sent them because their clean cluster was full then (BENCHMARKS.md,
"Where the remaining gap is").

As in nested booking limits of revenue management, the high fare may take the low fare's booked seat: an inflexible
job's options read only the *held* ledger, the runs of jobs already released (running, queued, or started at once),
so the room a deferred booking holds is open to it::

    held = ledger − sum over deferred, unreleased bookings b of run(b)

A deferred job whose room an inflexible one took finds, at its release, no node that holds it and, while it has slack,
is decided again from then (:mod:`.redecide`, at most once per clock hour, always at its last release before its latest
start: :class:`~.held.HourlyRedecideHeld`); a booking at its latest start has none left and queues there, as any. Flexible jobs read the whole ledger, as before. No constant.
"""

from __future__ import annotations

import numpy as np

from quasched.federation.carbon_aware import add_run
from quasched.federation.dispatch import Decision, View
from quasched.federation.held import HourlyRedecideHeld

#: the share of its distance to the dirtiest cluster by which a cleaner cluster's cap sits lower (:class:`CappedNested`)
TIE_BREAK = 1e-9


class NestedBookings(HourlyRedecideHeld):
    """``ours-redecide-hourly`` whose inflexible jobs read only the held ledger (module docstring)."""

    name = "ours-nested"

    def reset(self, view: View) -> None:
        super().reset(view)
        self.held = np.zeros_like(self.ledger)  # the ledger's runs of released jobs

    def ledger_for(self, job: int, now: float) -> np.ndarray:
        return self.held if self.view.latest_start[job] <= now else self.ledger

    def release(self, job: int, now: float, cluster: int) -> Decision:
        pick = super().release(job, now, cluster)
        if pick.start <= now:  # released now: its booking (its last one, from now on ``pick.cluster``) is held
            add_run(self.held, self.view, job, pick)
        return pick


class NestedUnprotected(NestedBookings):
    """``ours-nested`` without the protection levels (``protect=0``): with nested bookings and re-decisions, the
    protection price no longer lowered carbon on the development sets (BENCHMARKS.md, session 11)."""

    name = "ours-nested-unprotected"

    def __init__(self, **rule: float) -> None:
        if "protect" in rule:
            raise ValueError("ours-nested-unprotected has no protection to set; use ours-nested:protect=0 or 1")
        super().__init__(protect=0, **rule)


class CappedNested(NestedBookings):
    """``ours-nested`` whose priced rate never exceeds the dirtiest cluster's expected intensity::

        rate[c, k] = min(rule's rate[c, k], W[k] − 1e-9 × (W[k] − I[c, k]))    W[k] = max_c I[c, k]

    The crowding price, the displacement and the protection charges each stand for carbon that a run's use of a clean
    slot makes *other* jobs pay elsewhere; at worst those jobs run on the dirtiest cluster, so a unit of the run can
    never cost more than that cluster's intensity. Uncapped, a job that fills a clean cluster alone (an 8-GPU, 49-hour
    inflexible run on an 8-GPU cluster, ``fresh12 synthetic`` seed 121) was priced above the dirtiest cluster and sent
    there, for its whole run. At the cap a cleaner cluster's own intensity is certain and the rest only a bound, so it
    sits a hair (``1e-9`` of its distance to ``W``) below: among options at the cap the cleaner wins, not the lower
    cluster index. No constant beyond that tie-break."""

    name = "ours-capped"

    def rate(self, job: int, now: float, index: np.ndarray, ledger: np.ndarray) -> np.ndarray:
        expected = self.priced(now, index)[0]
        worst = expected.max(axis=0)
        return np.minimum(super().rate(job, now, index, ledger), worst - TIE_BREAK * (worst - expected))
