"""Migrate only when it pays: the expected-loss rule by hand, timelines by hand, deferred moves, options."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from builders import nodes
from hypothesis import HealthCheck, given, settings, strategies as st
from test_failures import HOUR, assert_work_adds_up, monkeypatch_record, run  # noqa: F401 (a fixture)
from test_remediation import warning
from test_replay import rows, workload
from typer.testing import CliRunner

from quasched.cli import app
from quasched.sim.failures import DeviceFailure, FailureConfig, plan_migration
from quasched.sim.records import ARRIVE, DEPART, DOWN, KILL, MIGRATE, START, UP
from quasched.sim.work_ledger import Migration, WorkLedger, stay_kills

runner = CliRunner()
MIN = 60.0
#: checkpoints every 30 min, 5 min to reload, 1 min to checkpoint on demand; warnings true with odds 1/2, a mean 24 h ahead
PAYS = FailureConfig(checkpoint_min=30, restart_min=5, checkpoint_cost_min=1, precursor_ahead_h=24, false_warnings=1,
                     drain_errors=1, migrate="device", migrate_rule="pays")
#: n0 with 2 GPUs takes both 1-GPU pods (best fit); n1 with 4 GPUs is where moved pods go
TWO_FOUR = nodes((8000, 8192, 2, "A"), (8000, 8192, 4, "A"))
#: p0 runs 5 h, p1 100 h, both on one whole GPU from 0
SHORT_LONG = workload([(1000, 1024, 1, 1000, 0, 5 * HOUR), (1000, 1024, 1, 1000, 0, 100 * HOUR)])


def test_the_rule_by_hand():
    # stay: 1/2 · (1 − e^(−R/24 h)) · (15 + 5) min; move now: 1 + 5 = 6 min; break-even R = 24 h · ln 2.5 = 22 h
    assert PAYS.fatal_within(24 * HOUR) == pytest.approx(0.5 * (1 - np.exp(-1)))
    assert PAYS.fatal_within(np.inf) == 0.5
    assert plan_migration(PAYS, 10 * HOUR, 10 * MIN, 20 * MIN) == "stay"  # 3.41 min expected
    assert plan_migration(PAYS, 21.9 * HOUR, 0, 0) == "stay"  # 5.99 min
    assert plan_migration(PAYS, 22.1 * HOUR, 0, 0) == "now"  # 6.01 min
    assert plan_migration(PAYS, np.inf, 0, 0) == "now"  # 10 min
    # at the next checkpoint 10 min away, 20 min since the last: 5 + 1/2 · (1 − e^(−10/1440)) · (20 + 5) = 5.09
    at_checkpoint = FailureConfig(**{**PAYS.__dict__, "migrate_at": "checkpoint"})
    assert plan_migration(at_checkpoint, 48 * HOUR, 10 * MIN, 20 * MIN) == "checkpoint"
    assert plan_migration(at_checkpoint, 5 * MIN, 10 * MIN, 20 * MIN) == "stay"  # ends before that checkpoint
    # every warning true (no false alarms) and a 1-hour warning: a 2-hour pod pays to move
    sure = FailureConfig(**{**PAYS.__dict__, "false_warnings": 0, "precursor_ahead_h": 1})
    assert plan_migration(sure, 2 * HOUR, 0, 0) == "now" and plan_migration(PAYS, 2 * HOUR, 0, 0) == "stay"


def test_ledger_position_counts_work_done_left_and_checkpoints():
    ledger = WorkLedger(np.array([10_000.0, np.nan]), np.ones(2), checkpoint_s=1800, restart_s=300)
    ledger.begin(0, 0.0)
    assert ledger.position(0, 2000.0) == pytest.approx((2000, 8000, 1600, 200))
    ledger.kill(0, 2000.0)  # 1800 s kept
    ledger.begin(0, 2500.0)  # reloading until 2800 s
    assert ledger.position(0, 2600.0) == pytest.approx((1800, 8200, 200, 0))  # the next checkpoint: end of reload
    assert ledger.position(0, 2800.0 + 1800) == pytest.approx((3600, 6400, 0, 0))  # exactly at a checkpoint
    ledger.begin(1, 0.0)
    assert np.isnan(ledger.position(1, 100.0)[1])  # open-ended


def test_a_short_pod_stays_and_a_long_pod_moves():
    # warnings on n0's GPU 0 (p0, 4 h left: stays, 3.4 min expected against 6) and GPU 1 (p1, 99 h left: moves,
    # 10 min against 6). p1 checkpoints at 3700 s (60 s), reloads on n1 (300 s) and runs its 356,300 s left. GPU 1
    # fails at 20,000 s with nothing on it; p0 finishes where it is. Lost: 60 + 300 s.
    fails = [warning(3600.0, 0, 0), warning(3700.0, 0, 1), DeviceFailure(20_000.0, 0, 1, True, HOUR)]
    r = run(TWO_FOUR, SHORT_LONG, fails, config=PAYS)
    assert rows(r) == [(0, ARRIVE, 0, 0, 0), (0, ARRIVE, 1, 0, 0), (3700, MIGRATE, 1, 0, 0), (3700, START, 1, 1, 0),
                       (5 * HOUR, DEPART, 0, 0, 0), (20_000, DOWN, -1, 0, 0), (20_000 + HOUR, UP, -1, 0, 0),
                       (3700 + 300 + 356_300, DEPART, 1, 1, 0)]
    s = r.summary()
    assert (s["migrations"], s["interruptions"], s["lost_gpu_h"]) == (1, 0, pytest.approx(360 / HOUR))
    # done 3700 s, 356,300 s left, 1700 s to its next checkpoint, 100 s since the last, 60 s to checkpoint now
    assert r.ledger is not None and r.ledger.moves == [Migration(3700, 1, 0, (1,), 3700, 356_300, 1700, 100, 60)]
    # had it stayed, the failure at 20,000 s would have cost it (100 + 16,300) mod 1800 = 200 s + 300 s reload
    assert stay_kills(r.ledger.moves, fails) == pytest.approx([16_300])
    assert r.ledger.moves[0].stay_loss(16_300, 1800, 300) == pytest.approx(500)
    always = run(TWO_FOUR, SHORT_LONG, fails, config=FailureConfig(**{**PAYS.__dict__, "migrate_rule": "always"}))
    assert always.summary()["migrations"] == 2 and always.summary()["lost_gpu_h"] == pytest.approx(720 / HOUR)
    # Lindy: both have run about 1 h, so both are expected to run about 1 h more: both stay; p1 is killed at
    # 20,000 s (19,800 s checkpointed: 200 s + 300 s reload lost)
    lindy = run(TWO_FOUR, SHORT_LONG, fails, config=FailureConfig(**{**PAYS.__dict__, "migrate_rule": "pays_lindy"}))
    assert (lindy.summary()["migrations"], lindy.summary()["interruptions"]) == (0, 1)
    assert lindy.summary()["lost_gpu_h"] == pytest.approx(500 / HOUR)


def test_lindy_moves_a_pod_that_has_run_long():
    # at 30 h p1 has run 30 h: 1/2 · (1 − e^(−30/24)) · 20 min = 7.1 min > 6: it moves
    fails = [warning(30 * HOUR, 0, 1)]
    lindy = run(TWO_FOUR, SHORT_LONG, fails, config=FailureConfig(**{**PAYS.__dict__, "migrate_rule": "pays_lindy"}))
    assert [(t, p) for t, k, p, *_ in rows(lindy) if k == MIGRATE] == [(30 * HOUR, 1)]


def test_a_move_waits_for_the_next_periodic_checkpoint():
    # p1 is warned at 3700 s, 100 s after its checkpoint at 3600 s: moving at 5400 s costs 300 s + the odds of
    # a failure within 1700 s (0.97 %) × 950 s = 309 s, less than 60 + 300 s now. It moves at 5400 s with all
    # its progress and reloads: 300 s lost in all.
    at = FailureConfig(**{**PAYS.__dict__, "migrate_at": "checkpoint"})
    r = run(TWO_FOUR, SHORT_LONG, [warning(3700.0, 0, 1)], config=at)
    assert [(t, k, p, n) for t, k, p, n, _ in rows(r) if p == 1] == [
        (0, ARRIVE, 1, 0), (5400, MIGRATE, 1, 0), (5400, START, 1, 1), (5400 + 300 + 354_600, DEPART, 1, 1)]
    s = r.summary()
    assert (s["lost_gpu_h"], s["lost_checkpoint_gpu_h"]) == (pytest.approx(300 / HOUR), 0)
    # the device fails first, at 4000 s: p1 is killed (400 s + 300 s reload lost) and the planned move is dropped
    killed = run(TWO_FOUR, SHORT_LONG, [warning(3700.0, 0, 1), DeviceFailure(4000.0, 0, 1, True, HOUR)], config=at)
    assert [k for _, k, p, *_ in rows(killed) if p == 1] == [ARRIVE, KILL, START, DEPART]
    assert killed.summary()["lost_gpu_h"] == pytest.approx(700 / HOUR)


job = st.tuples(st.integers(1, 2), st.sampled_from([500, 1000]), st.floats(0, 5), st.floats(0.5, 20))
event = st.tuples(st.floats(0, 10), st.integers(0, 1), st.integers(0, 1), st.sampled_from(["warn"] * 3 + ["fatal"]),
                  st.floats(0.01, 2))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(job, min_size=1, max_size=8), events=st.lists(event, max_size=8),
       rule=st.sampled_from(["pays", "pays_lindy"]), at=st.sampled_from(["now", "checkpoint"]),
       lead_h=st.floats(0.05, 10), checkpoint_min=st.floats(5, 60), cost_min=st.floats(0, 5), drain=st.integers(0, 1))
def test_moves_that_pay_never_leave_a_pod_on_an_unhealthy_device_and_work_adds_up(
        monkeypatch_record, jobs, events, rule, at, lead_h, checkpoint_min, cost_min, drain):
    """Warnings on busy GPUs, now and deferred moves, kills before a deferred move: after every event no pod on
    an unhealthy device (the fixture); at the end every pod is done and allocated − lost = the work."""
    cluster = nodes(*[(64000, 1 << 20, 2, "A")] * 2, (64000, 1 << 20, 4, "A"))
    pods = workload([(1000, 1024, 1 if m < 1000 else k, m, a * HOUR, (a + d) * HOUR) for k, m, a, d in jobs])
    fails = sorted(DeviceFailure(t * HOUR, n, d, kind == "fatal", 0.0 if kind == "warn" else down * HOUR,
                                 kind == "warn") for t, n, d, kind, down in events)
    config = FailureConfig(checkpoint_min=checkpoint_min, restart_min=3, checkpoint_cost_min=cost_min,
                           precursor_ahead_h=lead_h, drain_errors=drain, migrate="device", migrate_rule=rule,
                           migrate_at=at)
    seen = len(monkeypatch_record)  # the fixture's list lives across hypothesis examples
    r = run(cluster, pods, fails, policy="health", config=config)
    assert len(monkeypatch_record) > seen  # this run's events were checked by the fixture
    assert_work_adds_up(r, jobs)


def test_stay_kills_by_hand():
    # m0: its GPU 1 fails 2000 s after the move, within its 5000 s left: (200 + 2000) mod 1800 + 300 s reload;
    # m1: its GPU fails after it would have ended; m2 (open-ended): killed 3000 s in, (0 + 3000) mod 1800 + 300
    moves = [Migration(1000, 0, 0, (1,), 0, 5000, 1600, 200), Migration(1000, 1, 0, (2,), 0, 1000, 0, 0),
             Migration(1000, 2, 1, (0,), 0, np.nan, 0, 0)]
    fails = [warning(1500.0, 0, 1), DeviceFailure(2000.0, 0, 0, True, 1.0), DeviceFailure(2500.0, 0, 2, False, 1.0),
             DeviceFailure(3000.0, 0, 1, True, 1.0), DeviceFailure(4000.0, 1, 0, False, 1.0),
             DeviceFailure(9000.0, 1, 0, False, 1.0)]
    kills = stay_kills(moves, fails)
    assert kills == pytest.approx([2000, np.inf, 3000])
    assert [m.stay_loss(k, 1800, 300) for m, k in zip(moves, kills)] == pytest.approx([700, 0, 1500])
    assert len(stay_kills([], fails)) == 0


@pytest.mark.parametrize("bad, field", [
    (dict(migrate="device", migrate_rule="sometimes"), "migrate_rule"),
    (dict(migrate="node", migrate_rule="pays"), "migrate_rule"),
    (dict(migrate="device", migrate_at="later", migrate_rule="pays"), "migrate_at"),
    (dict(migrate="device", migrate_at="checkpoint"), "migrate_at"),
])
def test_bad_rule_options_are_named(bad, field):
    with pytest.raises(ValueError, match=field):
        FailureConfig(**bad)


def test_replay_cli_with_the_rule(tmp_path):
    result = runner.invoke(app, ["replay", "--policy", "health", "--failure-rate", "5e-3", "--precursor-share", "1",
                                 "--restart-min", "5", "--migrate", "device", "--migrate-rule", "pays",
                                 "--migrate-at", "checkpoint", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (pd.read_csv(tmp_path / "summary.csv")["warnings"] > 0).all()
    bad = runner.invoke(app, ["replay", "--failure-rate", "1e-3", "--migrate", "node", "--migrate-rule", "pays"])
    assert bad.exit_code == 2 and "--migrate-rule" in bad.output
