"""One event-record schema for every engine.

After each event an engine appends one row describing the event and the
cluster state it left. The same names mean the same thing everywhere:

================== =====================================================
``time``           seconds (trace time); the arrival experiment uses the event index
``kind``           index into :data:`KIND_NAMES`
``pod``            the pod's uid in the engine's workload
``node``           node slot, ``-1`` = none
``queue_len``      pods waiting after the event
``arrived_gpu_milli`` GPU request of all pods arrived so far (milli)
``used_gpu_milli`` allocated GPU milli
``used_gpus``      GPU devices with any allocation
``used_nodes``     nodes with GPU or CPU allocation
``gpus_on_used_nodes`` GPU devices of those nodes (the FGD artifact's ``used_gpus``)
``cpu_alloc_pct``, ``mem_alloc_pct``, ``gpu_alloc_pct`` allocation in % of capacity
``frag_milli``, ``frag_ratio``, ``q124_ratio`` fragmentation (milli, % of idle GPU milli)
``power_w``        modelled power of the present nodes, W, PWR's step model
``power_linear_w`` the same under the linear fractional model (:mod:`quasched.metrics.power`)
================== =====================================================
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from quasched.metrics.allocation import percent
from quasched.metrics.fragmentation import StateTable, cluster_fragmentation
from quasched.metrics.power import PWR_MODEL, PowerMeter, PowerModel
from quasched.model.cluster import Cluster
from quasched.model.resources import CPU, MEMORY
from quasched.model.workload import FULL_GPU_MILLI

#: Event kinds (``EventRecords.kind``).
ARRIVE, QUEUE, START, DEPART, WITHDRAW, FAIL, KILL, DOWN, UP, MIGRATE = range(10)
KIND_NAMES = ("arrive", "queue", "start", "depart", "withdraw", "fail", "kill", "down", "up", "migrate")
"""arrive: placed on arrival; queue: arrived (or killed), nothing fits, queued; start: a
queued or killed pod placed; depart: a running pod left; withdraw: a queued pod left
unplaced; fail: arrived, nothing fits, dropped (the arrival experiment); kill: a running pod
killed by a GPU failure (replay with failures); down / up: a GPU device failed / is back
(``pod`` = -1, ``node`` = its node); migrate: a running pod checkpointed and taken off its node
after a GPU error (proactive migration), placed again by the next rows."""

_INTS = ("pod", "node", "queue_len", "arrived_gpu_milli", "used_gpu_milli", "used_gpus", "used_nodes",
         "gpus_on_used_nodes")
_FLOATS = ("time", "cpu_alloc_pct", "mem_alloc_pct", "gpu_alloc_pct", "frag_milli", "frag_ratio", "q124_ratio",
           "power_w", "power_linear_w")
#: columns that describe the cluster state
STATE_COLUMNS = ("used_gpu_milli", "used_gpus", "used_nodes", "gpus_on_used_nodes", "cpu_alloc_pct",
                 "mem_alloc_pct", "gpu_alloc_pct", "frag_milli", "frag_ratio", "q124_ratio", "power_w",
                 "power_linear_w")


@dataclass
class EventRecords:
    """One row per event (module docstring), column arrays."""

    time: np.ndarray
    kind: np.ndarray
    pod: np.ndarray
    node: np.ndarray
    queue_len: np.ndarray
    arrived_gpu_milli: np.ndarray
    used_gpu_milli: np.ndarray
    used_gpus: np.ndarray
    used_nodes: np.ndarray
    gpus_on_used_nodes: np.ndarray
    cpu_alloc_pct: np.ndarray
    mem_alloc_pct: np.ndarray
    gpu_alloc_pct: np.ndarray
    frag_milli: np.ndarray
    frag_ratio: np.ndarray
    q124_ratio: np.ndarray
    power_w: np.ndarray
    power_linear_w: np.ndarray

    @classmethod
    def empty(cls, n: int) -> EventRecords:
        """Zeroed records for ``n`` events (filled by :class:`EventRecorder`)."""
        return cls(kind=np.zeros(n, dtype=np.int8), **{k: np.zeros(n, dtype=np.int64) for k in _INTS},
                   **{k: np.zeros(n) for k in _FLOATS})

    def truncate(self, n: int) -> EventRecords:
        """A copy of the first ``n`` events."""
        return EventRecords(**{f.name: getattr(self, f.name)[:n].copy() for f in fields(self)})

    def __len__(self) -> int:
        return len(self.time)

    @property
    def kind_name(self) -> np.ndarray:
        return np.asarray(KIND_NAMES, dtype=object)[self.kind]

    def columns(self, pod_names: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Columns for a table or CSV (``kind`` as names, ``pod`` as names if given; "" for no pod)."""
        cols = {f.name: getattr(self, f.name) for f in fields(self)}
        cols["kind"] = self.kind_name
        if pod_names is not None:
            cols["pod"] = np.where(self.pod >= 0, np.asarray(pod_names, dtype=object)[self.pod], "")
        return cols


class EventRecorder:
    """Appends rows to :class:`EventRecords` from a cluster, its fragmentation table and a power model."""

    def __init__(self, cluster: Cluster, table: StateTable, capacity: int, power: PowerModel = PWR_MODEL) -> None:
        self.cluster = cluster
        self.table = table
        self.power = PowerMeter(cluster, power)
        self.records = EventRecords.empty(capacity)
        self.n = 0

    def record(self, time: float, kind: int, pod: int, node: int, queue_len: int = 0,
               arrived_gpu_milli: int = 0, state_changed: bool = True) -> None:
        """Append one row; with ``state_changed=False`` the state columns repeat the previous row."""
        r, e, c = self.records, self.n, self.cluster
        if e == len(r.time):
            grown = EventRecords.empty(2 * e + 16)
            for f in fields(r):
                getattr(grown, f.name)[:e] = getattr(r, f.name)
            self.records = r = grown
        r.time[e], r.kind[e], r.pod[e], r.node[e] = time, kind, pod, node
        r.queue_len[e], r.arrived_gpu_milli[e] = queue_len, arrived_gpu_milli
        self.n = e + 1
        if not state_changed and e > 0:
            for column in STATE_COLUMNS:
                values = getattr(r, column)
                values[e] = values[e - 1]
            return
        report = cluster_fragmentation(self.table)
        gpu_capacity = FULL_GPU_MILLI * c.total_gpus
        r.used_gpu_milli[e] = c.gpu_allocated
        r.used_gpus[e] = c.devices_in_use
        r.used_nodes[e] = c.nodes_in_use
        r.gpus_on_used_nodes[e] = c.gpus_on_used_nodes
        r.cpu_alloc_pct[e] = percent(c.allocated[CPU], c.capacity_total[CPU])
        r.mem_alloc_pct[e] = percent(c.allocated[MEMORY], c.capacity_total[MEMORY])
        r.gpu_alloc_pct[e] = percent(c.gpu_allocated, gpu_capacity)
        r.frag_milli[e] = report.frag_milli
        r.frag_ratio[e] = report.frag_ratio
        r.q124_ratio[e] = report.q124_ratio
        r.power_w[e], r.power_linear_w[e] = self.power.refresh()

    def result(self) -> EventRecords:
        """The events recorded so far."""
        return self.records.truncate(self.n)

