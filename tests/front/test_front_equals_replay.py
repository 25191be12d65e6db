"""Live equals simulated: the front, on a clock the test moves, with real ``serve`` members on 127.0.0.1 and the
zones' recorded intensities, decides a job stream exactly as ``quasched federation``'s replay does on the same stream
and members: every job's member, release and start time, for each online dispatcher."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest

from api_support import Clock, make_app, live_server
from quasched.federation.engine import run_federation
from quasched.federation.registry import make_dispatcher
from quasched.federation.scenario import Member, Scenario
from quasched.front.front import Front, Zone
from quasched.front.members import MemberConfig, ServeMember
from quasched.front.store import FrontStore
from quasched.model.nodes import NodeSpec
from quasched.model.workload import Workload
from quasched.service.runtime.schemas import JobSubmit
from quasched.signals.file import FileSignal
from quasched.traces.carbon import load_carbon

ZONES = ("DE-LU", "US-CAL-CISO", "IN-WE")
JOBS = 36


def nodes(i: int) -> NodeSpec:
    """Member ``i``: two nodes of 4 A100s."""
    return NodeSpec(np.array([f"n{i}a", f"n{i}b"], dtype=object), np.array([64_000, 64_000]),
                    np.array([256 * 1024, 256 * 1024]), np.array([4, 4]), np.array(["A100", "A100"], dtype=object))


def scenario(carbon_dir: Path) -> Scenario:
    """A seeded stream over 18 h: whole-GPU jobs of 1-4 GPUs, 1-4 h, half of them with 4-10 h of slack; whole seconds
    throughout (the front plans from deadlines, the replay from arrival + slack: the same numbers)."""
    rng = np.random.default_rng(7)
    arrival = np.sort(rng.integers(0, 18 * 3600, JOBS)).astype(float)
    duration = rng.integers(1, 5, JOBS) * 3600.0
    slack = np.where(rng.random(JOBS) < 0.5, rng.integers(4, 11, JOBS) * 3600.0, 0.0)
    gpus = rng.integers(1, 5, JOBS)
    workload = Workload(name=np.array([f"j{j}" for j in range(JOBS)], dtype=object),
                        cpu_milli=np.full(JOBS, 4000), memory_mib=np.full(JOBS, 16 * 1024), num_gpu=gpus,
                        gpu_milli=np.full(JOBS, 1000), gpu_model=np.full(JOBS, "", dtype=object),
                        creation_time=arrival, deletion_time=arrival + duration)
    members = tuple(Member(f"m{i}", nodes(i), load_carbon(z, carbon_dir), pue=1.1 + i / 10) for i, z in enumerate(ZONES))
    return Scenario(members, workload, arrival, duration, slack, np.datetime64("2023-03-06T00", "h"))


@pytest.mark.parametrize("dispatcher", ["greedy", "carbon-aware", "carbon-defer"])
def test_the_front_decides_as_the_replay(tmp_path: Path, carbon_dir: Path, dispatcher: str) -> None:
    sc = scenario(carbon_dir)
    replay = run_federation(sc, make_dispatcher(dispatcher), "fgd", 42)
    t0 = float(sc.start.astype("datetime64[s]").astype(np.int64))
    with contextlib.ExitStack() as stack:
        clocks, services, configs = [], [], []
        for i, m in enumerate(sc.members):
            home = tmp_path / m.name
            home.mkdir()
            clock = Clock(t0)
            app, _ = make_app(home, clock=clock, cluster=m.nodes)
            url = stack.enter_context(live_server(app))
            clocks.append(clock)
            services.append(app.state.service)
            configs.append(MemberConfig(name=m.name, url=url, zone=m.carbon.zone, pue=m.pue,
                                        token_file=home / "quasched.token"))
        clock = Clock(t0)
        front = Front(FrontStore(f"sqlite:///{tmp_path / 'front.db'}"), [ServeMember(c) for c in configs],
                      [Zone(FileSignal(m.carbon), m.pue) for m in sc.members], dispatcher, clock=clock, read_s=0.0)
        front.lead()
        stack.callback(front.stop)
        w, arrivals, ends = sc.workload, list(range(JOBS)), {}
        while True:
            times = [sc.arrival[arrivals[0]]] if arrivals else []
            times += [front.releases[0][0]] if front.releases else []
            times += [end for end in ends.values()]
            if not times:
                break
            t = min(times)
            for c, s in zip(clocks, services):  # the members' clocks: what is due by t ends, their queues move
                c.t = t0 + t
                s.tick()
            clock.t = t0 + t
            while arrivals and sc.arrival[arrivals[0]] == t:
                j = arrivals.pop(0)
                spec = JobSubmit(name=str(w.name[j]), team="default", cpu=4, memory=16 * 1024,
                                 gpus=int(w.num_gpu[j]), duration=float(sc.duration[j])).to_spec()
                front.submit(spec, t0 + float(sc.deadline[j]), float(sc.duration[j]), t0 + t)
            front.step(t0 + t)
            ends = {i: p + float(sc.duration[i]) for i, p in enumerate(front.rules.placed)
                    if np.isfinite(p) and front.jobs[i].state.value not in ("succeeded", "failed", "cancelled")}
        assert np.isfinite(replay.placed).all()  # every job ran in the replay
        assert front.rules.cluster.tolist() == replay.cluster.tolist()
        assert front.rules.released.tolist() == replay.released.tolist()
        assert front.rules.placed.tolist() == replay.placed.tolist()
        deferred = int((replay.released > sc.arrival).sum())
        if dispatcher != "greedy":
            assert deferred > 0  # the stream exercises deferral, not only starts now
