"""An upper bound on the GPU milli a set of pods can ever occupy on a cluster (HiGHS).

Aggregated relaxation: nodes with equal (CPU, memory, GPU count, GPU model)
form a *group* ``g`` of ``N_g`` nodes; ``x[s, g] ≥ 0`` pods of shape ``s``
(CPU, memory, ``k_s`` GPUs of ``m_s`` milli, spec) go to group ``g``, only where
one such pod fits an empty node of ``g``. Maximise ``Σ k_s m_s x[s, g]`` s.t.

- ``Σ_g x[s, g] ≤ n_s`` (the pods there are);
- per group, ``Σ_s r_s x[s, g] ≤ N_g R_g`` for CPU, memory and GPU milli;
- device packing, ``j = 1..4``: a device holds one whole-GPU pod, or at most ``j``
  sharing pods larger than ``1000/(j+1)`` milli, so
  ``Σ_{whole} j k_s x + Σ_{sharing, m_s > 1000/(j+1)} x ≤ j N_g D_g``;
- node packing, ``j = 1..3``: at most ``j`` pods larger than ``1/(j+1)`` of a
  node's CPU (or memory) per node, ``Σ_{r_s > R_g/(j+1)} x ≤ j N_g``.

Every real placement satisfies all rows (count per node, sum over the group),
so the LP optimum, and the MILP's dual bound with integer ``x``, are valid upper
bounds. They relax *which* node of a group a pod is on (resources are pooled
per group beyond those rows); CPU-only pods are left out (they add no GPU and
only compete for room). The MILP's best solution is a pooled count, not a
placement; achievable packings come from :mod:`quasched.sim.offline`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from quasched.model.nodes import NodeSpec
from quasched.model.workload import FULL_GPU_MILLI, Workload
from quasched.optimize.highs import LinearModel
from quasched.optimize.shapes import NodeGroups, Shapes

DEVICE_CUTS = 4
NODE_CUTS = 3


@dataclass(frozen=True)
class GpuBound:
    """Upper bounds on allocated GPU milli (LP ≥ MILP bound) and the cluster's GPU capacity."""

    lp_milli: float
    milp_milli: float
    capacity_milli: int
    milp_status: str

    def pct(self, milli: float) -> float:
        return 100.0 * milli / self.capacity_milli

    @property
    def lp_pct(self) -> float:
        return self.pct(self.lp_milli)

    @property
    def milp_pct(self) -> float:
        return self.pct(self.milp_milli)


def gpu_bound(nodes: NodeSpec, workload: Workload, milp_seconds: float | None = 10.0) -> GpuBound:
    """LP and MILP upper bounds of the relaxation in the module docstring (``milp_seconds=None``: LP only)."""
    shapes, groups = Shapes.of(workload), NodeGroups.of(nodes)
    capacity = FULL_GPU_MILLI * nodes.total_gpus
    if not len(shapes):
        return GpuBound(0.0, 0.0, capacity, "optimal")
    pairs = np.argwhere(groups.fits(shapes))  # (P, 2): shape, group
    count = shapes.count
    bounds: list[tuple[float, str]] = []
    for integer in (False, True)[:1 if milp_seconds is None else 2]:
        lm = LinearModel()
        x = lm.add_vars(len(pairs), ub=count[pairs[:, 0]].astype(float), cost=shapes.value[pairs[:, 0]].astype(float),
                        integer=integer)
        _rows(lm, x, pairs, count, groups.cap, groups.size, shapes.cpu, shapes.mem, shapes.k, shapes.m)
        solution = lm.solve(time_limit=milp_seconds or 60.0, rel_gap=1e-5)
        bounds.append((solution.bound, solution.status))
    milp, status = bounds[-1]
    return GpuBound(bounds[0][0], min(milp, bounds[0][0]), capacity, status)


def _rows(lm: LinearModel, x: np.ndarray, pairs: np.ndarray, count: np.ndarray, cap: np.ndarray, size: np.ndarray,
          cpu: np.ndarray, mem: np.ndarray, k: np.ndarray, m: np.ndarray) -> None:
    """Capacity, shape-count, device-packing and node-packing rows (module docstring)."""
    shape, group = pairs[:, 0], pairs[:, 1]
    for s in np.unique(shape):
        lm.add_row(x[shape == s], 1.0, hi=float(count[s]))
    whole = m >= FULL_GPU_MILLI
    for g in np.unique(group):
        here = group == g
        s, n, (c_g, m_g, d_g) = shape[here], int(size[g]), cap[g].tolist()
        for need, total in ((cpu[s], c_g), (mem[s], m_g), (k[s] * m[s], FULL_GPU_MILLI * d_g)):
            lm.add_row(x[here], need, hi=float(n * total))
        for j in range(1, DEVICE_CUTS + 1):
            coef = np.where(whole[s], j * k[s], np.where(m[s] * (j + 1) > FULL_GPU_MILLI, k[s], 0))
            lm.add_row(x[here][coef > 0], coef[coef > 0], hi=float(j * n * d_g))
        for need, total in ((cpu[s], c_g), (mem[s], m_g)):
            for j in range(1, NODE_CUTS + 1):
                big = need * (j + 1) > total
                lm.add_row(x[here][big], 1.0, hi=float(j * n))
