"""The batch assignment problem: place jobs on machines, each at most (or exactly) once.

A :class:`BatchProblem` holds raw arrays (requests, capacities, apps, limits,
GPU models, submission times) plus the rule parameters. Derived arrays used by
solvers (priority weights, allowed pairs, heavy flags) are computed here; the
verifier (:mod:`quasched.optimize.verifier`) recomputes its own from the raw ones.

Constraints, per machine ``j``:

- capacity: the summed requests of its jobs fit every resource of ``j``;
- GPU model: a GPU job only runs on a machine whose model satisfies its spec;
- density: with ``enforce_max_per_node``, a job with limit ``L >= 1`` shares
  ``j`` with at most ``L - 1`` other jobs of its app (order-independent form
  of ``max_instance_per_node``);
- anti-colocation (:class:`HeavyRule`).

Objective: the ``k``-th job of an app in submission order weighs
``alpha ** (k - 1)`` (jobs without app weigh 1); maximise the placed weight,
``lexicographic`` then maximises the number of placed jobs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from quasched.model.nodes import NodeSpec, accessible
from quasched.model.resources import RESOURCES as MODEL_RESOURCES
from quasched.model.workload import FULL_GPU_MILLI, NO_LIMIT, Workload

#: resources a problem can constrain, with the workload column each comes from
RESOURCES = ("cpu_milli", "gpu_milli", "memory_mib", "rdma", "disk_mib")
DEFAULT_RESOURCES = ("cpu_milli", "gpu_milli", "memory_mib")
OBJECTIVES = ("weighted", "lexicographic")


@dataclass(frozen=True)
class HeavyRule:
    """Heavy-job anti-colocation.

    A job is *heavy* (``hi``) or *lightly heavy* (``lo``) on a machine when it
    requests more than that share of the machine's capacity of some listed
    resource. Two jobs conflict (may not share a machine) when one is ``hi``
    and the other ``lo``. With equal thresholds (the default) this is "two
    heavy jobs never share a machine".
    """

    hi: Mapping[str, float] = field(default_factory=lambda: dict.fromkeys(DEFAULT_RESOURCES, 0.4))
    lo: Mapping[str, float] | None = None

    @classmethod
    def symmetric(cls, threshold: float = 0.4, resources: tuple[str, ...] = DEFAULT_RESOURCES) -> HeavyRule:
        return cls(dict.fromkeys(resources, threshold))

    @classmethod
    def qua(cls) -> HeavyRule:
        """Qua's rule: CPU over 40 %, GPU over 40 % vs 30 %; memory does not count.

        Qua checks a newcomer's GPU share against 0.4 and the jobs already on
        the machine against 0.3; here a pair conflicts when one is above 0.4
        and the other above 0.3, whatever their order.
        """
        return cls({"cpu_milli": 0.4, "gpu_milli": 0.4}, {"cpu_milli": 0.4, "gpu_milli": 0.3})

    @property
    def low(self) -> Mapping[str, float]:
        return self.hi if self.lo is None else self.lo

    def describe(self) -> str:
        parts = [
            f"{r.split('_')[0]}>{self.hi[r]:g}" + (f"/{self.low[r]:g}" if self.low.get(r) != self.hi[r] else "")
            for r in self.hi
        ]
        return "heavy: " + ", ".join(parts)


@dataclass(frozen=True)
class BatchProblem:
    """Jobs (rows of ``demand``) and machines (rows of ``capacity``) over ``resources``."""

    demand: np.ndarray  # (n, R) int64
    capacity: np.ndarray  # (m, R) int64
    resources: tuple[str, ...]
    app: np.ndarray  # (n,) int64, NO_LIMIT = no app
    max_per_node: np.ndarray  # (n,) int64, NO_LIMIT = no limit
    job_gpu_model: np.ndarray  # (n,) str, "" = any model
    machine_gpu_model: np.ndarray  # (m,) str
    submit_time: np.ndarray  # (n,) float, submission order (ties: row order)
    app_names: tuple[str, ...] = ()
    job_names: np.ndarray | None = None
    machine_names: np.ndarray | None = None
    alpha: float = 0.6
    heavy: HeavyRule = field(default_factory=HeavyRule)
    enforce_max_per_node: bool = True
    exactly_once: bool = False
    objective: str = "weighted"
    name: str = ""

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        unknown = set(self.heavy.hi) - set(self.resources)
        if unknown:
            raise ValueError(f"heavy rule names resources {sorted(unknown)} not in {self.resources}")

    @property
    def n_jobs(self) -> int:
        return len(self.demand)

    @property
    def n_machines(self) -> int:
        return len(self.capacity)

    # ---------------------------------------------------------------- derived
    @cached_property
    def order(self) -> np.ndarray:
        """Job indices in submission order (stable)."""
        return np.argsort(np.nan_to_num(self.submit_time, nan=np.inf), kind="stable")

    @cached_property
    def rank(self) -> np.ndarray:
        """1-based position of each job among its app's jobs in submission order (1 without app)."""
        rank = np.ones(self.n_jobs, dtype=np.int64)
        seen: dict[int, int] = {}
        for i in self.order.tolist():
            a = int(self.app[i])
            if a != NO_LIMIT:
                seen[a] = seen.get(a, 0) + 1
                rank[i] = seen[a]
        return rank

    @cached_property
    def weight(self) -> np.ndarray:
        return self.alpha ** (self.rank - 1).astype(float)

    @cached_property
    def allowed(self) -> np.ndarray:
        """(n, m) bool: job i's GPU-model constraint admits machine j."""
        specs, inverse = np.unique(self.job_gpu_model.astype(str), return_inverse=True)
        models = self.machine_gpu_model.astype(str)
        table = np.array([[accessible(mdl, s) for mdl in models] for s in specs], dtype=bool)
        return table[inverse.ravel()]

    def _over(self, thresholds: Mapping[str, float]) -> np.ndarray:
        over = np.zeros((self.n_jobs, self.n_machines), dtype=bool)
        for r, share in thresholds.items():
            k = self.resources.index(r)
            over |= self.demand[:, k][:, None] > share * self.capacity[:, k][None, :]
        return over

    @cached_property
    def heavy_hi(self) -> np.ndarray:
        """(n, m) bool: job is heavy on machine by the ``hi`` thresholds."""
        return self._over(self.heavy.hi)

    @cached_property
    def heavy_lo(self) -> np.ndarray:
        """(n, m) bool: job is heavy on machine by the ``lo`` thresholds (superset of ``hi`` when lo <= hi)."""
        return self._over(self.heavy.low) | self.heavy_hi

    @cached_property
    def limit(self) -> np.ndarray:
        """Effective per-node app limit per job (NO_LIMIT when none or not enforced)."""
        if not self.enforce_max_per_node:
            return np.full(self.n_jobs, NO_LIMIT, dtype=np.int64)
        return np.where(self.app == NO_LIMIT, NO_LIMIT, self.max_per_node).astype(np.int64)

    def fits_alone(self) -> np.ndarray:
        """(n, m) bool: job fits an empty machine (capacity and GPU model)."""
        fit = np.all(self.demand[:, None, :] <= self.capacity[None, :, :], axis=2)
        return fit & self.allowed

    def obvious_infeasibility(self) -> str | None:
        """Why ``exactly_once`` cannot hold, when a quick necessary check already fails."""
        alone = self.fits_alone()
        homeless = np.flatnonzero(~alone.any(axis=1))
        if len(homeless):
            return f"{len(homeless)} job(s) fit no machine, e.g. job {self.job_label(int(homeless[0]))}"
        over = self.demand.sum(axis=0) > self.capacity.sum(axis=0)
        if over.any():
            r = self.resources[int(np.argmax(over))]
            return f"total {r} request {self.demand[:, self.resources.index(r)].sum()} exceeds capacity"
        always_heavy = np.flatnonzero(self.heavy_hi.all(axis=1))
        if len(always_heavy) > self.n_machines:
            return f"{len(always_heavy)} heavy jobs but only {self.n_machines} machines"
        return None

    def job_label(self, i: int) -> str:
        return str(self.job_names[i]) if self.job_names is not None else str(i)

    def with_options(self, **changes) -> BatchProblem:
        """A copy with some fields changed (derived arrays recomputed)."""
        values = {f: getattr(self, f) for f in self.__dataclass_fields__}
        values.update(changes)
        return BatchProblem(**values)


