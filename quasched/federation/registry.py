"""The online dispatchers by name, with typed parameters (the oracles are offline: :mod:`.oracle`).

A spec is a name with optional parameters, ``carbon-defer:perfect=true,tau=12`` (:mod:`quasched.params`). Imports no
NumPy: ``--help`` and ``quasched federation --list`` read it; a dispatcher's module loads when one is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any, Callable

from quasched.params import Param, Registry

if TYPE_CHECKING:
    from quasched.federation.dispatch import Dispatcher


def _between(low: float, high: float, open_low: bool = False) -> Callable[[float], None]:
    """A :attr:`Param.check` for ``low <= value <= high`` (``low < value`` if ``open_low``)."""
    def check(value: float) -> None:
        if not (low < value if open_low else low <= value) or value > high:
            raise ValueError(f"must be in {'(' if open_low else '['}{low:g}, {high:g}]")
    return check


def _positive(value: float) -> None:
    if not value > 0:
        raise ValueError("must be above 0")


@dataclass(frozen=True)
class DispatcherInfo:
    """Registry entry: name, one-line summary, typed parameters and the class (``module:Class`` of this package)."""

    name: str
    summary: str
    target: str
    params: tuple[Param, ...] = ()

    def build(self, **params: Any) -> Dispatcher:
        module, _, cls = self.target.partition(":")
        return getattr(import_module(f"quasched.federation.{module}"), cls)(**params)  # type: ignore[no-any-return]


RULE_PARAMS = (
    Param("price", float, 2.0, "weight of the crowding price on a green slot", minimum=0.0),
    Param("power", float, 8.0, "exponent of the planned utilisation in the crowding price (above 0)", check=_positive),
    Param("fill", float, 1.0, "share of capacity the plan may book, in (0, 1]", check=_between(0.0, 1.0, open_low=True)),
    Param("delay", float, 0.002, "price of waiting, per hour of deferral", minimum=0.0),
    Param("toward", float, 0.5, "reference intensity: the mean moved this share (0-1) of the way to the dirtiest",
          check=_between(0.0, 1.0)),
    Param("perfect", bool, False, "read the true intensities instead of the forecast (measures what forecasting costs)"),
)
DEFER_PARAMS = (
    Param("memory", int, 24, "past hours of arrivals behind the displacement price", minimum=1),
    Param("flexible", float, 0.0, "weight (0-1) of flexible arrivals in the displacement price", check=_between(0.0, 1.0)),
    Param("tau", float, 24.0, "hours over which past inflexible arrivals are smoothed (protection; above 0)", check=_positive),
    Param("protect", bool, True, "charge flexible jobs for clean room inflexible ones are expected to need"),
    *RULE_PARAMS,
)

REGISTRY: Registry[DispatcherInfo] = Registry("dispatcher")
for _info in (
    DispatcherInfo("proportional", "split by GPU capacity (smooth weighted round robin), start now",
                   "baselines:Proportional"),
    DispatcherInfo("least-loaded", "the cluster least loaded after the job, start now", "baselines:LeastLoaded"),
    DispatcherInfo("greenest", "the greenest cluster by the past week's mean intensity with room now",
                   "baselines:GreenestFirst"),
    DispatcherInfo("greedy", "the greenest cluster by the current hour's intensity with room now",
                   "baselines:HourlyGreedy"),
    DispatcherInfo("carbon-aware", "defers flexible jobs within their slack to forecast-green slots, crowding priced",
                   "carbon_aware:CarbonAware", RULE_PARAMS),
    DispatcherInfo("carbon-defer", "carbon-aware with displacement and protection prices, node-level starts, "
                   "re-decisions and nested bookings (recommended)", "carbon_defer:CarbonDefer", DEFER_PARAMS),
):
    REGISTRY.register(_info)

#: what ``quasched federation`` runs by default: the baselines, the rule and ours, last (the oracle is held to its misses)
DEFAULT_DISPATCHERS = REGISTRY.names()
RECOMMENDED = "carbon-defer"


def make_dispatcher(spec: str) -> Dispatcher:
    """A fresh dispatcher from ``name`` or ``name:param=value,...``; :class:`ValueError` naming the dispatcher,
    the parameter or the known names."""
    info, params = REGISTRY.parse(spec)
    return info.build(**params)
