"""Seeded synthetic cluster and workload shaped like the openb traces.

Node types and their mix follow the openb GPU node list; pod classes, GPU
shares and CPU/memory sizes are drawn from the most common values of
``openb_pod_list_default``. The defaults (120 nodes, 1000 pods asking ~120 %
of the GPUs) keep a whole FGD-style simulation at a second or two, with no
download. Same seed, same output.
"""

from __future__ import annotations

import numpy as np

from quasched.model.nodes import NodeSpec
from quasched.model.workload import FULL_GPU_MILLI, Workload

#: (model, GPUs, cpu_milli, memory_mib, nodes in openb) — the openb GPU node types
NODE_TYPES = (
    ("A10", 1, 128000, 1048576, 2),
    ("G2", 8, 96000, 393216, 549),
    ("G3", 8, 128000, 786432, 39),
    ("P100", 1, 8000, 61440, 3),
    ("P100", 2, 8000, 61440, 2),
    ("P100", 2, 16000, 122880, 107),
    ("P100", 2, 64000, 262144, 22),
    ("T4", 2, 104000, 524288, 387),
    ("T4", 4, 96000, 393216, 17),
    ("V100M16", 1, 8000, 32768, 19),
    ("V100M16", 4, 32000, 131072, 28),
    ("V100M16", 8, 64000, 262144, 7),
    ("V100M16", 8, 82000, 344064, 1),
    ("V100M32", 4, 48000, 376832, 9),
    ("V100M32", 8, 96000, 786432, 21),
)

#: pod classes: (kind, num_gpu, probability); "share" pods take part of one GPU
POD_CLASSES = (
    ("cpu", 0, 0.133),
    ("share", 1, 0.378),
    ("one", 1, 0.480),
    ("multi", 2, 0.002),
    ("multi", 4, 0.002),
    ("multi", 8, 0.005),
)
#: GPU share of sharing pods: (gpu_milli, weight)
SHARES = ((810, 1078), (470, 750), (320, 328), (650, 253), (230, 140), (460, 128),
          (590, 75), (160, 74), (550, 72), (220, 62), (370, 47), (110, 24))
#: (cpu_milli, memory_mib, weight) per class; multi-GPU sizes are per GPU
SIZES = {
    "cpu": ((12500, 57344, 364), (32000, 49152, 284), (8000, 30517, 163), (15400, 51200, 120),
            (16500, 51200, 95)),
    "share": ((3152, 5600, 1122), (11908, 47104, 625), (8000, 30517, 486), (4000, 22888, 189),
              (4000, 15258, 182), (4152, 10600, 152), (6000, 6144, 51)),
    "one": ((11300, 49152, 857), (11400, 48128, 534), (3152, 5600, 470), (18708, 64512, 255),
            (9810, 41560, 195), (15700, 58368, 158), (12000, 24576, 158)),
    "multi": ((11000, 40960, 4), (8000, 32768, 3), (8050, 33024, 2)),
}
#: GPU-model constraints given to constrained GPU pods, with weights
SPECS = (("T4", 5), ("G2", 2), ("P100", 1), ("V100M16|V100M32", 1), ("G3", 1))


def _pick(rng: np.random.Generator, options: tuple, n: int) -> np.ndarray:
    """Row indices into ``options`` drawn by their last element (a weight)."""
    weights = np.array([option[-1] for option in options], dtype=float)
    return rng.choice(len(options), size=n, p=weights / weights.sum())


def synthetic_cluster(n_nodes: int = 120, seed: int = 0) -> NodeSpec:
    """``n_nodes`` openb-like GPU nodes, types drawn in the openb mix."""
    rng = np.random.default_rng(seed)
    kinds = np.sort(_pick(rng, NODE_TYPES, n_nodes))
    table = np.array([row[1:4] for row in NODE_TYPES], dtype=np.int64)[kinds]
    return NodeSpec(
        name=np.array([f"syn-node-{i:04d}" for i in range(n_nodes)], dtype=object),
        cpu_milli=table[:, 1],
        memory_mib=table[:, 2],
        num_gpus=table[:, 0],
        gpu_model=np.array([NODE_TYPES[k][0] for k in kinds], dtype=object),
        source=f"synthetic(n_nodes={n_nodes}, seed={seed})",
    )


def synthetic_workload(
    n_pods: int = 1000,
    seed: int = 0,
    *,
    gpu_model_fraction: float = 0.0,
    mean_interarrival_s: float = 30.0,
    median_lifetime_s: float = 8 * 3600.0,
) -> Workload:
    """``n_pods`` openb-like pods.

    About 13 % CPU-only, 38 % GPU-sharing, 48 % one full GPU and 1 % 2/4/8-GPU
    pods; CPU and memory come from the common sizes of each class (per GPU for
    multi-GPU pods). A ``gpu_model_fraction`` of the sharing and 1-GPU pods get
    a GPU-model constraint. For time-based replay, pods arrive as a Poisson
    process (``mean_interarrival_s``) and live a log-normal time (median
    ``median_lifetime_s``, σ = 1); with the defaults the default synthetic
    cluster peaks near 95 % GPU allocation and briefly queues pods.
    """
    rng = np.random.default_rng(seed)
    cls = _pick(rng, POD_CLASSES, n_pods)
    kind = np.array([c[0] for c in POD_CLASSES])[cls]
    num_gpu = np.array([c[1] for c in POD_CLASSES], dtype=np.int64)[cls]
    share = np.array([s[0] for s in SHARES], dtype=np.int64)[_pick(rng, SHARES, n_pods)]
    milli = np.where(kind == "share", share, np.minimum(num_gpu, 1) * FULL_GPU_MILLI)
    cpu = np.zeros(n_pods, dtype=np.int64)
    memory = np.zeros(n_pods, dtype=np.int64)
    for name, sizes in SIZES.items():
        rows = np.flatnonzero(kind == name)
        picked = np.array(sizes, dtype=np.int64)[_pick(rng, sizes, len(rows))]
        scale = np.maximum(num_gpu[rows], 1)
        cpu[rows], memory[rows] = picked[:, 0] * scale, picked[:, 1] * scale
    constrained = (num_gpu == 1) & (rng.random(n_pods) < gpu_model_fraction)
    specs = np.array([s[0] for s in SPECS], dtype=object)[_pick(rng, SPECS, n_pods)]
    creation = np.round(np.cumsum(rng.exponential(mean_interarrival_s, n_pods)))
    lifetime = np.round(rng.lognormal(np.log(median_lifetime_s), 1.0, n_pods))
    return Workload(
        name=np.array([f"syn-pod-{i:05d}" for i in range(n_pods)], dtype=object),
        cpu_milli=cpu,
        memory_mib=memory,
        num_gpu=num_gpu,
        gpu_milli=milli,
        gpu_model=np.where(constrained, specs, "").astype(object),
        creation_time=creation,
        deletion_time=creation + lifetime,
        source=f"synthetic(n_pods={n_pods}, seed={seed})",
    )
