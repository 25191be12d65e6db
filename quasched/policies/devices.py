"""GPU device selection inside a chosen node (the Reserve step).

Every function takes the node's free milli per device (padding devices hold
0) and returns the device indices the pod gets. Pods asking for whole GPUs
always get the lowest-index fully free devices ("exclusive allocation").
"""

from __future__ import annotations

import numpy as np

from quasched.model.workload import FULL_GPU_MILLI, Pod
from quasched.model.random import RandomStream


def exclusive(free: np.ndarray, pod: Pod) -> tuple[int, ...]:
    """Lowest-index devices with enough free milli (fully free ones for whole GPUs)."""
    need = FULL_GPU_MILLI if pod.gpu_milli >= FULL_GPU_MILLI else pod.gpu_milli
    candidates = np.flatnonzero(free >= need)[: pod.num_gpu]
    if len(candidates) < pod.num_gpu:
        raise ValueError(f"node cannot host {pod.name}: free devices {free.tolist()}")
    return tuple(candidates.tolist())


def best_fit(free: np.ndarray, pod: Pod) -> tuple[int, ...]:
    """Sharing pods: the fitting device with least free milli (lowest index on ties)."""
    if not pod.is_gpu:
        return ()
    if not pod.is_sharing:
        return exclusive(free, pod)
    fitting = np.where(free >= pod.gpu_milli, free, np.iinfo(np.int64).max)
    return (int(np.argmin(fitting)),)


def uniform(free: np.ndarray, pod: Pod, rng: RandomStream) -> tuple[int, ...]:
    """Sharing pods: a uniformly random fitting device (``rng.pick`` over them, in index order)."""
    if not pod.is_sharing:
        return best_fit(free, pod)
    return (int(rng.pick(np.flatnonzero(free >= pod.gpu_milli).tolist())),)  # type: ignore[call-overload]
