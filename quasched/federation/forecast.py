"""What an online dispatcher may know of future carbon intensity: a forecast from past hours only.

At hour ``h`` the dispatcher has observed every hour up to and including ``h`` (real-time data, as the
hourly greedy uses), starting :data:`HISTORY_H` hours before ``t = 0``. For a later hour ``t`` it
predicts, per cluster, the daily profile of the last week plus today's departure from it, fading as
an AR(1) (persistence blended into seasonal-naive)::

    f(t) = P[t mod 24] + (I(h) − P[h mod 24]) · ρ^(t − h)        (f(h) = I(h), the observed value)
    P[k] = mean of I over the hours of [h − 167, h] with hour-of-day k
    ρ    = Σ e(u) e(u − 1) / Σ e(u − 1)², clipped to [0, 0.99],  e = I − P over the same week

Every quantity is estimated from that cluster's own past week: nothing is fitted per zone offline.
"""

from __future__ import annotations

import numpy as np

#: hours of observed history behind every forecast (one week)
HISTORY_H = 168
DAY_H = 24


class Forecast:
    """Forecasts over ``observed`` (``(clusters, hours)`` from ``t = 0``) with ``history`` the
    ``(clusters, HISTORY_H)`` hours before it; :meth:`at` reads only hours ``<= h``."""

    def __init__(self, history: np.ndarray, observed: np.ndarray) -> None:
        if history.shape != (observed.shape[0], HISTORY_H):
            raise ValueError(f"history needs shape ({observed.shape[0]}, {HISTORY_H}); got {history.shape}")
        self.series = np.hstack([history, observed])
        self.hour = -1

    @classmethod
    def over(cls, series: np.ndarray) -> Forecast:
        """Forecasts over ``series`` (``(clusters, HISTORY_H + hours)``: the history, then the observed hours) read in
        place, not copied: a live front writes each hour into it as it is observed."""
        forecast = cls(series[:, :HISTORY_H], series[:, HISTORY_H:HISTORY_H])
        forecast.series = series
        return forecast

    def _fit(self, hour: int) -> None:
        """Profile, today's departure and ρ from the week up to ``hour``."""
        week = self.series[:, hour + 1:hour + 1 + HISTORY_H]  # absolute hours hour − 167 .. hour
        of_day = (np.arange(hour - HISTORY_H + 1, hour + 1)) % DAY_H
        profile = week.reshape(len(week), -1, DAY_H).mean(axis=1)  # column i = hour of day of_day[i]
        self.profile = np.empty_like(profile)
        self.profile[:, of_day[:DAY_H]] = profile
        e = week - self.profile[:, of_day]
        lag = (e[:, 1:] * e[:, :-1]).sum(axis=1) / np.maximum((e[:, :-1] ** 2).sum(axis=1), 1e-12)
        self.rho = np.clip(lag, 0.0, 0.99)
        self.departure = e[:, -1]
        self.hour = hour

    def at(self, hour: int, hours: np.ndarray) -> np.ndarray:
        """``(clusters, len(hours))`` forecast made at ``hour`` for ``hours`` (``>= hour``)."""
        if hour != self.hour:
            self._fit(hour)
        ahead = np.asarray(hours) - hour
        return self.profile[:, np.asarray(hours) % DAY_H] + self.departure[:, None] * self.rho[:, None] ** ahead
