"""Home headroom: the headroom term with each shape weighted by how few nodes can ever hold it.

:mod:`quasched.policies.headroom` values the copies a node can still take of
shape ``t`` by ``count_t · g_t`` (how often it comes × its GPU milli). That is
blind to *where else* a shape can go: a 120-core 8-GPU pod fits only on the
few 128-core 8-GPU nodes, a 15-core 1-GPU pod almost anywhere, so a 1-GPU pod
that breaks one of those nodes looks cheap. Here a copy is worth the expected
number of such pods per GPU that can host it::

    H(node) = Σ_t (count_t / c_t) · n_t · g_t,   c_t = Σ_{v: n_t(empty v) ≥ 1} GPUs_v / Σ_v GPUs_v

``c_t`` is the share of the cluster's GPUs on nodes that, empty, hold a copy
(1 for a shape that fits everywhere, where the term is Headroom's). It is
computed from the cluster alone, once per layout.
"""

from __future__ import annotations

import numpy as np

from quasched.model.resources import CPU, MEMORY
from quasched.model.workload import FULL_GPU_MILLI
from quasched.policies.headroom import HeadroomModel, HeadroomScore, Shape


class HomeHeadroomScore(HeadroomScore):
    """:class:`HeadroomScore` with shapes weighted by ``1 / c_t`` (module docstring)."""

    name = "home-headroom"

    def weigh(self, shapes: list[Shape], counts: list[int], total: int) -> tuple[list[int], int]:
        c = self.cluster
        gpus = np.where(c.present, c.num_gpus, 0)
        empty = HeadroomModel(shapes, [1] * len(shapes), tuple(c.models)).copies(
            c.capacity[:, CPU], c.capacity[:, MEMORY], np.where(c.device_exists, FULL_GPU_MILLI, 0), c.model_id)
        share = iter(np.maximum(gpus @ (empty >= 1), 1) / max(int(gpus.sum()), 1))  # c_t of the GPU shapes
        return [round(n / next(share)) if s[2] > 0 else n for s, n in zip(shapes, counts)], total
