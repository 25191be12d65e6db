"""Batch mode: the pending batch assigned at once by the batch optimiser, verified, then bound.

The batch problem (:mod:`quasched.optimize`) sees each schedulable node's
free CPU, memory and GPU milli (GPUs aggregated per node, as the optimiser
models them) and the pending pods in queue order (its fairness weights
alpha^(k-1) apply to repeated submissions of one app). Every answer goes
through :func:`quasched.optimize.solve`, which verifies it independently.
The loop then binds each assigned pod on its node with the devices the
policy's Reserve step picks, if its queue's quota still admits it there; a
pod the node cannot host at device level (the aggregation hides device
packing) stays for the online pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.fit import Demand, fit_matrix
from quasched.model.resources import CPU, MEMORY
from quasched.model.workload import NO_LIMIT, Pod
from quasched.policies.base import CycleState
from quasched.policies.framework import Policy

RESOURCES = ("cpu_milli", "gpu_milli", "memory_mib")


@dataclass
class BatchOutcome:
    """Per pod: the node slot the solver assigns (-1 = none); the solver's name, status and proven gap."""

    nodes: list[int]
    solver: str
    status: str
    gap: float | None


def solve_batch(cluster: Cluster, pods: list[Pod], solver: str, **options) -> BatchOutcome:
    """Solve and verify the batch problem of ``pods`` on the free capacity of the schedulable nodes."""
    from quasched.optimize.problem import small_problem  # the solvers' libraries load in batch mode only
    from quasched.optimize.solvers import solve

    nodes = np.flatnonzero(cluster.schedulable)
    capacity = np.stack([cluster.free[nodes, CPU], cluster.gpu_free[nodes].sum(axis=1),
                         cluster.free[nodes, MEMORY]], axis=1)
    demand = np.array([[p.cpu_milli, p.gpu_request, p.memory_mib] for p in pods], dtype=np.int64)
    models = [str(cluster.models[cluster.model_id[n]]) if cluster.num_gpus[n] else "" for n in nodes]
    problem = small_problem(demand, capacity, specs=[p.gpu_model if p.is_gpu else "" for p in pods], models=models,
                            resources=RESOURCES, limits=[NO_LIMIT] * len(pods))
    answer = solve(problem, solver, **options)
    if answer.verdict is None or not answer.verdict.feasible:
        raise RuntimeError(f"{solver} returned an assignment the verifier rejects: {answer.verdict}")
    return BatchOutcome([int(nodes[m]) if m >= 0 else -1 for m in answer.machine.tolist()], solver, answer.status,
                        answer.gap)


def bind_on(cluster: Cluster, policy: Policy, pod: Pod, node: int) -> tuple[int, ...] | None:
    """Place ``pod`` on ``node`` with the devices the policy's Reserve picks; None (no change) if it cannot fit."""
    if not fit_matrix(cluster, Demand.of([pod]), np.array([node]))[0, 0]:
        return None
    devices = policy.reserve(cluster, pod, node, CycleState()) if pod.is_gpu else ()
    cluster.place(pod, node, devices)
    return devices
