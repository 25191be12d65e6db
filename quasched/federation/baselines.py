"""The four baseline dispatchers: every job starts at once (no deferral).

``proportional``: smooth weighted round robin, weights = GPU capacity (CPU where no GPUs),
so cluster ``c`` gets ``w_c / sum(w)`` of the jobs in every window of ``sum(w)`` picks (among the
clusters where the job is placeable).
``least-loaded``: the cluster minimising ``max_r (used + waiting + request)_r / capacity_r``.
``greenest``: static order by mean intensity × PUE over the week before ``t = 0`` (observed, not
forecast); first cluster where the job fits now with nobody waiting, else the least loaded.
``greedy``: the same with the order of the current hour's intensity × PUE.
"""

from __future__ import annotations

import numpy as np

from quasched.federation.dispatch import Decision, Dispatcher, View
from quasched.metrics.power import SECONDS_PER_HOUR


class Proportional(Dispatcher):
    name = "proportional"

    def reset(self, view: View) -> None:
        super().reset(view)
        gpu, cpu = view.capacity
        weight = gpu if gpu.sum() > 0 else cpu
        self.weight = weight / max(float(weight.sum()), 1.0)
        self.credit = np.zeros(view.clusters)

    def dispatch(self, job: int, now: float) -> Decision:
        self.credit += self.weight
        ok = self.view.placeable[job]
        pick = int(np.argmax(np.where(ok, self.credit, -np.inf) if ok.any() else self.credit))
        self.credit[pick] -= 1.0
        return Decision(pick, now)


class LeastLoaded(Dispatcher):
    name = "least-loaded"

    def dispatch(self, job: int, now: float) -> Decision:
        return Decision(int(np.argmin(self.view.load_after(job))), now)


class GreenestFirst(Dispatcher):
    name = "greenest"

    def reset(self, view: View) -> None:
        super().reset(view)
        self.order = np.argsort(view.history.mean(axis=1), kind="stable")

    def dispatch(self, job: int, now: float) -> Decision:
        return Decision(self.first_with_room(job, self.order), now)


class HourlyGreedy(Dispatcher):
    name = "greedy"

    def dispatch(self, job: int, now: float) -> Decision:
        hour = min(int(now // SECONDS_PER_HOUR), self.view.intensity.shape[1] - 1)
        return Decision(self.first_with_room(job, np.argsort(self.view.intensity[:, hour], kind="stable")), now)
