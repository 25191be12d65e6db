"""Placement policies (one module each) behind the :class:`Policy` interface."""

from __future__ import annotations

from typing import Callable

from quasched.metrics.fragmentation import TypicalPods
from quasched.policies.base import Policy
from quasched.policies.best_fit import BestFit
from quasched.policies.dot_product import DotProduct
from quasched.policies.fgd import FGD
from quasched.policies.first_fit import FirstFit
from quasched.policies.framework import Decision, Scheduler
from quasched.policies.gpu_clustering import GpuClustering
from quasched.policies.gpu_packing import GpuPacking
from quasched.policies.headroom import Headroom
from quasched.policies.random_score import RandomScore

_FACTORIES: dict[str, Callable[[TypicalPods], Policy]] = {
    "random": lambda typical: RandomScore(),
    "dotprod": lambda typical: DotProduct(),
    "gpuclustering": lambda typical: GpuClustering(),
    "gpupacking": lambda typical: GpuPacking(),
    "bestfit": lambda typical: BestFit(),
    "fgd": FGD,
    "firstfit": lambda typical: FirstFit(),
    "headroom": Headroom,  # our own policy (experimental), not in PAPER_POLICIES
}

#: The six policies of the FGD paper, in its order.
PAPER_POLICIES = ("random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd")


def policy_names() -> tuple[str, ...]:
    return tuple(_FACTORIES)


def make_policy(name: str, typical: TypicalPods) -> Policy:
    """A fresh policy by (case-insensitive) name; ``typical`` feeds fragmentation-aware ones."""
    try:
        return _FACTORIES[name.lower().replace("-", "").replace("_", "")](typical)
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(_FACTORIES)}") from None


__all__ = [
    "Policy", "Scheduler", "Decision", "make_policy", "policy_names", "PAPER_POLICIES",
    "BestFit", "DotProduct", "FGD", "FirstFit", "GpuClustering", "GpuPacking", "RandomScore",
]
