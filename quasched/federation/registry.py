"""The online dispatchers by name (the oracle is offline: :mod:`.oracle`)."""

from __future__ import annotations

from typing import Callable

from quasched.federation.baselines import GreenestFirst, HourlyGreedy, LeastLoaded, Proportional
from quasched.federation.backfill import (BackfillDisplacement, BackfillRule, ConservativeDisplacement, ConservativeRule,
                                         EasyDisplacement, EasyRule)
from quasched.federation.carbon_aware import CarbonAware
from quasched.federation.dispatch import Dispatcher
from quasched.federation.displacement import DisplacementPriced
from quasched.federation.held import HourlyRedecideHeld, ProtectionHeld, RedecideHeld
from quasched.federation.nested import CappedNested, NestedBookings, NestedUnprotected
from quasched.federation.planner import RollingPlanner
from quasched.federation.protection import ProtectionPriced
from quasched.federation.redecide import ReleaseRedecided
from quasched.federation.shadow import ShadowDisplacement, ShadowRule
from quasched.federation.throttle import ThrottleDisplacement

DISPATCHERS: dict[str, Callable[[], Dispatcher]] = {
    d.name: d for d in (Proportional, LeastLoaded, GreenestFirst, HourlyGreedy, RollingPlanner, DisplacementPriced, CarbonAware,
                 BackfillRule, BackfillDisplacement, EasyRule, EasyDisplacement, ConservativeRule, ConservativeDisplacement,
                 ProtectionPriced, ReleaseRedecided, ProtectionHeld, RedecideHeld, HourlyRedecideHeld, NestedBookings,
                 NestedUnprotected, CappedNested, ShadowRule, ShadowDisplacement, ThrottleDisplacement)
}


def make_dispatcher(spec: str) -> Dispatcher:
    """A fresh dispatcher from ``name`` or ``name:param=value,...`` (numeric parameters, e.g.
    ``carbon-aware:price=2,power=4``); ValueError naming the known ones if unknown."""
    name, _, rest = spec.partition(":")
    if name not in DISPATCHERS:
        raise ValueError(f"unknown dispatcher {name!r}; known: {', '.join(DISPATCHERS)}")
    try:
        params = {k.strip(): float(v) for k, v in (p.split("=") for p in rest.split(",") if p.strip())}
        return DISPATCHERS[name](**params)
    except (TypeError, ValueError) as err:
        raise ValueError(f"bad dispatcher spec {spec!r}: {err}") from None
