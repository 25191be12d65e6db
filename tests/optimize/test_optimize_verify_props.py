"""Property tests: the verifier rejects every assignment mutated into infeasibility."""

import numpy as np
from hypothesis import given, settings, strategies as st

from quasched.optimize import HeavyRule, verify
from quasched.optimize.greedy import greedy_priority
from quasched.optimize.problem import small_problem


@st.composite
def instances(draw):
    n = draw(st.integers(3, 12))
    m = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    demand = np.column_stack([rng.integers(1, 5, n) * 1000, rng.integers(0, 3, n) * 500, rng.integers(1, 5, n) * 1024])
    p = small_problem(demand, [[4000, 2000, 8192]] * m, apps=rng.integers(0, 3, n),
                      limits=rng.choice([-1, 1, 2], n), specs=rng.choice(["", "A", "B"], n),
                      models=rng.choice(["A", "B"], m), heavy=HeavyRule.symmetric(0.5))
    return p, draw(st.integers(0, 2**16))


@settings(max_examples=150, deadline=None)
@given(instances())
def test_mutated_assignments_are_rejected(case):
    p, seed = case
    rng = np.random.default_rng(seed)
    machine = greedy_priority(p).machine
    assert verify(p, machine).feasible
    i = int(rng.integers(p.n_jobs))
    j = int(rng.integers(p.n_machines))
    others = np.flatnonzero((machine == j) & (np.arange(p.n_jobs) != i))
    mutated = machine.copy()
    mutated[i] = j
    used = p.demand[others].sum(axis=0) + p.demand[i]
    breaks = (
        np.any(used > p.capacity[j])
        or (p.demand[i, 1] > 0 and p.job_gpu_model[i] not in ("", p.machine_gpu_model[j]))
        or (p.heavy_hi[i, j] and p.heavy_lo[others, j].any())
        or (p.heavy_lo[i, j] and p.heavy_hi[others, j].any())
        or any(p.limit[k] >= 1 and np.sum(p.app[np.append(others, i)] == p.app[k]) > p.limit[k]
               for k in np.append(others, i) if p.app[k] >= 0)
    )
    assert verify(p, mutated).feasible == (not breaks)
    x = np.zeros((p.n_jobs, p.n_machines), dtype=int)
    x[np.flatnonzero(machine >= 0), machine[machine >= 0]] = 1
    second = (int(machine[i]) + 1) % p.n_machines
    if machine[i] >= 0 and second != machine[i]:
        x[i, second] = 1
        assert not verify(p, x).feasible  # a job placed twice
