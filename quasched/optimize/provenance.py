"""What a result was computed with, written beside it: the solver version changes the MILP's proof times and which of
equal-cost LP optima the federation oracle executes (BENCHMARKS.md, "The HiGHS version")."""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version


@cache
def highs_version() -> str:
    """The installed ``highspy`` version (the HiGHS solver of the MILP, the LP bounds and the oracle), or "absent"."""
    try:
        return version("highspy")
    except PackageNotFoundError:
        return "absent"
