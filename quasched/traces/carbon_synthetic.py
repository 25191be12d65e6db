"""Seeded synthetic hourly carbon intensity, for tests and for regions without data.

Hour ``h`` (UTC, local hour ``l = h + utc_offset``, day of year ``d``)::

    I(h) = max(0, mean * (1 + seasonal * cos(2 pi (d - seasonal_peak_day) / 365))
                       * (1 + daily * cos(2 pi (l - daily_peak_hour) / 24)) + e(h))
    e(h) = rho * e(h - 1) + mean * noise * sqrt(1 - rho^2) * z(h),   z ~ N(0, 1), e(0) ~ N(0, (mean * noise)^2)

so the noise is a stationary AR(1) with standard deviation ``noise * mean`` and lag-one
autocorrelation ``rho``. :func:`shape_of` estimates the parameters from a real series (e.g. to
give a region without hourly data the shape of a comparable zone, scaled to its annual mean).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from quasched.traces.carbon import CarbonIntensity

HOURS_PER_YEAR = 8760


@dataclass(frozen=True)
class IntensityShape:
    """Parameters of :func:`synthetic_intensity` (intensities in gCO2eq/kWh, amplitudes as fractions)."""

    mean: float = 400.0
    daily: float = 0.15
    daily_peak_hour: float = 19.0
    seasonal: float = 0.1
    seasonal_peak_day: float = 15.0
    noise: float = 0.08
    rho: float = 0.95
    utc_offset: float = 0.0

    def __post_init__(self) -> None:
        if self.mean < 0 or not 0 <= self.daily <= 1 or not 0 <= self.seasonal <= 1 or self.noise < 0:
            raise ValueError(f"need mean >= 0, 0 <= daily, seasonal <= 1 and noise >= 0; got {self}")
        if not -1 < self.rho < 1:
            raise ValueError(f"rho must be in (-1, 1) for a stationary noise; got {self.rho}")


def synthetic_intensity(shape: IntensityShape, seed: int, hours: int = HOURS_PER_YEAR,
                        start: str | np.datetime64 = "2023-01-01T00", zone: str = "SYNTHETIC") -> CarbonIntensity:
    """``hours`` hourly values from ``start`` (UTC): same shape and seed, same series."""
    first = np.datetime64(str(start), "h")
    when = first + np.arange(hours)
    day = (when - when.astype("datetime64[Y]")).astype("timedelta64[h]").astype(float) / 24
    local = (when.astype(np.int64) + shape.utc_offset) % 24
    base = (shape.mean * (1 + shape.seasonal * np.cos(2 * np.pi * (day - shape.seasonal_peak_day) / 365))
            * (1 + shape.daily * np.cos(2 * np.pi * (local - shape.daily_peak_hour) / 24)))
    z = np.random.default_rng(seed).standard_normal(hours)
    sd = shape.mean * shape.noise
    noise = np.empty(hours)
    if hours:
        noise[0] = sd * z[0]
    step = sd * np.sqrt(1 - shape.rho ** 2)
    for h in range(1, hours):  # AR(1): a recurrence, 8,760 steps a year
        noise[h] = shape.rho * noise[h - 1] + step * z[h]
    return CarbonIntensity(zone, first, np.maximum(base + noise, 0.0), np.ones(hours, dtype=bool),
                           source=f"synthetic ({shape}, seed {seed}); not measured data")


def shape_of(series: CarbonIntensity, utc_offset: float = 0.0) -> IntensityShape:
    """Moment estimates of the parameters from a real hourly series (first harmonic of the hour-of-day
    and day-of-year means, lag-one autocorrelation of the rest)."""
    values = np.asarray(series.g_per_kwh, dtype=float)
    when = series.start + np.arange(len(values)).astype("timedelta64[h]")
    mean = float(values.mean())
    local = (when.astype(np.int64) + utc_offset) % 24
    day = (when - when.astype("datetime64[Y]")).astype("timedelta64[D]").astype(float)

    def harmonic(phase: np.ndarray, period: float) -> tuple[float, float]:
        angle = 2 * np.pi * phase / period
        c, s = 2 * np.mean(values * np.cos(angle)) / mean, 2 * np.mean(values * np.sin(angle)) / mean
        return float(np.hypot(c, s)), float(np.arctan2(s, c) * period / (2 * np.pi) % period)

    daily, peak_hour = harmonic(local, 24)
    seasonal, peak_day = harmonic(day, 365)
    fitted = synthetic_intensity(IntensityShape(mean, min(daily, 1), peak_hour, min(seasonal, 1), peak_day,
                                                0.0, 0.0, utc_offset), 0, len(values), series.start)
    rest = values - fitted.g_per_kwh
    rho = float(np.corrcoef(rest[:-1], rest[1:])[0, 1]) if len(rest) > 2 and rest.std() > 0 else 0.0
    return IntensityShape(mean, min(daily, 1), peak_hour, min(seasonal, 1), peak_day,
                          float(rest.std() / mean) if mean else 0.0, float(np.clip(rho, -0.999, 0.999)), utc_offset)
