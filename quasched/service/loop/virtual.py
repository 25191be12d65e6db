"""The service's loop driven by a trace on a virtual clock (``quasched serve --clock virtual``).

Each trace row is submitted at its creation time as a one-pod job of the
queue ``default``; the driver plays the jobs' runtime: a job runs for its
trace lifetime (deletion − creation) from the moment it starts, open-ended
ones until the end of the trace. At equal timestamps completions come
before submissions and are followed by one cycle, as in
:func:`quasched.sim.replay.replay` with ``departure="duration"``; with FIFO
order, no quotas and no preemption, the placements are the replay's
(``tests/service/loop/test_service_virtual.py``).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from quasched.metrics.typical import TypicalPods
from quasched.model.nodes import NodeSpec
from quasched.model.workload import Workload
from quasched.policies.registry import parse_spec
from quasched.service.domain import JobSpec, QueueSpec
from quasched.service.loop.controller import Controller
from quasched.service.loop.state import LoopOptions
from quasched.sim.engine import RngKind
from quasched.sim.events import build_timeline


@dataclass
class VirtualRun:
    """Per workload row: job id (-1 = skipped), start time and first pod's node name ("" = never ran)."""

    controller: Controller
    job: np.ndarray
    started: np.ndarray
    node: np.ndarray
    devices: list[tuple[int, ...]]
    events: int


def job_spec(workload: Workload, row: int, team: str = "default") -> JobSpec:
    """A one-pod job of a workload row (RDMA and disk requests are not part of a service job)."""
    if int(workload.rdma[row]) or int(workload.disk_mib[row]):
        raise ValueError(f"{workload.source or 'workload'} row {row}: RDMA/disk requests are not supported by the service")
    app = int(workload.app[row])
    return JobSpec(
        name=str(workload.name[row]), team=team, cpu_milli=int(workload.cpu_milli[row]),
        memory_mib=int(workload.memory_mib[row]), num_gpu=int(workload.num_gpu[row]),
        gpu_milli=int(workload.gpu_milli[row]), gpu_model=str(workload.gpu_model[row]),
        app=workload.app_names[app] if app >= 0 else "", max_per_node=int(workload.max_per_node[row]))


def run_virtual(nodes: NodeSpec, workload: Workload, policy: str = "fgd", seed: int = 42,
                rng: RngKind = "native", typical: TypicalPods | None = None) -> VirtualRun:
    """Replay ``workload`` through a :class:`Controller` on a virtual clock (module docstring)."""
    timeline = build_timeline(workload, "start")
    typical = typical or TypicalPods.from_workload(workload)
    ctl = Controller(nodes, [QueueSpec("default")],
                     LoopOptions(policy=parse_spec(policy), seed=seed, rng=rng, order="fifo", preemption=False,
                                 sample_s=float("inf"), cpu_pods_off_gpu_nodes=False), typical=typical)
    n = len(workload)
    run = VirtualRun(ctl, np.full(n, -1), np.full(n, np.nan), np.full(n, "", dtype=object), [()] * n, 0)
    row_of: dict[int, int] = {}
    open_ended: list[tuple[float, int]] = []  # (leave time, job id): jobs without a trace deletion time

    def observe() -> None:
        jobs, events = ctl.drain_changes()
        run.events += len(events)
        by_id = {job.id: job for job in jobs}
        for event in events:  # from the events: a zero-length job starts and ends within one drain
            if event.kind == "started" and event.job_id is not None:
                row = row_of[event.job_id]
                run.started[row], run.node[row] = event.time, event.node
                run.devices[row] = tuple(event.data["devices"][0])
                if by_id[event.job_id].spec.duration_s is None:
                    heapq.heappush(open_ended, (max(event.time, timeline.end), event.job_id))

    order = timeline.order.tolist()
    times = timeline.arrival[timeline.order].tolist()
    i, inf = 0, float("inf")
    while True:
        t_arrival = times[i] if i < len(order) else inf
        t_done = min(ctl.next_timer() or inf, open_ended[0][0] if open_ended else inf)
        if t_done == inf and t_arrival == inf:
            break
        if t_done <= t_arrival:
            while open_ended and open_ended[0][0] == t_done:
                ctl.finish(heapq.heappop(open_ended)[1], t_done)
            ctl.cycle(t_done)
            observe()
            continue
        row = order[i]
        job_id = i + 1
        spec = job_spec(workload, row)
        if np.isfinite(workload.deletion_time[row]):
            spec = JobSpec(**{**spec.__dict__, "duration_s": float(timeline.deletion[row] - timeline.arrival[row])})
        row_of[job_id], run.job[row] = row, job_id
        ctl.submit(job_id, spec, t_arrival, validate=False)  # rows no node fits wait forever, as in the replay
        ctl.cycle(t_arrival)
        observe()
        i += 1
    return run

