"""Cluster and workload state shared by every engine, policy and solver."""

from quasched.model.cluster import Cluster, Placement, PlacementError, gpu_class
from quasched.model.nodes import NodeSpec, accessible
from quasched.model.workload import FULL_GPU_MILLI, NO_LIMIT, Pod, Workload, shape_keys

__all__ = [
    "Cluster", "NodeSpec", "Placement", "PlacementError", "accessible", "gpu_class",
    "FULL_GPU_MILLI", "NO_LIMIT", "Pod", "Workload", "shape_keys",
]
