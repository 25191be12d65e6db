"""The offline intensity file (:mod:`quasched.traces.carbon`, Electricity Maps 2023, ODbL) as a signal."""

from __future__ import annotations

import numpy as np

from quasched.signals.base import HOUR_S, Reading, hour_of
from quasched.traces.carbon import CarbonIntensity


class FileSignal:
    """``series`` (e.g. ``load_carbon(zone)``) as a :class:`~quasched.signals.base.Signal`: any ``now`` maps onto the
    file's year as :meth:`~quasched.traces.carbon.CarbonIntensity.hours_from` does (hours since its first, wrapping),
    so a virtual clock replays what the simulation reads. Its readings carry the file's ODbL attribution."""

    def __init__(self, series: CarbonIntensity) -> None:
        self.series, self.zone = series, series.zone

    def hourly(self, now: float, hours: int) -> Reading:
        return self._reading(hour_of(now), hours)

    def history(self, now: float, hours: int) -> Reading:
        return self._reading(hour_of(now) - hours * HOUR_S, hours)

    def _reading(self, first: int, hours: int) -> Reading:
        values = self.series.hours_from(np.datetime64(first, "s"), hours)
        return Reading(self.zone, first, values, None, self.series.source)
