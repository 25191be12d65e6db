"""The signals' vocabulary: a :class:`Reading` of hourly intensity, the :class:`Signal` that gives one, the hourly
:class:`Series` a provider's answer becomes, the errors, and UTC times as epoch seconds."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol, Sequence

import numpy as np

HOUR_S = 3600


def hour_of(t: float) -> int:
    """Epoch seconds of the start of the UTC hour holding ``t``."""
    return int(t // HOUR_S) * HOUR_S


def epoch(text: str) -> float:
    """An ISO 8601 time (``Z`` or an offset; none means UTC) as epoch seconds."""
    when = datetime.fromisoformat(text)
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def iso(t: float) -> str:
    """Epoch seconds as an ISO 8601 UTC time, e.g. ``2024-05-01T12:00:00Z``."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class SignalError(Exception):
    """A signal cannot be given; the message says why in one line."""


class Unavailable(SignalError):
    """A provider's answer is missing or unusable (unreachable, refused, rate limited, malformed, old)."""


class NoSignal(SignalError):
    """A live signal has had no good answer yet and has no fallback: the caller decides."""


class MissingCredential(SignalError):
    """A provider's credential is in neither its environment variable nor the file that variable's ``_FILE`` names."""


@dataclass(frozen=True)
class Reading:
    """One zone's hourly intensity, gCO2eq/kWh: value ``k`` covers the UTC hour from ``start + 3600 k`` (epoch s).
    ``issued``: when the provider issued the data (epoch s; None if unknown, as for the offline file); ``source``: the
    attribution to print beside any result computed from it; ``stale``: the current answer failed and an earlier one
    (or a fallback signal) serves instead, as ``warning`` says."""

    zone: str
    start: int
    g_per_kwh: np.ndarray
    issued: float | None
    source: str
    stale: bool = False
    warning: str | None = None


class Signal(Protocol):
    """Hourly intensity of one zone as seen at ``now`` (epoch seconds, a wall or a virtual clock)."""

    zone: str

    def hourly(self, now: float, hours: int) -> Reading:
        """``hours`` values from the hour holding ``now``; past what the source knows, its last value continues."""
        ...

    def history(self, now: float, hours: int) -> Reading:
        """The ``hours`` hourly values before the hour holding ``now``."""
        ...


@dataclass(frozen=True)
class Series:
    """A provider's points averaged into UTC hours: ``hours`` (epoch s of each hour's start, increasing), ``values``
    (g/kWh) and when the provider issued them (epoch s, or None)."""

    hours: np.ndarray
    values: np.ndarray
    issued: float | None

    @classmethod
    def of(cls, times: Sequence[float], values: Sequence[float], issued: float | None) -> Series:
        """Points at ``times`` (epoch s) averaged per hour; ``ValueError`` for no points or a value that is not a
        finite number >= 0."""
        t, v = np.asarray(times, dtype=float), np.asarray(values, dtype=float)
        if len(t) == 0 or len(t) != len(v):
            raise ValueError("no points" if len(t) == 0 else "as many times as values needed")
        if not (np.isfinite(t).all() and np.isfinite(v).all() and (v >= 0).all()):
            raise ValueError("a time or value is not a finite number >= 0")
        hours, slot = np.unique((t // HOUR_S).astype(np.int64) * HOUR_S, return_inverse=True)
        return cls(hours, np.bincount(slot, v) / np.bincount(slot), issued)

    @property
    def newest(self) -> int:
        """Start of the last hour with a point, epoch s."""
        return int(self.hours[-1])

    def window(self, first: int, hours: int) -> np.ndarray:
        """Values of the ``hours`` hours from ``first`` (epoch s): each hour's own, else the last one before it (before
        the first point, the first)."""
        at = first + HOUR_S * np.arange(hours)
        return self.values[np.clip(np.searchsorted(self.hours, at, side="right") - 1, 0, None)]
