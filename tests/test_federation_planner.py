"""The rolling-horizon LP planner (``ours-lp``) and the fluid LP it shares with the oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quasched.federation.engine import make_view, run_federation
from quasched.federation.fluid import Columns, Load, occupancies, solve_fluid
from quasched.federation.metrics import job_carbon_kg, missed
from quasched.federation.planner import RollingPlanner
from quasched.federation.registry import make_dispatcher
from test_federation import KW, H, small_scenarios, two_zone_scenario

ONE_GPU = np.array([[1000.0], [0.0]])


def three_slot_lp(load: Load | None = None) -> tuple[Columns, np.ndarray]:
    """2 clusters of 1 GPU, 3 hourly slots; A: 100, 100, 10 g/kWh, B: 200 flat; 1-GPU jobs of 1 h at 1 kW:
    job 0 may start at 0, 1 or 2 h, job 1 only at 0."""
    cols = Columns.of([np.array([0.0, H, 2 * H]), np.array([0.0])], np.ones((2, 2), dtype=bool))
    hourly = np.array([[100.0, 100.0, 10.0], [200.0, 200.0, 200.0]])
    grams = hourly[cols.cluster, (cols.start // H).astype(int)]
    fit = solve_fluid(cols, grams, np.array([H, H]), np.array([[1000.0, 1000.0], [0.0, 0.0]]),
                      np.hstack([ONE_GPU, ONE_GPU]), 3, slot_s=H, load=load)
    return cols, fit


def test_fluid_lp_defers_the_flexible_job_to_the_green_slot_by_hand():
    """Job 1 takes A at 0 (100 g); job 0 waits for A's green hour 2 (10 g), not A at 1 h (100) nor B (200): 110 g."""
    cols, fit = three_slot_lp()
    assert fit.solution.status == "optimal" and -fit.solution.objective * fit.unit == pytest.approx(110.0)
    assert [(int(cols.cluster[k]), float(cols.start[k])) for k in fit.best] == [(0, 2 * H), (0, 0.0)]


def test_fluid_lp_leaves_room_for_the_expected_load_by_hand():
    """A load of 1 GPU expected in hour 2 (10 g on A, 200 on B) competes for A's green hour: job 0 moves to A at
    1 h (100) and the load takes A (10): 100 + 100 + 10 = 210 g, less than 100 + 10 + 200."""
    load = Load(np.array([[0.0, 0.0, 1000.0], [0.0, 0.0, 0.0]]), np.array([[0.0, 0.0, 10.0], [0.0, 0.0, 200.0]]))
    cols, fit = three_slot_lp(load)
    assert -fit.solution.objective * fit.unit == pytest.approx(210.0)
    assert [(int(cols.cluster[k]), float(cols.start[k])) for k in fit.best] == [(0, H), (0, 0.0)]


def test_planner_defers_the_flexible_job_on_the_hand_timeline():
    """The timeline of ``test_federation``: A 120, 60, 360 g/kWh (PUE included), B 400. At 0 the LP holds job 0 (1 h,
    1 h of slack) for A's green hour (60 < 120 < 400); job 1 (inflexible) takes the rule: A at 0 (price 0.5:
    120 + 0.5 × 280 = 260 < 400); at 1 h job 0 starts on A, as planned (re-planning every hour: the same)."""
    sc = two_zone_scenario()
    for every, solves in ((2, 1), (1, 2)):
        planner = RollingPlanner(every=every, price=0.5, toward=1, perfect=True)
        run = run_federation(sc, planner)
        assert run.cluster.tolist() == [0, 0] and run.placed.tolist() == [H, 0.0] and missed(run).sum() == 0
        assert job_carbon_kg(run) == pytest.approx((KW * 60 + KW * 120 / 2) / 1000)
        assert planner.solves == solves and planner.plan_cpu_s >= 0


def test_occupancies_match_the_scalar_occupancy():
    from quasched.federation.carbon_aware import occupancy
    start, duration = np.array([1350.0, 3600.0, 0.0, 100.0]), np.array([1800.0, 0.0, 900.0, 7000.0])
    run, slot, share = occupancies(start, duration)
    for i, (s, d) in enumerate(zip(start, duration)):
        first, expected = occupancy(s, d)
        assert slot[run == i].tolist() == list(range(first, first + len(expected)))
        assert share[run == i] == pytest.approx(expected)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(1, 3), st.integers(0, 1000))
