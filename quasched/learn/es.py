"""CMA-ES over the weights of the ``learned`` policy, in the simulator.

The search is over ``x ≥ 0`` in five dimensions, the weights of Headroom, BestFit,
GpuPacking, DotProd and GpuClustering relative to FGD's (fixed at 1: the policy is
invariant to scaling all weights), from ``x0 = (2, 0, 0, 0, 0)``, which is FGD + 2 × headroom,
with per-coordinate step sizes :data:`SCALES`. The fitness of ``x`` is the mean final GPU allocation (%, at 130 % arrived GPU request; the
return of an :class:`~quasched.learn.env.ArrivalEnv` episode) of the arrival experiment over
the training traces and seeds, each run the registry policy ``learned`` loaded from a
checkpoint of ``x``. CMA-ES (the ``cma`` package, Hansen's reference implementation) because
the fitness is noisy, non-differentiable and cheap only in a few dimensions.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import cma
import numpy as np

from quasched.model.nodes import NodeSpec
from quasched.model.workload import Workload
from quasched.policies.learned import save_weights
from quasched.sim.arrival import ExperimentConfig
from quasched.sim.sweep import run_sweep

START = (2.0, 0.0, 0.0, 0.0, 0.0)
#: initial step size per coordinate, relative to ``sigma0``: FGD's linear scale moves by a few points
#: per placement while the min-max normalised plugins span 0..100, so their useful weights are small
SCALES = (1.0, 0.05, 0.05, 0.05, 0.05)


def weights_of(x: np.ndarray) -> list[float]:
    """The six policy weights of a search point (FGD's fixed at 1, negatives clipped to 0)."""
    return [1.0, *np.maximum(np.asarray(x, dtype=float), 0.0).tolist()]


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the sweep workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def fitness(points: list[list[float]], traces: dict[str, tuple[NodeSpec, Workload]], seeds: list[int],
            workers: int = 2, config: ExperimentConfig = ExperimentConfig()) -> np.ndarray:
    """Mean final GPU allocation (%) of each weight vector over ``traces`` × ``seeds``."""
    with tempfile.TemporaryDirectory() as tmp:
        specs = [f"learned:weights={save_weights(Path(tmp) / f'{i}.json', w)}" for i, w in enumerate(points)]
        alloc = np.zeros((len(points), 0))
        for nodes, workload in traces.values():
            runs = run_sweep(nodes, workload, specs, seeds, config, workers=workers)
            alloc = np.hstack([alloc, np.array([r.final_alloc_pct for r in runs]).reshape(len(points), len(seeds))])
    return alloc.mean(axis=1)


@dataclass
class Generation:
    """One generation: its candidates' weights and fitness, the search's mean and step size, cost so far."""

    index: int
    weights: list[list[float]]
    fitness: list[float]
    mean: list[float]
    sigma: float
    cpu_s: float
    wall_s: float


@dataclass
class TrainResult:
    """The best weights evaluated so far, their fitness, the start point's fitness and the generations."""

    best_weights: list[float]
    best_fitness: float
    start_fitness: float
    history: list[Generation] = field(default_factory=list)


def train(traces: dict[str, tuple[NodeSpec, Workload]], seeds: list[int], generations: int = 10, popsize: int = 8,
          sigma0: float = 1.0, seed: int = 1, workers: int = 2,
          on_generation: Callable[[Generation, TrainResult], None] | None = None) -> TrainResult:
    """Run CMA-ES for ``generations``; the best candidate ever evaluated wins (the start point included).

    ``on_generation(generation, result so far)`` is called after each generation (e.g. to checkpoint)."""
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    es = cma.CMAEvolutionStrategy(list(START), sigma0, {"bounds": [0, None], "CMA_stds": list(SCALES),
                                                         "popsize": popsize, "seed": seed, "verbose": -9})
    start = weights_of(np.array(START))
    start_fitness = float(fitness([start], traces, seeds, workers)[0])
    result = TrainResult(start, start_fitness, start_fitness)
    for g in range(generations):
        xs = es.ask()
        points = [weights_of(x) for x in xs]
        scores = fitness(points, traces, seeds, workers)
        es.tell(xs, (-scores).tolist())
        if scores.max() > result.best_fitness:
            result.best_weights, result.best_fitness = points[int(scores.argmax())], float(scores.max())
        gen = Generation(g, points, scores.tolist(), weights_of(es.mean), float(es.sigma),
                         cpu_seconds() - cpu0, time.perf_counter() - wall0)
        result.history.append(gen)
        if on_generation:
            on_generation(gen, result)
    return result
