"""What every engine sets up the same way: random stream, node ranks, cluster, scheduler, records.

The arrival experiment (:mod:`quasched.sim.arrival`) and the replay
(:mod:`quasched.sim.replay`) differ only in how pods arrive and leave; both
build an :class:`EngineCore` and drive it (a service drives the same
pieces from the wall clock).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from quasched.metrics.fragmentation import StateTable, state_table
from quasched.metrics.power import PWR_MODEL, PowerModel
from quasched.metrics.typical import TypicalPods
from quasched.model.cluster import Cluster
from quasched.model.nodes import NodeSpec
from quasched.model.random import NumpyStream, RandomStream
from quasched.model.resources import RESOURCES, ResourceRegistry
from quasched.policies import Policy, Scheduler, make_policy
from quasched.sim.records import EventRecorder

RngKind = Literal["go", "native"]


def make_stream(kind: RngKind, seed: int, compat_data: Path | None = None) -> RandomStream:
    """The random stream of a run: ``native`` (NumPy) or ``go`` (the FGD artifact's Go ``math/rand``)."""
    if kind == "native":
        return NumpyStream(seed)
    if kind == "go":
        from quasched.model.gorand import GoRand, load_cooked

        return GoRand(seed, load_cooked(compat_data))
    raise ValueError(f"unknown rng {kind!r}; use 'go' or 'native'")


def node_ranks(nodes: NodeSpec, rng: RandomStream) -> np.ndarray:
    """Tie-break rank per node: a random permutation over the name-sorted nodes."""
    by_name = sorted(range(len(nodes)), key=lambda i: nodes.name[i])
    perm = rng.perm(len(nodes))
    rank = np.empty(len(nodes), dtype=np.int64)
    rank[by_name] = perm
    return rank


@dataclass
class EngineCore:
    """A cluster with its scheduler, tie-break ranks, fragmentation table and event recorder."""

    cluster: Cluster
    scheduler: Scheduler
    rank: np.ndarray
    rng: RandomStream
    typical: TypicalPods
    table: StateTable
    recorder: EventRecorder


def build_core(nodes: NodeSpec, policy: str | Policy, rng: RandomStream, typical: TypicalPods,
               expected_events: int = 0, resources: ResourceRegistry = RESOURCES,
               power: PowerModel = PWR_MODEL) -> EngineCore:
    """Draw the node ranks from ``rng``, then build the cluster, the scheduler and the recorder.

    ``policy``: a spec (built here) or a fresh, unattached :class:`Policy`.
    ``power`` is the model of the records' ``power_w`` / ``power_linear_w`` columns."""
    rank = node_ranks(nodes, rng)
    cluster = Cluster(nodes, resources)
    scheduler = Scheduler(cluster, policy if isinstance(policy, Policy) else make_policy(policy, typical), rank, rng)
    table = state_table(cluster, typical)
    return EngineCore(cluster, scheduler, rank, rng, typical, table, EventRecorder(cluster, table, expected_events, power))
