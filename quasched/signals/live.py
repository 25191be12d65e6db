"""A provider's zone as a :class:`~quasched.signals.base.Signal` that does not fail once it has had a good answer.

Each read asks the provider (through its cache). An answer that fails (unreachable, timeout, 5xx, refused, rate
limited, malformed) or whose newest hour ended more than ``max_age_s`` before ``now`` is replaced by the last good one,
marked ``stale`` with a ``warning``; with none yet, by ``fallback`` (e.g. a :class:`~quasched.signals.file.FileSignal`)
if given, else :class:`~quasched.signals.base.NoSignal` is raised. Each change of state (a new warning, or good again)
is one line on stderr."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Callable

from quasched.signals.base import HOUR_S, NoSignal, Reading, Series, Signal, Unavailable, hour_of, iso
from quasched.signals.provider import Provider


def log(message: str) -> None:
    """One line on stderr prefixed ``quasched signals:``."""
    print(f"quasched signals: {message}", file=sys.stderr, flush=True)


class LiveSignal:
    """``zone`` of ``provider`` (see the module): ``hourly`` reads its forecast, ``history`` its past hours."""

    def __init__(self, provider: Provider, zone: str, *, max_age_s: float = 3 * HOUR_S,
                 fallback: Signal | None = None) -> None:
        self.provider, self.zone, self.max_age_s, self.fallback = provider, zone, max_age_s, fallback
        self.label = f"{provider.name} {zone}"
        self._good: dict[str, Series] = {}
        self._state: dict[str, str | None] = {}

    def hourly(self, now: float, hours: int) -> Reading:
        first = hour_of(now)
        return self._read("forecast", now, first, hours, lambda: self.provider.forecast(self.zone),
                          lambda signal: signal.hourly(now, hours))

    def history(self, now: float, hours: int) -> Reading:
        first = hour_of(now) - hours * HOUR_S
        return self._read("history", now, first, hours, lambda: self.provider.history(self.zone, first, hour_of(now)),
                          lambda signal: signal.history(now, hours))

    def _read(self, kind: str, now: float, first: int, hours: int, ask: Callable[[], Series],
              fallback: Callable[[Signal], Reading]) -> Reading:
        try:
            series = ask()
            if now - (series.newest + HOUR_S) > self.max_age_s:
                raise Unavailable(f"its newest hour, {iso(series.newest)}, ended more than "
                                  f"{self.max_age_s / HOUR_S:g} h before now")
        except Unavailable as err:
            return self._stale(kind, str(err), first, hours, fallback)
        self._good[kind] = series
        self._note(kind, None)
        return Reading(self.zone, first, series.window(first, hours), series.issued, self.provider.source)

    def _stale(self, kind: str, reason: str, first: int, hours: int,
               fallback: Callable[[Signal], Reading]) -> Reading:
        last = self._good.get(kind)
        if last is not None:
            when = f"issued {iso(last.issued)}" if last.issued is not None else f"up to {iso(last.newest)}"
            warning = f"{self.label}: {reason}; serving the last good {kind} ({when})"
            reading = Reading(self.zone, first, last.window(first, hours), last.issued, self.provider.source)
        elif self.fallback is not None:
            warning = f"{self.label}: {reason}; no good {kind} yet, serving the fallback signal"
            reading = fallback(self.fallback)
        else:
            raise NoSignal(f"{self.label}: {reason}; no good {kind} yet")
        self._note(kind, warning)
        return replace(reading, stale=True, warning=warning)

    def _note(self, kind: str, warning: str | None) -> None:
        """Log a change of ``kind``'s state: a new warning, or good again after one."""
        if warning != self._state.get(kind):
            log(warning or f"{self.label}: the {kind} is good again")
            self._state[kind] = warning
