"""Per-event records → curves over arrived GPU request (0..130 % of capacity).

Reproduces the FGD artifact's post-processing exactly: events are binned by
arrived GPU request as an integer percentage of GPU capacity (Python
``round``, half to even), and each bin averages the per-event values, which
were themselves rounded to two decimals as the reference simulator logs them.
The bin mean is NumPy's (pairwise) mean and the allocation and fragmentation
amount means are rounded with NumPy's rounding, as in the published files.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def _py_round(values: np.ndarray, digits: int) -> np.ndarray:
    """Python's correctly rounded ``round`` applied element-wise."""
    return np.array([round(v, digits) for v in values.tolist()])


def _logged(values: np.ndarray) -> np.ndarray:
    """Values as the reference logs them (``%.2f``) and parses them back."""
    return np.array([float(f"{v:.2f}") for v in values.tolist()])


def _bin_mean(values: np.ndarray, members: np.ndarray) -> float:
    return float(np.mean(values[members]))


def discrete_curves(
    arrived: np.ndarray,
    used_milli: np.ndarray,
    frag_milli: np.ndarray,
    frag_ratio: np.ndarray,
    total_gpus: int,
    max_percent: int = 130,
) -> Curves:
    """Allocation %, fragmentation ratio % and fragmentation amount (% of capacity) per bin."""
    percent = np.rint((arrived / total_gpus) / 10)
    alloc = _py_round((used_milli / total_gpus) / 10, 2)
    ratio = _logged(frag_ratio)
    amount = _logged(frag_milli)
    columns = max_percent + 1
    out = {name: np.full(columns, np.nan) for name in CURVES}
    for k in range(columns):
        members = percent == k
        if not members.any():
            members = (percent >= k - 1) & (percent <= k + 1)
            if not members.any():
                continue
        out["alloc"][k] = np.round(np.float64(_bin_mean(alloc, members)), 2)
        out["frag_ratio"][k] = _bin_mean(ratio, members)
        out["frag_amount"][k] = np.round(
            np.float64(((100 * _bin_mean(amount, members)) / 1000) / total_gpus), 2
        )
    return Curves(**out)
