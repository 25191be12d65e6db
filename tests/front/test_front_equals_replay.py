"""Live equals simulated: the front, on a virtual clock, with real ``serve`` members on 127.0.0.1 and the zones'
recorded intensities (:mod:`quasched.front.virtual`), decides a job stream exactly as ``quasched federation``'s replay
does on the same stream and members: every job's member, release and start time, for each online dispatcher."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from quasched.federation.engine import run_federation
from quasched.federation.metrics import job_carbon_kg
from quasched.federation.registry import make_dispatcher
from quasched.federation.scenario import Member, Scenario
from quasched.front.virtual import run_virtual
from quasched.model.nodes import NodeSpec
from quasched.model.workload import Workload
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
    live = run_virtual(sc, dispatcher, tmp_path)
    assert np.isfinite(replay.placed).all()  # every job ran in the replay
    assert live.cluster.tolist() == replay.cluster.tolist()
    assert live.released.tolist() == replay.released.tolist()
    assert live.placed.tolist() == replay.placed.tolist()
    if dispatcher != "greedy":
        assert int((replay.released > sc.arrival).sum()) > 0  # the stream exercises deferral, not only starts now
    assert int((replay.placed > replay.released).sum()) > 0 or dispatcher == "carbon-defer"  # and member queues
    # the carbon the front bills is the replay's job model: kW x intensity x PUE over each run
    assert float(np.nansum(live.kg)) == pytest.approx(job_carbon_kg(replay), rel=1e-9)
