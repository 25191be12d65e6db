"""Poisson odds of future arrivals, shared by the Littlewood-style protection rules.

Both the ``last-homes`` score plugin (:mod:`quasched.policies.last_homes`) and the ``ours-protect`` dispatcher
(:mod:`quasched.federation.protection`) charge a placement for the arrivals it turns away, which happens when at
least ``R`` more of them come: ``P(Poisson(λ) ≥ R)``.
"""

from __future__ import annotations

import numpy as np
from scipy.special import pdtrc


def at_least(r: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """``P(Poisson(lam) ≥ r)``, 1 for ``r ≤ 0``."""
    return np.where(r <= 0, 1.0, pdtrc(np.maximum(r - 1, 0), lam))
