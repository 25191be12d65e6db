"""Callbacks of command-line options shared by the command modules (no heavy imports: ``--help`` stays fast)."""

from __future__ import annotations

import math
from typing import Callable

import typer


def finite(example: str) -> Callable[[float], float]:
    """Callback of a number option that must be finite (``--tune``, ``--headroom``: infinity would size the workload
    or cluster forever; ``--days``: replay forever; NaN passes every range check); ``example`` ends the error."""
    def check(value: float) -> float:
        if not math.isfinite(value):
            raise typer.BadParameter(f"{value} is not a finite number; write {example}")
        return value

    return check
