"""A gymnasium environment over the FGD arrival experiment: one step = one placement decision.

An episode is one run of :func:`~quasched.sim.arrival.run_experiment` for the seed given to
``reset`` (same tuned arrivals, node ranks and records). For each arriving pod the Filter
gives the feasible nodes; a *candidate* is a feasible node and, for a GPU-sharing pod, one
distinct fitting device (by its free milli), ordered by (node rank, device free milli).
Pods without a candidate fail and pods with one are placed without asking (as the
:class:`~quasched.policies.framework.Scheduler` does); otherwise the agent picks one of up
to ``max_candidates`` (if there are more, those with the best FGD score; the rest are not offered).

Observation (float64): 7 pod features (CPU / 128 cores, memory / largest node, GPU milli per
device / 1000, GPUs / 8, sharing, arrived GPU request / target, GPU allocation), then per
candidate slot :data:`CANDIDATE_FEATURES`: the normalised scores (0..100) of the
:data:`~quasched.policies.learned.FEATURES` plugins, the node's free CPU, memory and GPU after
the placement (fractions of its capacity and of 8 GPUs), the device's free milli / 1000 and
1 (0 in padding slots). ``action_masks()`` marks the real candidates (MaskablePPO's
convention); a masked slot ``i`` of ``n`` candidates means candidate ``i mod n``, so every action is valid.

Reward: GPU allocation gained (% of capacity) since the previous step, by the chosen
placement and the automatic ones before the next decision, so the return of an episode is its
final GPU allocation (%, at 130 % arrived).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np

from quasched.metrics.typical import TypicalPods
from quasched.model.nodes import NodeSpec
from quasched.model.resources import CPU, MEMORY
from quasched.model.workload import FULL_GPU_MILLI, Pod, Workload
from quasched.policies import devices
from quasched.policies.base import MAX_SPEC_CPU, MAX_SPEC_GPU, CycleState
from quasched.policies.filter import feasible_nodes
from quasched.policies.learned import FEATURES, learned_policy
from quasched.sim.arrival import ExperimentConfig, prepare
from quasched.sim.records import ARRIVE, FAIL

POD_FEATURES = 7
CANDIDATE_FEATURES = len(FEATURES) + 5
NO_DEVICE = -1


class ArrivalEnv(gym.Env):
    """The arrival experiment of ``nodes`` and ``workload`` as a masked-action environment (module docstring)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, nodes: NodeSpec, workload: Workload, max_candidates: int = 64,
                 config: ExperimentConfig = ExperimentConfig()) -> None:
        self.nodes, self.workload, self.config, self.k = nodes, workload, config, max_candidates
        self.typical = TypicalPods.from_workload(workload, config.typical_threshold)
        self.size = POD_FEATURES + max_candidates * CANDIDATE_FEATURES
        self.observation_space = gym.spaces.Box(0.0, 100.0, (self.size,), np.float64)
        self.action_space = gym.spaces.Discrete(max_candidates)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        run_seed = seed if seed is not None else int(self.np_random.integers(2**31))
        extractor = learned_policy(self.typical, [1.0] * len(FEATURES))
        self.pods, self.core = prepare(self.nodes, self.workload, replace(self.config, seed=run_seed), self.typical,
                                       extractor)
        cluster = self.core.cluster
        self.requests = self.pods.gpu_request.tolist()
        self.target = max(sum(self.requests), 1)
        self.capacity_milli = FULL_GPU_MILLI * max(cluster.total_gpus, 1)
        self.mem_scale = max(int(cluster.capacity[:, MEMORY].max()), 1)
        self.next_pod, self.arrived, self.rewarded, self.over = 0, 0, 0, False
        self._advance()
        return self._observation(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.over:
            raise RuntimeError("the episode is over; call reset()")
        if self.pending is not None:
            pod, node, free = self.pending
            if not 0 <= action < self.k:
                raise ValueError(f"action {action} is not in 0..{self.k - 1}")
            pick = int(action) % len(node)  # a masked slot folds onto a candidate
            self._bind(pod, int(node[pick]), int(free[pick]))
            self._advance()
        now = self.core.cluster.gpu_allocated
        reward, self.rewarded = 100.0 * (now - self.rewarded) / self.capacity_milli, now
        self.over = self.pending is None
        return self._observation(), reward, self.over, False, {}

    def action_masks(self) -> np.ndarray:
        """True for the candidate slots (slot 0 alone once no decision is left)."""
        mask = np.zeros(self.k, dtype=bool)
        mask[: len(self.pending[1]) if self.pending else 1] = True
        return mask

    def _advance(self) -> None:
        """Place pods until one needs a decision (``self.pending``) or none is left."""
        cluster, self.pending = self.core.cluster, None
        while self.next_pod < len(self.pods):
            pod = self.pods.pod(self.next_pod)
            self.core.rng.on_schedule_cycle()
            nodes = feasible_nodes(cluster, pod)
            if len(nodes) == 0:
                self._bind(pod, -1)
            elif len(nodes) == 1 and not pod.is_sharing:
                self._bind(pod, int(nodes[0]))
            else:
                node, free, self.features = self._candidates(pod, nodes)
                if len(node) > 1:
                    self.pending = (pod, node, free)
                    return
                self._bind(pod, int(node[0]), int(free[0]))

    def _candidates(self, pod: Pod, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Candidate nodes, device free milli (or NO_DEVICE) and features, best ``k`` by FGD."""
        cluster, state = self.core.cluster, CycleState()
        parts = [p.normalize(p.score(cluster, pod, nodes, state)) for p, _ in self.core.scheduler.policy.plugins]
        gpu = np.sort(cluster.gpu_free[nodes], axis=1)
        if pod.is_sharing:  # distinct fitting device columns, as the device-aware plugins score them
            valid = (gpu >= pod.gpu_milli) & np.concatenate([np.ones((len(nodes), 1), bool), gpu[:, 1:] != gpu[:, :-1]], 1)
        else:
            valid = np.zeros_like(gpu, dtype=bool)
            valid[:, 0] = True
        rows, cols = np.nonzero(valid)
        order = np.lexsort((cols, self.core.rank[nodes[rows]]))
        rows, cols = rows[order], cols[order]
        scores = np.stack([p[rows, cols] if p.ndim == 2 else p[rows] for p in parts], axis=1)
        if len(rows) > self.k:
            keep = np.sort(np.argsort(-scores[:, 0], kind="stable")[: self.k])
            rows, cols, scores = rows[keep], cols[keep], scores[keep]
        node = nodes[rows]
        free = gpu[rows, cols] if pod.is_sharing else np.full(len(rows), NO_DEVICE)
        left = np.stack([(cluster.free[node, CPU] - pod.cpu_milli) / cluster.capacity[node, CPU],
                         (cluster.free[node, MEMORY] - pod.memory_mib) / np.maximum(cluster.capacity[node, MEMORY], 1),
                         (cluster.gpu_free[node].sum(axis=1) - pod.gpu_request) / MAX_SPEC_GPU,
                         np.maximum(free, 0) / FULL_GPU_MILLI, np.ones(len(node))], axis=1)
        return node, free, np.concatenate([scores, np.clip(left, 0, 1)], axis=1)

    def _bind(self, pod: Pod, node: int, free: int = NO_DEVICE) -> None:
        """Place ``pod`` on ``node`` (-1: it fails), a sharing pod on the first device with ``free`` milli."""
        e, cluster = self.next_pod, self.core.cluster
        if node >= 0:
            gpu = cluster.gpu_free[node]
            cluster.place(pod, node, (int(np.flatnonzero(gpu == free)[0]),) if pod.is_sharing else devices.best_fit(gpu, pod))
        self.arrived += self.requests[e]
        self.core.recorder.record(float(e), ARRIVE if node >= 0 else FAIL, e, node, arrived_gpu_milli=self.arrived)
        self.next_pod += 1

    def _observation(self) -> np.ndarray:
        obs = np.zeros(self.size, dtype=np.float64)
        if self.pending is None:
            return obs
        pod = self.pending[0]
        obs[:POD_FEATURES] = np.clip([pod.cpu_milli / MAX_SPEC_CPU, pod.memory_mib / self.mem_scale,
                                      pod.gpu_milli / FULL_GPU_MILLI, pod.num_gpu / 8, float(pod.is_sharing),
                                      self.arrived / self.target, self.core.cluster.gpu_allocated / self.capacity_milli],
                                     0, 1)
        block = obs[POD_FEATURES:].reshape(self.k, CANDIDATE_FEATURES)
        block[: len(self.features)] = np.clip(self.features, 0, 100)
        return obs


def candidate_block(obs: np.ndarray, k: int) -> np.ndarray:
    """The ``(k, CANDIDATE_FEATURES)`` candidate rows of an observation."""
    return obs[POD_FEATURES:].reshape(k, CANDIDATE_FEATURES)


def linear_action(obs: np.ndarray, mask: np.ndarray, weights: list[float]) -> int:
    """The learned policy's choice: the first masked-in slot with the highest weighted score sum.

    Summed in :class:`~quasched.policies.framework.Policy`'s order and arithmetic (zero
    weights left out, weight 1 not multiplied), so the choice is the policy's, ties included.
    """
    rows = candidate_block(obs, len(mask))
    total: np.ndarray | None = None
    for i, w in enumerate(weights):
        if w != 0:
            part = rows[:, i] if w == 1 else w * rows[:, i]
            total = part if total is None else total + part
    assert total is not None, "weights must not all be 0"
    return int(np.argmax(np.where(mask, total, -np.inf)))
