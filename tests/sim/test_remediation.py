"""Warnings before fatal failures, node drains and proactive checkpoint-and-migrate: timelines by hand, invariants."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from builders import nodes
from hypothesis import HealthCheck, given, settings, strategies as st
from test_failures import HOUR, JOB, assert_work_adds_up, monkeypatch_record, run  # noqa: F401 (a fixture)
from test_replay import rows, workload
from typer.testing import CliRunner

from quasched.cli import app
from quasched.model.health import ErrorLog
from quasched.sim.failures import DeviceFailure, FailureConfig, failure_stream
from quasched.sim.records import ARRIVE, DEPART, DOWN, KILL, MIGRATE, START, UP
from quasched.sim.replay_result import DONE
from quasched.sim.work_ledger import WorkLedger

runner = CliRunner()

#: checkpoints every 30 min, 2 min to restart, 1 min to write an on-demand checkpoint
DRAIN_MIGRATE = FailureConfig(checkpoint_min=30, restart_min=2, checkpoint_cost_min=1, drain_errors=1,
                              migrate="device")
#: a 1-GPU node (best fit for a 1-GPU pod) and a 2-GPU node
SMALL_BIG = nodes((8000, 8192, 1, "A"), (8000, 8192, 2, "A"))


def warning(t: float, node: int, device: int = 0) -> DeviceFailure:
    return DeviceFailure(t, node, device, False, 0.0, True)


def test_warning_drains_the_node_and_migrates_the_job_before_its_device_fails():
    # the 10-hour job runs on n0's only GPU; a warning at 5000 s drains n0 and the job checkpoints
    # (5000 s kept, 60 s to write the checkpoint) and restarts on n1 at once: 120 s reload + 31,000 s.
    # The device fails at 8000 s with nothing on it: no kill. Without remediation it would lose 800 + 120 s.
    fails = [warning(5000.0, 0), DeviceFailure(8000.0, 0, 0, True, HOUR)]
    r = run(SMALL_BIG, JOB, fails, config=DRAIN_MIGRATE)
    assert rows(r) == [(0, ARRIVE, 0, 0, 0), (5000, MIGRATE, 0, 0, 0), (5000, START, 0, 1, 0),
                       (8000, DOWN, -1, 0, 0), (8000 + HOUR, UP, -1, 0, 0), (5000 + 120 + 31_000, DEPART, 0, 1, 0)]
    s = r.summary()
    assert (s["warnings"], s["drains"], s["migrations"], s["interruptions"]) == (1, 1, 1, 0)
    assert s["lost_gpu_h"] == pytest.approx((60 + 120) / HOUR)
    assert (s["lost_work_gpu_h"], s["lost_reload_gpu_h"], s["lost_checkpoint_gpu_h"]) == pytest.approx((0, 120 / HOUR, 60 / HOUR))
    assert s["alloc_gpu_h"] == pytest.approx((5000 + 60 + 120 + 31_000) / HOUR)
    assert s["goodput_pct"] == pytest.approx(100 * 36_000 / 36_180)
    blind = run(SMALL_BIG, JOB, fails).summary()  # the same failures, no drain, no migration
    assert (blind["interruptions"], blind["migrations"]) == (1, 0)
    assert blind["lost_gpu_h"] == pytest.approx((800 + 120) / HOUR)


def test_a_drained_node_takes_no_new_pod_until_its_drain_ends_and_keeps_its_running_ones():
    # p0 (best fit) runs on n0; a warning at 100 s drains n0 for 1 h: p0 keeps running, p1
    # (arriving at 200 s) goes to n1, p2 (after the drain ended at 3700 s) to n0 again
    pods = workload([(1000, 1024, 1, 500, 0, 10 * HOUR), (1000, 1024, 1, 500, 200, 2 * HOUR),
                     (1000, 1024, 1, 500, 4000, 2 * HOUR)])
    config = FailureConfig(drain_errors=1, drain_h=1)
    r = run(SMALL_BIG, pods, [warning(100.0, 0)], config=config)
    assert r.pods.node.tolist() == [0, 1, 0]
    assert (r.pods.status == DONE).all() and r.pods.departed[0] == 10 * HOUR
    s = r.summary()
    assert (s["drains"], s["migrations"], s["interruptions"], s["lost_gpu_h"]) == (1, 0, 0, 0)


def test_an_evicting_drain_migrates_every_pod_of_the_node():
    # p0 and p1 (half a GPU each) share n0's GPU (best fit), p2 goes to n1; a warning on n0 drains it and,
    # with evict, both checkpoint at 1000 s (60 s each on half a GPU) and move to n1's free GPU (best fit
    # of the rest); without evict they stay and finish on n0
    cluster = nodes((8000, 8192, 1, "A"), (8000, 8192, 2, "A"), (8000, 8192, 4, "A"))
    pods = workload([(1000, 1024, 1, 500, 0, HOUR), (1000, 1024, 1, 500, 0, HOUR), (1000, 1024, 1, 1000, 0, HOUR)])
    config = FailureConfig(checkpoint_min=30, restart_min=2, checkpoint_cost_min=1, drain_errors=1, evict=True)
    r = run(cluster, pods, [warning(1000.0, 0)], config=config)
    moved = [(t, p) for t, k, p, n, _ in rows(r) if k == MIGRATE]
    assert r.pods.node.tolist() == [1, 1, 1] and moved == [(1000, 0), (1000, 1)]
    s = r.summary()
    assert (s["drains"], s["migrations"]) == (1, 2)
    assert s["lost_gpu_h"] == pytest.approx(2 * 0.5 * (60 + 120) / HOUR)
    stay = run(cluster, pods, [warning(1000.0, 0)], config=FailureConfig(drain_errors=1))
    assert stay.pods.node.tolist() == [0, 0, 1] and stay.summary()["lost_gpu_h"] == 0


def test_drain_counts_errors_within_its_window_only():
    # errors at 0 h and 2 h are 2 h apart: two within 1 h are never seen, so no drain; the third
    # at 2.5 h makes two within the hour
    fails = [warning(0.0, 0), warning(2 * HOUR, 0), warning(2.5 * HOUR, 0)]
    config = FailureConfig(drain_errors=2, drain_window_h=1)
    assert run(SMALL_BIG, JOB, fails[:2], config=config).summary()["drains"] == 0
    assert run(SMALL_BIG, JOB, fails, config=config).summary()["drains"] == 1
    log = ErrorLog()
    for t in (0.0, 2 * HOUR, 2.5 * HOUR):
        log.record(t, 0, 0)
    assert (log.count(0, HOUR), log.count(0, 0.0), log.count(1, 0.0)) == (2, 3, 0)


def test_node_scope_migrates_the_neighbours_of_a_failed_device():
    # two 1-GPU jobs fill n1 (the only 2-GPU node); device 0 fails at 5000 s: its job is killed
    # (3600 s kept, 1400 s lost), the one on device 1 migrates (all 5000 s kept, 60 s lost); both
    # restart on n2 and n3 with 120 s reload each
    cluster = nodes((8000, 8192, 2, "A"), (8000, 8192, 2, "A"), (8000, 8192, 2, "A"))
    pods = workload([(1000, 1024, 1, 1000, 0, 10 * HOUR)] * 2)
    config = FailureConfig(checkpoint_min=30, restart_min=2, checkpoint_cost_min=1, migrate="node")
    r = run(cluster, pods, [DeviceFailure(5000.0, 0, 0, False, 600.0)], config=config, policy="health")
    kinds = [k for _, k, *_ in rows(r)]
    assert kinds[2:7] == [DOWN, KILL, MIGRATE, START, START]
    s = r.summary()
    assert (s["interruptions"], s["migrations"]) == (1, 1)
    assert s["lost_gpu_h"] == pytest.approx((1400 + 60 + 2 * 120) / HOUR)
    assert (r.pods.node != 0).all()


def test_migrating_while_reloading_loses_only_the_time_held():
    ledger = WorkLedger(np.array([1000.0]), np.array([2.0]), checkpoint_s=300, restart_s=120)
    ledger.begin(0, 0.0)
    ledger.kill(0, 400.0)  # 300 s kept, 100 s lost
    ledger.begin(0, 500.0)  # 120 s reload, lost
    ledger.migrate(0, 560.0, cost_s=30)  # 60 s of the reload held + 30 s checkpoint, no progress
    assert ledger.left[0] == 700
    assert ledger.lost_gpu_s == pytest.approx(2 * (100 + 60 + 30))
    assert ledger.alloc_gpu_s == pytest.approx(2 * (400 + 60 + 30))


def test_precursors_come_before_their_fatal_failures_and_leave_the_failures_unchanged():
    num_gpus = np.array([8] * 50)
    base = FailureConfig(rate=2e-4, seed=5, flaky_share=0)
    warned = FailureConfig(rate=2e-4, seed=5, flaky_share=0, precursor_share=0.5, false_warnings=1.0,
                           precursor_ahead_h=12)
    take = lambda config, n: [e for e, _ in zip(failure_stream(config, num_gpus, 0.0), range(n))]  # noqa: E731
    events = take(warned, 3000)
    times = np.array([e.time for e in events])
    assert (np.diff(times) >= 0).all() and times.min() >= 0
    failures = [e for e in events if not e.warning]
    assert failures == take(base, len(failures))  # common random numbers: precursors change no failure
    warnings = [e for e in events if e.warning]
    fatal = sum(e.fatal for e in failures)
    expected = fatal * 0.5 * (1 + 1.0)
    assert abs(len(warnings) - expected) < 4 * np.sqrt(expected)
    assert all(not w.fatal and w.down_s == 0 for w in warnings)
    # half the warnings are followed by a fatal failure of their device within a week (a false one
    # by chance with odds 1e-4 × 168 h), a true one by 12 h on average
    ahead = [min([f.time - w.time for f in failures if f.fatal and (f.node, f.device) == (w.node, w.device)
                 and 0 < f.time - w.time <= 7 * 24 * HOUR], default=np.nan) for w in warnings]
    assert 0.45 < np.mean(np.isfinite(ahead)) < 0.58
    assert 10 * HOUR < np.nanmean(ahead) < 14 * HOUR


@pytest.mark.parametrize("bad, field", [
    (dict(migrate="cluster"), "migrate"), (dict(precursor_share=1.5), "precursor_share"),
    (dict(drain_errors=-1), "drain_errors"), (dict(checkpoint_cost_min=-1), "checkpoint_cost_min"),
])
def test_bad_remediation_options_are_named(bad, field):
    with pytest.raises(ValueError, match=field):
        FailureConfig(**bad)


# ------------------------------------------------------------------ invariants
job = st.tuples(st.integers(1, 4), st.sampled_from([250, 500, 1000]), st.floats(0, 20), st.floats(0.1, 10))
event = st.tuples(st.floats(0, 30), st.integers(0, 2), st.integers(0, 3),
                  st.sampled_from(["transient", "fatal", "warn"]), st.floats(0.01, 5))


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(job, min_size=1, max_size=12), events=st.lists(event, max_size=10),
       drain=st.integers(0, 2), drain_h=st.floats(0.1, 5),
       migrate=st.sampled_from([("off", "always", "now"), ("device", "always", "now"), ("node", "always", "now"),
                                ("device", "pays", "now"), ("device", "pays", "checkpoint"),
                                ("device", "pays_lindy", "checkpoint")]),
       lead_h=st.floats(0.1, 48), evict=st.booleans(), cost=st.floats(0, 0.2),
       policy=st.sampled_from(["fgd", "health"]), flaky=st.sampled_from([0.0, 0.5]),
       lift=st.sampled_from([(0.0, "mean"), (1e3, "mean"), (1e3, "known"), (1e7, "mean")]))
def test_no_new_pod_on_a_drained_node_or_unhealthy_device_and_work_adds_up(
        monkeypatch_record, jobs, events, drain, drain_h, migrate, lead_h, evict, cost, policy, flaky, lift):
    """After every event: no pod on an unhealthy device, no pod placed on a cordoned node (the fixture); at
    the end every pod is done, lost GPU-hours and energy are not negative, allocated − lost = the work."""
    cluster = nodes(*[(64000, 1 << 20, 4, "A")] * 3)
    pods = workload([(1000, 1024, 1 if m < 1000 else k, m, a * HOUR, (a + d) * HOUR) for k, m, a, d in jobs])
    fails = sorted(DeviceFailure(t * HOUR, n, d, kind == "fatal", 0.0 if kind == "warn" else down * HOUR,
                                 kind == "warn") for t, n, d, kind, down in events)
    scope, rule, at = migrate
    config = FailureConfig(checkpoint_min=30, restart_min=3, drain_errors=drain, drain_h=drain_h, migrate=scope,
                           migrate_rule=rule, migrate_at=at, precursor_ahead_h=lead_h, evict=evict,
                           checkpoint_cost_min=cost * 60, drain_flaky=flaky, drain_lift=lift[0],
                           drain_lift_run=lift[1])  # type: ignore[arg-type]
    r = run(cluster, pods, fails, policy=policy, config=config)
    assert monkeypatch_record  # checked after every event by the fixture
    assert_work_adds_up(r, jobs)


def test_replay_cli_with_drains_and_migration(tmp_path):
    result = runner.invoke(app, ["replay", "--policy", "health", "--failure-rate", "5e-3", "--precursor-share", "1",
                                 "--drain-errors", "1", "--migrate", "device", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert (summary[["warnings", "drains", "migrations"]] > 0).all(axis=None)
    assert pd.read_csv(tmp_path / "pods_Health_42.csv")["migrations"].sum() == summary["migrations"][0]
    bad = runner.invoke(app, ["replay", "--failure-rate", "1e-3", "--migrate", "cluster"])
    assert bad.exit_code == 2 and "migrate" in bad.output


def test_drain_h_inf_cordons_for_good():
    # a warning on n0 at 100 s cordons it: p0 keeps running there until 10 h; p1 (2 GPUs) holds n1 from 200 s to
    # 100 h; p2 (1 GPU) arrives at 11 h, when n0 is idle. Cordoned for good, n0 never takes it: it waits for
    # n1 (100 h). Cordoned for 50 h, n0 takes it when the drain ends (100 s + 50 h)
    pods = workload([(1000, 1024, 1, 1000, 0, 10 * HOUR), (1000, 1024, 2, 1000, 200, 100 * HOUR),
                     (1000, 1024, 1, 1000, 11 * HOUR, 12 * HOUR)])
    for drain_h, node, placed in ((np.inf, 1, 100 * HOUR), (50.0, 0, 100 + 50 * HOUR)):
        r = run(SMALL_BIG, pods, [warning(100.0, 0)], config=FailureConfig(drain_errors=1, drain_h=drain_h))
        assert r.pods.node.tolist() == [0, 1, node] and r.pods.placed[2] == pytest.approx(placed)
        assert (r.pods.status == DONE).all() and r.summary()["drains"] == 1
