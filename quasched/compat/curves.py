"""The FGD artifact's curves: :mod:`quasched.metrics.curves` bins with the artifact's rounding.

Reproduces the artifact's post-processing exactly: each bin (by arrived GPU
request, :func:`~quasched.metrics.curves.arrival_bins`) averages the per-event
values, which were themselves rounded to two decimals as the reference simulator logs them.
The bin mean is NumPy's (pairwise) mean and the allocation and fragmentation
amount means are rounded with NumPy's rounding, as in the published files.
"""

from __future__ import annotations

import numpy as np

from quasched.metrics.curves import CURVES, Curves, arrival_bins

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
    alloc = _py_round((used_milli / total_gpus) / 10, 2)
    ratio = _logged(frag_ratio)
    amount = _logged(frag_milli)
    out = {name: np.full(max_percent + 1, np.nan) for name in CURVES}
    for k, members in arrival_bins(arrived, total_gpus, max_percent):
        out["alloc"][k] = np.round(np.float64(_bin_mean(alloc, members)), 2)
        out["frag_ratio"][k] = _bin_mean(ratio, members)
        out["frag_amount"][k] = np.round(
            np.float64(((100 * _bin_mean(amount, members)) / 1000) / total_gpus), 2
        )
    return Curves(**out)
