"""The Filter step: which nodes can host a pod right now.

kube's ``NodeResourcesFit`` and ``NodeUnschedulable``, the Open-GPU-Share
filter (GPU model and device fit) and the v2025 limits (RDMA, disk, instances
of one app per node), all from the one fit rule of :mod:`quasched.model.fit`.
"""

from __future__ import annotations

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.fit import fit_mask
from quasched.model.workload import Pod


def feasible_nodes(cluster: Cluster, pod: Pod) -> np.ndarray:
    """Indices of the nodes that can host ``pod``, ascending."""
    return np.flatnonzero(fit_mask(cluster, pod))