def _scalar_columns(resources: tuple[str, ...]) -> dict[str, int]:
    """Registry column of each problem resource named by its model column (``cpu_milli``, ...)."""
    return {r.column or r.name: i for i, r in enumerate(MODEL_RESOURCES) if (r.column or r.name) in resources}


def job_demand(workload: Workload, resources: tuple[str, ...]) -> np.ndarray:
    """(n, R) requests from the cluster model's request matrix; ``gpu_milli`` is ``num_gpu * gpu_milli``.

    Device-level packing is not modelled: the batch problem aggregates GPUs per machine.
    """
    matrix, columns = workload.requests(MODEL_RESOURCES), _scalar_columns(resources)
    return np.stack([workload.gpu_request.astype(np.int64) if r == "gpu_milli" else matrix[:, columns[r]]
                     for r in resources], axis=1)


def node_capacity(nodes: NodeSpec, resources: tuple[str, ...]) -> np.ndarray:
    """(m, R) capacities from the cluster model's capacity matrix (its defaults: RDMA 100 %, disk unlimited)."""
    matrix, columns = MODEL_RESOURCES.capacity_matrix(nodes), _scalar_columns(resources)
    return np.stack([(nodes.num_gpus * FULL_GPU_MILLI).astype(np.int64) if r == "gpu_milli" else matrix[:, columns[r]]
                     for r in resources], axis=1)


