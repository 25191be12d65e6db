"""The online dispatchers by name (the oracle is offline: :mod:`.oracle`)."""

from __future__ import annotations

from typing import Callable

from quasched.federation.baselines import GreenestFirst, HourlyGreedy, LeastLoaded, Proportional
from quasched.federation.carbon_aware import CarbonAware
from quasched.federation.dispatch import Dispatcher

DISPATCHERS: dict[str, Callable[[], Dispatcher]] = {
    d.name: d for d in (Proportional, LeastLoaded, GreenestFirst, HourlyGreedy, CarbonAware)
}


def make_dispatcher(name: str) -> Dispatcher:
    """A fresh dispatcher (ValueError naming the known ones if unknown)."""
    if name not in DISPATCHERS:
        raise ValueError(f"unknown dispatcher {name!r}; known: {', '.join(DISPATCHERS)}")
    return DISPATCHERS[name]()
