"""One scheduling cycle: Filter → Score → NormalizeScore → select host → Reserve → bind.

A :class:`Policy` is a scheduling profile: weighted score plugins
(:mod:`quasched.policies.base`) plus a Reserve rule for GPU devices. Its
node score is ``Σ_i w_i · normalize_i(score_i)``; for GPU-sharing pods the
device-aware plugins' per-device columns are combined first and a node scores
its best device.

Host selection follows the FGD simulator's fork of kube-scheduler: the highest
score wins and ties go to the node with the smallest *rank*, a fixed random
permutation of the nodes drawn once per run (not a fresh draw per decision).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from quasched.model.cluster import Cluster
from quasched.model.random import RandomStream
from quasched.model.workload import Pod
from quasched.policies import devices
from quasched.policies.base import CycleState, ScorePlugin
from quasched.policies.filter import Feasibility, demand_key
from quasched.policies.host_board import HostBoard

UNSCHEDULED = -1
DeviceRule = Literal["tightest", "uniform", "best-score", "best-score-tightest"]


class Policy:
    """Weighted score plugins and a device rule.

    ``device_rule`` (Reserve, GPU-sharing pods): ``"tightest"`` the fitting
    device with least free milli; ``"uniform"`` a random fitting device;
    ``"best-score"`` the best-scoring device of the device-aware plugins
    (lowest index on ties); ``"best-score-tightest"`` the same with ties to the
    tightest device. Whole-GPU pods always get the lowest-index free devices.
    """

    def __init__(self, plugins: Sequence[tuple[ScorePlugin, float]], device_rule: DeviceRule = "tightest",
                 name: str = "") -> None:
        self.plugins = [(p, w) for p, w in plugins if w != 0]
        self.device_rule = device_rule
        self.name = name or "+".join(p.name for p, _ in self.plugins)
        self._aware = [(p, w) for p, w in self.plugins if p.device_aware]
        alone = self.plugins[0][0] if len(self.plugins) == 1 and self.plugins[0][1] == 1 else None
        #: the one plugin of weight 1 without NormalizeScore (its best scores are the node scores), else None
        self.alone = alone if alone is not None and type(alone).normalize is ScorePlugin.normalize else None

    def attach(self, cluster: Cluster, rng: RandomStream) -> None:
        self.rng = rng
        for plugin, _ in self.plugins:
            plugin.attach(cluster, rng)

    def score(self, cluster: Cluster, pod: Pod, nodes: np.ndarray, state: CycleState) -> np.ndarray:
        """Final score per feasible node (Score + NormalizeScore + weights)."""
        if self.alone:  # one plugin, weight 1, no NormalizeScore: its best columns, Reserve re-scores one node
            return self.alone.best(cluster, pod, nodes, state)
        total = None
        for plugin, weight in self.plugins:
            part = plugin.normalize(plugin.score(cluster, pod, nodes, state))
            part = weight * part if weight != 1 else part
            if total is None:
                total = part
            elif total.ndim == part.ndim:
                total = total + part
            else:  # per-device columns plus per-node scores
                total = (total[:, None] if total.ndim == 1 else total) + (part[:, None] if part.ndim == 1 else part)
        assert total is not None, "a policy needs at least one score plugin"
        if total.ndim == 2:
            state["device_scores"] = (nodes, total)
            return total.max(axis=1)
        return total

    def reserve(self, cluster: Cluster, pod: Pod, node: int, state: CycleState) -> tuple[int, ...]:
        """The GPU devices ``pod`` gets on ``node``."""
        free = cluster.gpu_free[node]
        if not pod.is_sharing:
            return devices.best_fit(free, pod)
        if self.device_rule == "uniform":
            return devices.uniform(free, pod, self.rng)
        if self.device_rule == "tightest" or not self._aware:
            return devices.best_fit(free, pod)
        columns = self._device_columns(cluster, pod, node, state)
        best = np.sort(free)[columns == columns.max()]  # free milli of the best columns, ascending
        candidates = np.flatnonzero((free[:, None] == best[None, :]).any(axis=1))
        if self.device_rule == "best-score-tightest":
            candidates = candidates[free[candidates] == free[candidates].min()]
        return (int(candidates[0]),)

    def _device_columns(self, cluster: Cluster, pod: Pod, node: int, state: CycleState) -> np.ndarray:
        """Combined per-device columns of ``node``: from Score when it ran, else from the device-aware plugins."""
        if "device_scores" in state:
            nodes, scores = state["device_scores"]
            return scores[int(np.searchsorted(nodes, node))]
        one = np.array([node])
        parts = [w * p.normalize(p.score(cluster, pod, one, state)) for p, w in self._aware]
        return sum(parts[1:], parts[0])[0]

    def __repr__(self) -> str:
        return f"Policy({self.name})"


@dataclass(frozen=True, slots=True)
class Decision:
    """Outcome of one cycle: the node (``-1`` = unschedulable) and devices."""

    node: int
    devices: tuple[int, ...] = ()
    n_feasible: int = 0
    #: the node's version when the Filter passed it (lets the bind skip re-checking an unchanged node)
    version: int | None = None

    @property
    def placed(self) -> bool:
        return self.node != UNSCHEDULED


class Scheduler:
    """Runs scheduling cycles of one policy on one (possibly changing) cluster."""

    def __init__(self, cluster: Cluster, policy: Policy, rank: np.ndarray, rng: RandomStream,
                 cpu_pods_off_gpu_nodes: bool = False) -> None:
        """``cpu_pods_off_gpu_nodes``: a pod without GPUs goes to a node without GPUs whenever one fits it (the
        policy's scores choose among those), so GPU nodes keep their CPU and memory for GPU pods; off in the
        simulators, whose published placements it would change."""
        if sorted(rank.tolist()) != list(range(cluster.n_nodes)):
            raise ValueError("rank must be a permutation of the node indices")
        self.cluster = cluster
        self.policy = policy
        self.rank = np.asarray(rank, dtype=np.int64)
        self.rng = rng
        self.cpu_pods_off_gpu_nodes = cpu_pods_off_gpu_nodes
        self.feasibility = Feasibility(cluster)
        self.board = HostBoard(cluster)
        policy.attach(cluster, rng)

    def decide(self, pod: Pod, candidates: np.ndarray | None = None, *, counted: bool = True) -> Decision:
        """Pick a node and devices for ``pod`` without binding it, in one cycle among the node slots ``candidates``
        (None: every node) that fit it: Filter (the cached fit masks), the host (from the :class:`HostBoard` when
        the policy's one plugin allows it and every fitting node is a candidate: the same node as :meth:`select` of
        all scores), Reserve.

        ``counted``: the stream's cycle hook runs (the simulators' and the loop's cycles; kube-scheduler's
        filter, asked any number of times per pod, is not one of the loop's and leaves the stream alone)."""
        if counted:
            self.rng.on_schedule_cycle()
        key = demand_key(pod)
        mask = fits = self.feasibility.mask(pod, key)
        if candidates is not None:
            mask = np.zeros_like(fits)
            mask[candidates] = True
            mask &= fits
        n_feasible = int(np.count_nonzero(mask))
        if n_feasible == 0:
            return Decision(UNSCHEDULED)
        state = CycleState()
        alone, node = self.policy.alone, None
        if candidates is not None and n_feasible != int(np.count_nonzero(fits)):
            alone = None  # the board keeps the scores of every fitting node
        if self.cpu_pods_off_gpu_nodes and not pod.is_gpu and (spare := mask & (self.cluster.num_gpus == 0)).any():
            mask, n_feasible, alone = spare, int(np.count_nonzero(spare)), None  # the board ranks every fitting node
        if alone is not None and (epoch := alone.epoch()) is not None:
            node = self.board.pick(alone, epoch, pod, key, mask, self._ranks())
        if node is None:
            nodes = np.flatnonzero(mask)
            node = int(nodes[0]) if n_feasible == 1 else self.select(nodes, self.policy.score(self.cluster, pod, nodes, state))
        picked = self.policy.reserve(self.cluster, pod, node, state) if pod.is_gpu else ()
        return Decision(node, picked, n_feasible, int(self.cluster.version[node]))

    def select(self, nodes: np.ndarray, scores: np.ndarray) -> int:
        """The host among ``nodes`` (scored ``scores``): the highest score, ties to the smallest rank."""
        best = nodes[scores == scores.max()]
        rank = self._ranks()
        return int(best[np.argmin(rank[best])])

    def _ranks(self) -> np.ndarray:
        """Tie-break ranks; node slots added after the start rank after every earlier node."""
        if len(self.rank) < self.cluster.n_nodes:
            self.rank = np.concatenate([self.rank, np.arange(len(self.rank), self.cluster.n_nodes)])
        return self.rank

    def schedule(self, pod: Pod) -> Decision:
        """Decide and bind; an unschedulable pod leaves the cluster unchanged."""
        decision = self.decide(pod)
        if decision.placed:
            self.cluster.place(pod, decision.node, decision.devices, filtered_at=decision.version)
        return decision