def from_workload(
    workload: Workload,
    nodes: NodeSpec,
    *,
    resources: tuple[str, ...] = DEFAULT_RESOURCES,
    name: str = "",
    **options,
) -> BatchProblem:
    """The batch problem of placing every row of ``workload`` on ``nodes``.

    GPU requests are aggregated per machine (``num_gpu * gpu_milli`` against
    ``num_gpus * 1000``); device-level packing of GPU-sharing jobs is not modelled.
    ``options`` are :class:`BatchProblem` fields (alpha, heavy, exactly_once, ...).
    """
    bad = set(resources) - set(RESOURCES)
    if bad:
        raise ValueError(f"unknown resources {sorted(bad)}; choose from {RESOURCES}")
    return BatchProblem(
        demand=job_demand(workload, resources),
        capacity=node_capacity(nodes, resources),
        resources=tuple(resources),
        app=np.asarray(workload.app, dtype=np.int64),
        max_per_node=np.asarray(workload.max_per_node, dtype=np.int64),
        job_gpu_model=np.where(workload.gpu_request > 0, workload.gpu_model, "").astype(object),
        machine_gpu_model=np.where(nodes.num_gpus > 0, nodes.gpu_model, "").astype(object),
        submit_time=np.asarray(workload.creation_time, dtype=float),
        app_names=tuple(workload.app_names),
        job_names=np.asarray(workload.name, dtype=object),
        machine_names=np.asarray(nodes.name, dtype=object),
        name=name or workload.source,
        **options,
    )


def small_problem(demand: ArrayLike, capacity: ArrayLike, *, apps: Sequence[int] | None = None,
                  limits: Sequence[int] | None = None, specs: Sequence[str] | None = None,
                  models: Sequence[str] | None = None,
                  resources: tuple[str, ...] = ("cpu_milli", "gpu_milli", "memory_mib"), **options: Any) -> BatchProblem:
    """A hand-made problem: ``demand`` rows per job and ``capacity`` rows per machine over ``resources``.

    Jobs are submitted in row order; ``apps``/``limits`` default to no app and no limit,
    ``specs`` to any GPU model, ``models`` to ``"GPU"``.
    """
    demand, capacity = np.asarray(demand, dtype=np.int64), np.asarray(capacity, dtype=np.int64)
    n, m = len(demand), len(capacity)
    app = np.asarray(apps if apps is not None else [NO_LIMIT] * n, dtype=np.int64)
    return BatchProblem(
        demand=demand, capacity=capacity, resources=tuple(resources), app=app,
        max_per_node=np.asarray(limits if limits is not None else [NO_LIMIT] * n, dtype=np.int64),
        job_gpu_model=np.asarray(specs if specs is not None else [""] * n, dtype=object),
        machine_gpu_model=np.asarray(models if models is not None else ["GPU"] * m, dtype=object),
        submit_time=np.arange(n, dtype=float),
        app_names=tuple(f"app_{a}" for a in range(int(app.max(initial=-1)) + 1)),
        **options,
    )
