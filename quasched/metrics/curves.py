"""Per-event records → curves over arrived GPU request (0..130 % of capacity).

The FGD paper plots every metric against the GPU request that has arrived so
far, as a percentage of the cluster's GPU capacity. Events are binned by that
percentage rounded to an integer; an empty bin takes the events of its
neighbours (±1). :func:`arrival_curves` averages the exact per-event values;
:func:`quasched.compat.curves.discrete_curves` reproduces the artifact's
rounding on the same bins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

CURVES = ("alloc", "frag_ratio", "frag_amount")


@dataclass(frozen=True)
class Curves:
    """Three curves indexed by arrived-request percentage ``0..max_percent`` (``nan`` = no data)."""

    alloc: np.ndarray
    frag_ratio: np.ndarray
    frag_amount: np.ndarray

    def __getitem__(self, name: str) -> np.ndarray:
        return getattr(self, name)


def arrival_bins(arrived: np.ndarray, total_gpus: int, max_percent: int = 130) -> Iterator[tuple[int, np.ndarray]]:
    """``(percent, member mask)`` for every bin that has events (its own or its neighbours')."""
    percent = np.rint((arrived / total_gpus) / 10)
    for k in range(max_percent + 1):
        members = percent == k
        if not members.any():
            members = (percent >= k - 1) & (percent <= k + 1)
        if members.any():
            yield k, members


def arrival_curves(arrived: np.ndarray, used_milli: np.ndarray, frag_milli: np.ndarray, frag_ratio: np.ndarray,
                   total_gpus: int, max_percent: int = 130) -> Curves:
    """Allocation %, fragmentation ratio % and fragmentation amount (% of capacity): bin means."""
    alloc, amount = used_milli / total_gpus / 10, frag_milli / total_gpus / 10
    out = {name: np.full(max_percent + 1, np.nan) for name in CURVES}
    for k, members in arrival_bins(arrived, total_gpus, max_percent):
        out["alloc"][k] = alloc[members].mean()
        out["frag_ratio"][k] = frag_ratio[members].mean()
        out["frag_amount"][k] = amount[members].mean()
    return Curves(**out)
