"""One scheduling cycle: Filter → Score → NormalizeScore → select host → Reserve → bind.

Host selection follows the FGD simulator's fork of kube-scheduler: the highest
score wins and ties go to the node with the smallest *rank*, a fixed random
permutation of the nodes drawn once per run (not a fresh draw per decision).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.workload import Pod
from quasched.policies.base import Policy
from quasched.policies.filter import feasible_nodes
from quasched.sim.random import RandomStream

UNSCHEDULED = -1


@dataclass(frozen=True, slots=True)
class Decision:
    """Outcome of one cycle: the node (``-1`` = unschedulable) and devices."""

    node: int
    devices: tuple[int, ...] = ()
    n_feasible: int = 0

    @property
    def placed(self) -> bool:
        return self.node != UNSCHEDULED


class Scheduler:
    """Runs scheduling cycles of one policy on one cluster."""

    def __init__(self, cluster: Cluster, policy: Policy, rank: np.ndarray, rng: RandomStream) -> None:
        if sorted(rank.tolist()) != list(range(cluster.n_nodes)):
            raise ValueError("rank must be a permutation of the node indices")
        self.cluster = cluster
        self.policy = policy
        self.rank = np.asarray(rank, dtype=np.int64)
        self.rng = rng
        policy.attach(cluster, rng)

    def decide(self, pod: Pod) -> Decision:
        """Pick a node and devices for ``pod`` without binding it."""
        self.rng.on_schedule_cycle()
        nodes = feasible_nodes(self.cluster, pod)
        if len(nodes) == 0:
            return Decision(UNSCHEDULED)
        if len(nodes) == 1:
            node = int(nodes[0])
        else:
            scores = self.policy.normalize(self.policy.score(self.cluster, pod, nodes))
            best = nodes[scores == scores.max()]
            node = int(best[np.argmin(self.rank[best])])
        devices = self.policy.select_devices(self.cluster, pod, node) if pod.is_gpu else ()
        return Decision(node, devices, len(nodes))

    def schedule(self, pod: Pod) -> Decision:
        """Decide and bind; an unschedulable pod leaves the cluster unchanged."""
        decision = self.decide(pod)
        if decision.placed:
            self.cluster.place(pod, decision.node, decision.devices)
        return decision
