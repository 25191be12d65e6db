"""Error log of the GPU devices: when and where errors happened.

Engines that model failures append every GPU error (a device failure, transient or fatal,
on a busy or an idle device: health checks see both; and non-fatal warnings) and advance :attr:`ErrorLog.now`,
their clock, before they schedule. Health-aware policies (:mod:`quasched.policies.health`)
read it; what the history means (how fast it fades) is theirs to decide. An engine that draws the errors from a
model may also publish that model's prior (:class:`ErrorPrior`) for policies that weigh the history by it.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike


@dataclass(frozen=True)
class ErrorPrior:
    """What an error model says before any error: a share ``share`` of the nodes is flaky, each of their GPUs errs
    ``factor`` times as often as an ordinary one, which errs ``rate`` times per second; errors are logged from
    ``since`` (seconds) on."""

    share: float
    factor: float
    rate: float
    since: float = 0.0

    def log_odds(self, errors: ArrayLike, gpus: ArrayLike, now: float) -> np.ndarray:
        """Log odds that nodes with ``gpus`` GPUs and ``errors`` errors logged by ``now`` are flaky (Bayes with
        Poisson likelihoods): ``log(s / (1 − s)) + n log f − (f − 1) λ g T``; ±inf for a share of 0 or 1."""
        with np.errstate(divide="ignore"):
            prior = np.log(self.share) - np.log1p(-self.share)
        return prior + np.asarray(errors) * np.log(self.factor) - self.fading(gpus) * max(now - self.since, 0.0)

    def fading(self, gpus: ArrayLike) -> np.ndarray:
        """How fast the log odds of nodes with ``gpus`` GPUs fall per second without an error: ``(f − 1) λ g``."""
        return (self.factor - 1) * self.rate * np.asarray(gpus)


class ErrorLog:
    """Append-only ``(time, node, device)`` GPU errors and the engine's clock."""

    def __init__(self) -> None:
        self.now = 0.0
        #: the error model's prior, when the engine publishes one
        self.prior: ErrorPrior | None = None
        self.time: list[float] = []
        self.node: list[int] = []
        self.device: list[int] = []
        self._times_of: dict[int, list[float]] = {}

    def __len__(self) -> int:
        return len(self.time)

    def record(self, t: float, node: int, device: int) -> None:
        """One error on ``node``'s GPU ``device`` at ``t``; the clock moves to ``t``."""
        if self.time and t < self.time[-1]:
            raise ValueError(f"errors must be recorded in time order: {t} after {self.time[-1]}")
        self.now = t
        self.time.append(t)
        self.node.append(node)
        self.device.append(device)
        self._times_of.setdefault(node, []).append(t)

    def count(self, node: int, since: float) -> int:
        """Errors on ``node`` at or after ``since``."""
        times = self._times_of.get(node, [])
        return len(times) - bisect_left(times, since)