def test_fluid_solution_fits_capacity_and_each_job_runs_once(jobs, clusters, seed):
    rng = np.random.default_rng(seed)
    release = rng.integers(0, 4, jobs) * H + rng.uniform(0, H, jobs)
    starts = [np.concatenate([[r], np.arange(np.floor(r / H) + 1, 6) * H]) for r in release]
    cols = Columns.of(starts, rng.random((jobs, clusters)) < 0.8)
    duration, demand = rng.uniform(0, 2 * H, jobs), np.vstack([rng.integers(0, 2, jobs) * 1000.0, rng.uniform(0, 8, jobs)])
    capacity = np.vstack([np.full(clusters, 1000.0 * jobs), np.full(clusters, 8.0 * jobs)])
    fit = solve_fluid(cols, rng.uniform(1, 10, len(cols.job)), duration, demand, capacity, 8, slot_s=H)
    assert fit.solution.status == "optimal"
    share = fit.share
    assert np.all(share >= -1e-9) and np.bincount(cols.job, share, jobs) == pytest.approx(np.ones(jobs))
    assert np.all(cols.start >= release[cols.job])  # never before release
    run, slot, part = occupancies(cols.start, duration[cols.job], H)
    use = np.zeros((2, clusters, 10))
    for r in range(2):
        np.add.at(use[r], (cols.cluster[run], slot), share[run] * demand[r, cols.job[run]] * part)
    assert np.all(use[:, :, :8] <= capacity[:, :, None] * (1 + 1e-6) + 1e-6)


@settings(max_examples=20, deadline=None)
@given(small_scenarios(), st.integers(0, 5), st.integers(0, 100))
def test_plan_reads_only_the_forecast_and_stays_in_each_window(sc, hour, seed):
    """Changing the true intensity after the current hour does not change the plan; planned starts lie in
    [now, latest start] on clusters where the job is placeable."""
    now = hour * H + 1200.0
    views = [make_view(sc), make_view(sc)]
    views[1].intensity[:, hour + 1:] = np.random.default_rng(seed).uniform(0, 1000, views[1].intensity[:, hour + 1:].shape)
    plans = []
    for view in views:
        planner = RollingPlanner()
        planner.reset(view)
        planner.held = {j: None for j in np.flatnonzero((sc.arrival <= now) & (view.latest_start > now)).tolist()}
        planner.plan(now)
        plans.append(planner.held)
    assert plans[0] == plans[1]
    for j, d in plans[0].items():
        assert d is not None and now <= d.start <= views[0].latest_start[j] + 1e-9
        assert views[0].placeable[j, d.cluster] or not views[0].placeable[j].any()


@settings(max_examples=20, deadline=None)
@given(small_scenarios())
def test_planners_runs_fit_capacity_start_after_release_and_by_the_latest_start(sc):
    for spec in ("ours-lp:every=0.5", "ours-displace", "carbon-aware-backfill", "ours-displace-backfill", "carbon-aware-easy",
                 "ours-displace-easy", "carbon-aware-conservative", "ours-displace-conservative", "ours-protect",
                 "carbon-aware-shadow", "ours-displace-shadow", "ours-displace-throttle", "ours-protect-redecide",
                 "ours-protect-held", "ours-redecide-held", "ours-redecide-hourly", "ours-nested"):
        run = run_federation(sc, make_dispatcher(spec))
        ok = np.isfinite(run.placed)
        assert np.all(run.placed[ok] >= sc.arrival[ok]) and np.all(run.released <= sc.arrival + sc.slack + 1e-9)
        gpus = sc.workload.gpu_request
        for t in run.placed[ok]:  # at every placement, each cluster's running jobs fit its GPUs
            on = ok & (run.placed <= t) & (run.placed + sc.duration > t)
            used = np.bincount(run.cluster[on], gpus[on], len(sc.members))
            assert np.all(used <= run.view.capacity[0] + 1e-9)


def test_bad_planner_parameters_are_named():
    with pytest.raises(ValueError, match="0 < room <= 1"):
        make_dispatcher("ours-lp:room=2")
