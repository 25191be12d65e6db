"""Learned: a weighted sum of the other plugins' normalised scores, weights from a checkpoint.

    score(node, device) = Σ_i w_i · normalize_i(score_i(node, device)),   w_i ≥ 0, Σ_i w_i > 0

over :data:`FEATURES` (FGD on its linear scale and Headroom per device column, BestFit,
GpuPacking, DotProd and GpuClustering per node), composed by
:class:`~quasched.policies.framework.Policy`; Reserve: the best device, tightest on ties.
``w = (1, 2, 0, 0, 0, 0)`` is FGD + 2 × headroom. The weights are trained in the simulator
(:mod:`quasched.learn`); a checkpoint is JSON ``{"features": [...], "weights": [...]}``,
the packaged ``data/learned.json`` the one in BENCHMARKS.md ("A learned policy").
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from quasched.metrics.typical import TypicalPods
from quasched.policies.base import ScorePlugin
from quasched.policies.best_fit import BestFit
from quasched.policies.dot_product import DotProduct
from quasched.policies.fgd import FGD
from quasched.policies.framework import Policy
from quasched.policies.gpu_clustering import GpuClustering
from quasched.policies.gpu_packing import GpuPacking
from quasched.policies.headroom import HeadroomScore

FEATURES = ("fgd", "headroom", "bestfit", "gpupacking", "dotprod", "gpuclustering")
PACKAGED = Path(__file__).with_name("data") / "learned.json"


def feature_plugins(typical: TypicalPods) -> list[ScorePlugin]:
    """Fresh plugins of :data:`FEATURES`, in order."""
    return [FGD(typical, "linear"), HeadroomScore(typical), BestFit(), GpuPacking(), DotProduct(), GpuClustering()]


def learned_policy(typical: TypicalPods, weights: list[float]) -> Policy:
    """The policy of ``weights`` (one per feature; zero-weight plugins are left out)."""
    return Policy(list(zip(feature_plugins(typical), weights)), "best-score-tightest", name="learned")


def load_weights(path: str | Path) -> list[float]:
    """The weights of a checkpoint; :class:`ValueError` naming the file and field when it is not valid."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ValueError(f"{path}: cannot read it ({err.strerror}); pass a checkpoint written by "
                         "`python benchmarks/learn.py train --checkpoint FILE`") from None
    try:
        data = json.loads(text)
        features, weights = data["features"], [float(w) for w in data["weights"]]
    except (ValueError, TypeError, KeyError) as err:
        raise ValueError(f"{path}: not a learned-policy checkpoint ({type(err).__name__}: {err})") from None
    if list(features) != list(FEATURES):
        raise ValueError(f"{path}: field 'features' must be {list(FEATURES)}, got {features}")
    if len(weights) != len(FEATURES) or not all(0 <= w < math.inf for w in weights) or not any(weights):
        raise ValueError(f"{path}: field 'weights' needs {len(FEATURES)} non-negative numbers, not all 0: {weights}")
    return weights


def save_weights(path: str | Path, weights: list[float], **meta: object) -> Path:
    """Write a checkpoint (``meta``: how it was trained) that :func:`load_weights` reads back."""
    path = Path(path)
    path.write_text(json.dumps({"features": list(FEATURES), "weights": [float(w) for w in weights], **meta}, indent=1))
    load_weights(path)
    return path
