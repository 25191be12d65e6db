"""The front on a virtual clock over a scenario (``quasched federate --clock virtual``), checked against the replay.

Each member of the scenario becomes a real ``quasched serve`` (its nodes, its own SQLite store and clock) on a free
127.0.0.1 port; the front reaches them over HTTP as it would any member, and its zones are the members' recorded
intensities (:class:`~quasched.signals.file.FileSignal`). The driver plays time: at each next event (an arrival, a
release the front planned, the end of a job's run) it moves every clock there, lets each member's timers fire (runs
end, its queue moves), submits the jobs arriving then and runs one round of the front. Each job's member, release and
start then equal :func:`~quasched.federation.engine.run_federation`'s (``tests/front/test_front_equals_replay.py``).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from quasched.federation.scenario import Scenario
from quasched.front.front import ENDED, Front, Zone
from quasched.front.members import MemberConfig, ServeMember
from quasched.front.store import FrontStore
from quasched.metrics.typical import TypicalPods
from quasched.policies.registry import parse_spec
from quasched.service.api.app import create_app
from quasched.service.api.serving import serving
from quasched.service.loop.state import LoopOptions
from quasched.service.runtime.schemas import JobSubmit, gpus_of
from quasched.signals.file import FileSignal


class ManualClock:
    """A clock the driver sets."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@dataclass
class VirtualFront:
    """Per job: member index, release and start (seconds from the scenario's start, NaN: never), kg CO2e of its run
    and of its baseline (NaN: not ended); per arrival, the wall time of its submission and round, s."""

    cluster: np.ndarray
    released: np.ndarray
    placed: np.ndarray
    kg: np.ndarray
    baseline_kg: np.ndarray
    latency_s: np.ndarray
    elapsed_s: float


def run_virtual(scenario: Scenario, dispatcher: str, workdir: Path, policy: str = "fgd", seed: int = 42) -> VirtualFront:
    """The front over ``scenario`` under ``dispatcher`` (module docstring); stores go under ``workdir``. Member ``i``
    places as the replay's cluster ``i`` does: ``policy``, random stream ``seed + i``, the scenario's typical pods,
    FIFO, no preemption."""
    began = time.perf_counter()
    typical = TypicalPods.from_workload(scenario.workload)
    t0 = float(scenario.start.astype("datetime64[s]").astype(np.int64))
    with contextlib.ExitStack() as stack:
        clocks, services, configs = [], [], []
        for i, m in enumerate(scenario.members):
            home = workdir / f"member-{i}"
            home.mkdir(parents=True, exist_ok=True)
            clock = ManualClock(t0)
            app = create_app(f"sqlite:///{home / 'quasched.db'}", m.nodes, clock=clock,
                             options=LoopOptions(policy=parse_spec(policy), seed=seed + i, order="fifo",
                                                 preemption=False, cpu_pods_off_gpu_nodes=False, typical=typical))
            url = stack.enter_context(serving(app))
            clocks.append(clock)
            services.append(app.state.service)
            configs.append(MemberConfig.model_validate({"name": m.name, "url": url, "zone": m.carbon.zone, "pue": m.pue,
                                                        "token_file": home / "quasched.token"}))
        clock = ManualClock(t0)
        front = Front(FrontStore(f"sqlite:///{workdir / 'front.db'}"), [ServeMember(c) for c in configs],
                      [Zone(FileSignal(m.carbon), m.pue) for m in scenario.members], dispatcher, policy, clock=clock,
                      read_s=0.0)
        front.lead()
        stack.callback(front.stop)
        latency = _drive(front, scenario, t0, clocks, services)
        row = np.argsort(np.argsort(scenario.arrival, kind="stable"))  # the front's index of each scenario job
        kg = np.array([np.nan if d.kg is None else d.kg for d in front.dispatch_of])
        baseline = np.array([np.nan if d.baseline_kg is None else d.baseline_kg for d in front.dispatch_of])
        return VirtualFront(front.rules.cluster[row], front.rules.released[row], front.rules.placed[row], kg[row],
                            baseline[row], np.array(latency), time.perf_counter() - began)


def _drive(front: Front, scenario: Scenario, t0: float, clocks: list[ManualClock], services: list[Any]) -> list[float]:
    """Play the scenario's time (module docstring); the wall time of each arrival's submission and round."""
    w, order = scenario.workload, list(np.argsort(scenario.arrival, kind="stable"))
    latency: list[float] = []
    ends: dict[int, float] = {}
    while True:
        times = [float(scenario.arrival[order[0]])] if order else []
        times += [front.releases[0][0]] if front.releases else []
        times += list(ends.values())
        if not times:
            return latency
        t = min(times)
        for member_clock, service in zip(clocks, services):
            member_clock.t = t0 + t
            service.tick()
        front.clock.t = t0 + t  # type: ignore[attr-defined]
        arrived = time.perf_counter()
        arrivals = 0
        while order and scenario.arrival[order[0]] == t:
            j = int(order.pop(0))
            spec = JobSubmit.model_validate({
                "name": str(w.name[j]), "team": "default", "cpu": int(w.cpu_milli[j]) / 1000,
                "memory": int(w.memory_mib[j]), "gpus": gpus_of(int(w.num_gpu[j]), int(w.gpu_milli[j])),
                "gpu_model": str(w.gpu_model[j]), "duration": float(scenario.duration[j])}).to_spec()
            front.submit(spec, t0 + float(scenario.deadline[j]), float(scenario.duration[j]), t0 + t)
            arrivals += 1
        front.step(t0 + t)
        if arrivals:
            latency += [(time.perf_counter() - arrived) / arrivals] * arrivals
        ends = {i: p + float(scenario.duration[i]) for i, p in enumerate(front.rules.placed)
                if np.isfinite(p) and front.jobs[i].state not in ENDED}
