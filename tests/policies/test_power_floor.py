"""The linear-model power floor (:mod:`quasched.policies.pwr_bound`): a hand case and a property."""

from __future__ import annotations

import numpy as np
import pytest
from builders import nodes, pod
from hypothesis import given, settings, strategies as st

from quasched.metrics.power import cluster_power_w
from quasched.model import Cluster
from quasched.model.resources import CPU
from quasched.model.workload import Workload
from quasched.policies.pwr_bound import linear_power_floor, single_home

#: 2 T4 (10/70 W) + 1 A100-modelled G3 (50/400 W); 32 + 16 vCPU = 16 + 8 cores = 1 + 1 sockets (15/120 W)
SPEC = nodes((32_000, 1 << 20, 2, "T4"), (16_000, 1 << 20, 1, "G3"))


def test_floor_fills_the_cheapest_gpus_first_and_counts_cpu_linearly():
    # idle 2 × 10 + 50 + 2 × 15 = 100 W; 2.5 GPUs: both T4 (2 × 60) then half the G3 (0.5 × 350) = 295 W;
    # 8 vCPU = 4 cores × 105 / 16 W = 26.25 W
    got = linear_power_floor(SPEC, np.array([0, 2500, 9000]), np.array([0, 8000, 0]))
    assert got.tolist() == [100.0, 100 + 295 + 26.25, 100 + 120 + 350]  # 9000 milli: more than the cluster's 3 GPUs


def test_the_reachable_floor_keeps_pinned_milli_on_its_model_and_fills_the_rest_cheapest_first():
    # 1.5 GPUs allocated, 0.5 of them pinned to the G3: 0.5 × 350 + the other 1.0 on a T4 (60) = 235 W, not 1.5 × 60
    got = linear_power_floor(SPEC, np.array([1500, 1500]), np.array([0, 0]), pinned={"G3": np.array([0, 500])})
    assert got.tolist() == [100 + 90, 100 + 235]


def test_a_pod_has_a_single_home_when_only_one_gpu_model_can_hold_it():
    # T4 node: 32 vCPU, 2 GPUs; G3 node: 16 vCPU, 1 GPU
    pods = Workload(name=np.array(list("abcd"), dtype=object), cpu_milli=np.array([1000, 20_000, 8000, 8000]),
                    memory_mib=np.full(4, 1024), num_gpu=np.array([2, 1, 1, 1]), gpu_milli=np.full(4, 1000),
                    gpu_model=np.array(["", "", "", "G3"], dtype=object))
    assert single_home(SPEC, pods).tolist() == ["T4", "T4", "", "G3"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.sampled_from([0, 250, 500, 1000]), st.integers(0, 12_000)),
                max_size=12))
def test_no_placement_draws_less_than_the_floor_nor_the_floor_with_its_g3_milli_pinned(ops):
    c = Cluster(SPEC)
    for uid, (node, m, cpu) in enumerate(ops):
        free = c.gpu_free[node, : c.num_gpus[node]]
        device = int(np.argmax(free))
        if free[device] >= m and c.free[node, CPU] >= cpu:
            c.place(pod(uid=uid, cpu=cpu, k=1 if m else 0, m=m), node, (device,) if m else ())
    floor = linear_power_floor(SPEC, np.array([c.gpu_allocated]), np.array([c.allocated[CPU]]))
    assert cluster_power_w(c, mode="linear") >= floor[0] - 1e-9
    reach = linear_power_floor(SPEC, np.array([c.gpu_allocated]), np.array([c.allocated[CPU]]),
                               pinned={"G3": np.array([c.gpu_alloc[1].sum()])})
    assert cluster_power_w(c, mode="linear") >= reach[0] - 1e-9 and reach[0] >= floor[0] - 1e-9
    if c.gpu_allocated == 0 and c.allocated[CPU] == 0:
        assert cluster_power_w(c, mode="linear") == pytest.approx(floor[0])
