"""Ours with node-level EASY while the queue head can still meet its deadline, and a throttle once it cannot
(``ours-displace-throttle``).

:mod:`.shadow` (EASY at node level) keeps the head's start, but on the full DLRM year most heads were already late
when passed, and the misses fell on the jobs behind them; the slack-based guard of :mod:`.backfill` worked because a
late head blocks every pass. This guard is the two combined. With ``h`` the head of cluster ``c``'s queue, a job ``j``
(started now, ending ``now + d_j``) may go ahead of ``c``'s queue iff::

    c's queue is empty   or   j = h   or   ( latest_start[h] >= now   and   may_pass(c, h, reservation of h, j, now + d_j) )

(:func:`~.shadow.may_pass`, :func:`~.shadow.reservation`). The same test gates the dispatcher's backfills
(:class:`~.backfill.Backfilling`) and the cluster's own queue retry after departures (:meth:`queue_gate`): a queued
job behind the head starts only if it may pass the head, so a late head is followed strictly (FIFO) until it starts.
In the retry a fit class whose front job is refused waits for the next retry, as one that does not fit. Releases of
deferred jobs and the rule's fallbacks are not gated (as in :mod:`.shadow`). No constant is added.
"""

from __future__ import annotations

from typing import Callable

from quasched.federation.backfill import BackfillDisplacement
from quasched.federation.shadow import ShadowGuard
from quasched.model.workload import Pod


class ThrottleGuard(ShadowGuard):
    """Node-level EASY for a head on time, no passing of a late head, in passes and queue retries (module docstring);
    ``retry=0`` leaves the queue retry ungated (a diagnostic)."""

    def __init__(self, retry: float = 1, **params: float) -> None:
        super().__init__(**params)  # type: ignore[arg-type]  # the next class: DisplacementPriced (memory, ...)
        self.gated = bool(retry)

    def admits(self, c: int, job: int, now: float) -> bool:
        head = int(self.view.head[c])
        if head < 0 or head == job:
            return True
        return bool(self.view.latest_start[head] >= now) and super().admits(c, job, now)

    def queue_gate(self, cluster: int, now: float) -> Callable[[Pod], bool] | None:
        return (lambda pod: self.admits(cluster, pod.uid, now)) if self.gated else None


class ThrottleDisplacement(ThrottleGuard, BackfillDisplacement):
    name = "ours-displace-throttle"
