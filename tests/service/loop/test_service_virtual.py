"""One core, two clocks: the service's loop driven by a trace places exactly as the replay."""

from __future__ import annotations

import numpy as np
import pytest

from quasched.service.loop.virtual import run_virtual
from quasched.sim.replay import run_replay


@pytest.mark.slow  # replays of real traces
@pytest.mark.parametrize("variant, rows, policy, rng", [
    ("default", None, "fgd", "native"),  # the whole trace
    ("gpuspec33", 2000, "bestfit", "go"),
    ("multigpu50", 2000, "dotprod", "native"),
])
def test_virtual_clock_places_exactly_as_the_replay(openb, variant, rows, policy, rng):
    nodes, pods = openb.nodes(), openb.pods(variant)
    workload = pods if rows is None else pods.take(np.arange(rows))
    replayed = run_replay(nodes, workload, policy, 7, rng=rng)
    served = run_virtual(nodes, workload, policy, 7, rng=rng)
    node_names = np.array([nodes.name[n] if n >= 0 else "" for n in replayed.pods.node], dtype=object)
    assert (node_names == served.node).all()
    assert np.array_equal(np.nan_to_num(replayed.pods.placed, nan=-1), np.nan_to_num(served.started, nan=-1))
    placed = np.flatnonzero(node_names != "")
    assert all(tuple(replayed.pods.devices[i]) == tuple(served.devices[i]) for i in placed)
    assert len(placed) > 0.5 * len(workload)
