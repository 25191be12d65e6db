"""How often node-level EASY (``carbon-aware-shadow``) refuses a pass, and how often the head it protects is already
late: ``federation_year.py`` with the guard counted (a diagnosis; same arguments).

    cd benchmarks && python federation_shadow_refusals.py --data-dir ../../shared/traces \\
        --carbon-dir ../../shared/carbon --dispatcher carbon-aware-shadow --days 90
"""

from __future__ import annotations

import federation_year
import numpy as np

from quasched.federation.registry import DISPATCHERS
from quasched.federation.shadow import ShadowDisplacement, ShadowGuard, ShadowRule


class Counted(ShadowGuard):
    """Counts per cluster asked: checks, refusals, heads already past their latest start."""

    counts = {"asked": 0, "refused": 0, "head late": 0}

    def passable(self, job: int, now: float, among: np.ndarray) -> np.ndarray:
        out = super().passable(job, now, among)
        v, asked = self.view, np.flatnonzero(among & (self.view.head >= 0))
        Counted.counts["asked"] += len(asked)
        Counted.counts["refused"] += int((~out[asked]).sum())
        Counted.counts["head late"] += int((v.latest_start[v.head[asked]] < now).sum())
        return out


class CountedRule(Counted, ShadowRule):
    pass


class CountedDisplacement(Counted, ShadowDisplacement):
    pass


if __name__ == "__main__":
    DISPATCHERS.update({d.name: d for d in (CountedRule, CountedDisplacement)})
    federation_year.main()
    print("pass checks: " + ", ".join(f"{k} {v:,}" for k, v in Counted.counts.items()))
