"""GPU failures in the replay: hand-computed timelines, the failure process, health-aware placement, invariants."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from builders import assert_consistent, nodes
from hypothesis import HealthCheck, given, settings, strategies as st
from test_replay import TYPICAL, rows, workload
from typer.testing import CliRunner

from quasched.cli import app
from quasched.model import Cluster
from quasched.policies.base import CycleState
from quasched.policies.health import HealthScore
from quasched.sim import records
from quasched.sim.failures import DeviceFailure, FailureConfig, device_rates, failure_stream
from quasched.sim.records import DEPART, DOWN, KILL, MIGRATE, QUEUE, START, UP
from quasched.sim.replay import replay
from quasched.sim.replay_result import DONE, ReplayConfig
from quasched.sim.work_ledger import Kill

runner = CliRunner()
HOUR = 3600.0
#: checkpoints every 30 min, 2 min to restart
RECOVERY = FailureConfig(checkpoint_min=30, restart_min=2)
#: one 10-hour job on one whole GPU, arriving at 0
JOB = workload([(1000, 1024, 1, 1000, 0, 10 * HOUR)])


def run(cluster, pods, failures, policy="bestfit", config=RECOVERY, **kw):
    return replay(cluster, pods, ReplayConfig(policy=policy, seed=1, failures=config), typical=TYPICAL,
                  failures=failures, **kw)


def test_killed_job_restarts_on_the_other_device_from_its_checkpoint():
    # device 0 fails at 5000 s: 3600 s were checkpointed, 1400 s lost; the job restarts at
    # once on device 1, spends 120 s reloading (lost) and runs the 32,400 s left
    r = run(nodes((8000, 8192, 2, "A")), JOB, [DeviceFailure(5000.0, 0, 0, False, 600.0)])
    assert rows(r) == [
        (0, records.ARRIVE, 0, 0, 0), (5000, DOWN, -1, 0, 0), (5000, KILL, 0, 0, 0), (5000, START, 0, 0, 0),
        (5600, UP, -1, 0, 0), (5000 + 120 + 32_400, DEPART, 0, 0, 0)]
    assert r.pods.devices[0] == (1,) and r.pods.placed[0] == 0 and r.pods.departed[0] == 37_520
    s = r.summary()
    assert s["lost_gpu_h"] == pytest.approx((1400 + 120) / HOUR)
    assert s["alloc_gpu_h"] == pytest.approx(37_520 / HOUR)
    assert s["goodput_pct"] == pytest.approx(100 * 36_000 / 37_520)
    assert r.ledger is not None and r.ledger.losses == [(5000, 1400), (5000, 120)]  # the kill, then the reload
    assert r.ledger.kills == [Kill(5000, 0, 0, 0, 1400 + 120)]  # on node 0, run from 0: the work and reload to come
    assert r.cluster.errors.prior == RECOVERY.error_prior(0.0)
    assert (s["lost_work_gpu_h"], s["lost_reload_gpu_h"], s["lost_checkpoint_gpu_h"]) == pytest.approx((1400 / HOUR, 120 / HOUR, 0))
    assert (s["interruptions"], s["device_failures"], s["device_recoveries"], s["requeue_wait_mean_s"]) == (1, 1, 1, 0)


def test_killed_job_waits_for_the_repair_on_a_one_gpu_node():
    # a fatal failure at 7300 s (4 checkpoints = 7200 s kept, 100 s lost); the only device is
    # back after 1 h, the job restarts then: 120 s reload + 28,800 s left
    r = run(nodes((8000, 8192, 1, "A")), JOB, [DeviceFailure(7300.0, 0, 0, True, HOUR)])
    assert [k for _, k, *_ in rows(r)] == [records.ARRIVE, DOWN, KILL, QUEUE, UP, START, DEPART]
    assert r.pods.departed[0] == 7300 + HOUR + 120 + 28_800
    s = r.summary()
    assert s["lost_gpu_h"] == pytest.approx(220 / HOUR)
    assert s["requeue_wait_mean_s"] == HOUR
    assert s["alloc_gpu_h"] - s["lost_gpu_h"] == pytest.approx(10)  # the useful work is the job's


def test_a_sharing_pod_loses_its_share_and_idle_failures_only_go_to_the_log():
    pods = workload([(1000, 1024, 1, 500, 0, 2 * HOUR)])  # half a GPU
    failures = [DeviceFailure(100.0, 0, 1, False, 60.0), DeviceFailure(1000.0, 0, 0, False, 60.0)]
    r = run(nodes((8000, 8192, 2, "A")), pods, failures, config=FailureConfig(checkpoint_min=60))
    assert r.summary()["lost_gpu_h"] == pytest.approx(0.5 * 1000 / HOUR)  # nothing checkpointed yet
    assert r.cluster.errors.time == [100.0, 1000.0] and r.cluster.errors.device == [1, 0]


def test_health_score_by_hand():
    cluster = Cluster(nodes((8000, 8192, 1, "A"), (8000, 8192, 1, "A"), (8000, 8192, 1, "A")))
    plugin = HealthScore(half_life_h=1.0)
    plugin.attach(cluster, None)  # type: ignore[arg-type]
    cluster.errors.record(0.0, 0, 0)
    cluster.errors.record(HOUR, 1, 0)
    cluster.errors.record(HOUR, 1, 0)
    scores = plugin.score(cluster, None, np.arange(3), CycleState())  # type: ignore[arg-type]
    assert scores == pytest.approx([75, 0, 100])  # levels 1/2, 2, 0: relative to the worst
    cluster.errors.now = 3 * HOUR  # levels 1/8, 1/2, 0: below one error, relative to one
    assert plugin.score(cluster, None, np.arange(3), CycleState()) == pytest.approx(  # type: ignore[arg-type]
        [87.5, 50, 100])
    assert plugin.score(cluster, None, np.array([2]), CycleState()) == pytest.approx([100])  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(6))
def test_health_aware_placement_avoids_the_node_that_just_failed(seed):
    cluster = nodes(*[(8000, 8192, 1, "A")] * 3)
    pods = workload([(1000, 1024, 1, 1000, 10, 20)])
    failures = [DeviceFailure(1.0, n, 0, False, 2.0) for n in (0, 2)]  # both back before the pod arrives
    r = replay(cluster, pods, ReplayConfig(policy="health", seed=seed, failures=RECOVERY), typical=TYPICAL,
               failures=failures)
    assert r.pods.node[0] == 1


def test_failure_rate_and_flaky_nodes():
    num_gpus = np.array([8] * 40 + [2] * 60)
    config = FailureConfig(rate=1e-3, seed=3, flaky_share=0.1, flaky_factor=10)
    rates, flaky = device_rates(config, num_gpus)
    assert rates.mean() * HOUR == pytest.approx(1e-3)  # the mean over GPUs is the configured rate
    per_node = np.add.reduceat(rates, np.r_[0, np.cumsum(num_gpus)[:-1]]) / num_gpus
    assert flaky.any() and np.ptp(per_node[flaky]) == np.ptp(per_node[~flaky]) == 0
    assert per_node[flaky][0] == pytest.approx(10 * per_node[~flaky][0])
    stream = failure_stream(config, num_gpus, 500.0)
    events = [next(stream) for _ in range(4000)]
    times = np.array([e.time for e in events])
    assert (np.diff(times) >= 0).all() and times[0] >= 500
    expected = rates.sum() * (times[-1] - 500)
    assert abs(len(events) - expected) < 4 * np.sqrt(expected)
    fatal = np.array([e.fatal for e in events])
    assert abs(fatal.mean() - 0.5) < 0.05
    assert all(e.down_s == 600 for e in events if not e.fatal)


def test_failure_process_is_seeded_and_common_to_policies():
    num_gpus = np.array([4, 8, 2])
    first = lambda seed: [next(s) for s in [failure_stream(FailureConfig(rate=0.05, seed=seed), num_gpus, 0.0)]  # noqa: E731
                          for _ in range(50)]
    assert first(7) == first(7) != first(8)
    assert list(failure_stream(FailureConfig(rate=0.0), num_gpus, 0.0)) == []


@pytest.mark.parametrize("bad, field", [
    (dict(rate=-1), "rate"), (dict(checkpoint_min=0), "checkpoint_min"), (dict(transient_share=2), "transient_share"),
    (dict(flaky_factor=0.5), "flaky_factor"), (dict(repair_h=float("nan")), "repair_h"),
])
def test_bad_failure_options_are_named(bad, field):
    with pytest.raises(ValueError, match=field):
        FailureConfig(**bad)


def test_failures_need_duration_departures():
    with pytest.raises(ValueError, match="duration"):
        replay(nodes((8000, 8192, 1, "A")), JOB, ReplayConfig(departure="trace", failures=RECOVERY), typical=TYPICAL)
    with pytest.raises(ValueError, match="config.failures"):
        replay(nodes((8000, 8192, 1, "A")), JOB, ReplayConfig(), typical=TYPICAL, failures=[])


def test_random_failures_are_deterministic_per_seed():
    cluster = nodes(*[(16000, 65536, 4, "A")] * 6)
    rng = np.random.default_rng(5)
    pods = workload([(1000, 1024, int(rng.integers(1, 3)), 1000, float(t), float(t + rng.uniform(HOUR, 20 * HOUR)))
                     for t in np.sort(rng.uniform(0, 50 * HOUR, 60))])
    config = FailureConfig(rate=2e-3, seed=11, flaky_share=0.3)
    a, b = (replay(cluster, pods, ReplayConfig(policy="health", seed=4, failures=config), typical=TYPICAL)
            for _ in range(2))
    assert rows(a) == rows(b) and a.summary()["lost_gpu_h"] == b.summary()["lost_gpu_h"]
    assert a.summary()["device_failures"] > 0


# ------------------------------------------------------------------ invariants
job = st.tuples(st.integers(1, 4), st.sampled_from([250, 500, 1000]), st.floats(0, 20), st.floats(0.1, 10))
failure = st.tuples(st.floats(0, 30), st.integers(0, 2), st.integers(0, 3), st.booleans(), st.floats(0.01, 5))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(job, min_size=1, max_size=12), fails=st.lists(failure, max_size=10),
       checkpoint=st.floats(0.05, 3), restart=st.floats(0, 0.5), policy=st.sampled_from(["fgd", "health"]))
def test_failures_never_leave_a_pod_on_an_unhealthy_device(monkeypatch_record, jobs, fails, checkpoint, restart,
                                                            policy):
    """After every event: no pod on an unhealthy device, nothing over-committed, each running pod placed
    once; at the end every pod is done and allocated − lost GPU-hours = the pods' work exactly."""
    cluster = nodes(*[(64000, 1 << 20, 4, "A")] * 3)
    rows_ = [(1000, 1024, 1 if m < 1000 else k, m, a * HOUR, (a + d) * HOUR) for k, m, a, d in jobs]
    pods = workload(rows_)
    failures = sorted(DeviceFailure(t * HOUR, n, d, f, down * HOUR) for t, n, d, f, down in fails)
    config = FailureConfig(checkpoint_min=checkpoint * 60, restart_min=restart * 60)
    seen = len(monkeypatch_record)  # the fixture's list lives across hypothesis examples
    r = run(cluster, pods, failures, policy=policy, config=config)
    assert len(monkeypatch_record) > seen  # this run's events were checked by the fixture
    assert_work_adds_up(r, jobs)


def assert_work_adds_up(r, jobs) -> None:
    """Every pod done; lost GPU-hours and energy not negative; allocated − lost = the pods' work exactly;
    kills and migrations as recorded."""
    s = r.summary()
    assert (r.pods.status == DONE).all()
    work = sum(d * HOUR * (m / 1000) * (1 if m < 1000 else k) for k, m, _, d in jobs)
    assert s["lost_gpu_h"] >= 0 and r.energy_kwh() >= 0
    assert (s["alloc_gpu_h"] - s["lost_gpu_h"]) * HOUR == pytest.approx(work, rel=1e-9, abs=1e-6)
    assert s["interruptions"] == int(np.sum(r.events.kind == KILL))
    assert s["migrations"] == int(np.sum(r.events.kind == MIGRATE))
    assert r.ledger is not None and sum(g for _, g in r.ledger.losses) / HOUR == pytest.approx(s["lost_gpu_h"])
    assert sum(s[f"lost_{cause}_gpu_h"] for cause in ("work", "reload", "checkpoint")) == pytest.approx(s["lost_gpu_h"])


@pytest.fixture
def monkeypatch_record(monkeypatch):
    """Check the cluster after every recorded event: consistent, no pod on an unhealthy device, no new pod
    on a cordoned (drained) node."""
    original = records.EventRecorder.record
    checked = []

    def record(self, time, kind, pod, node, *args, **kwargs):
        cluster = self.cluster
        assert_consistent(cluster)
        for placement in cluster.placements.values():
            assert cluster.gpu_healthy[placement.node, list(placement.devices)].all(), "pod on an unhealthy device"
        if kind in (records.ARRIVE, START):
            assert not cluster.cordoned[node], "new pod on a drained node"
        checked.append(kind)
        return original(self, time, kind, pod, node, *args, **kwargs)

    monkeypatch.setattr(records.EventRecorder, "record", record)
    return checked


@pytest.mark.slow  # replays of real traces
def test_replay_cli_with_failures_writes_losses(tmp_path):
    result = runner.invoke(app, ["replay", "--policy", "fgd,health", "--failure-rate", "5e-3", "--restart-min", "2",
                                 "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "lost" in result.output and (tmp_path / "failures.png").stat().st_size > 0
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert (summary["device_failures"] > 0).all() and (summary["lost_gpu_h"] > 0).all()
    pods = pd.read_csv(tmp_path / "pods_FGD_42.csv")
    assert pods["interruptions"].sum() == summary["interruptions"][0]
    bad = runner.invoke(app, ["replay", "--failure-rate", "1e-3", "--checkpoint-min", "0"])
    assert bad.exit_code == 2 and "--checkpoint-min" in bad.output
    drained = runner.invoke(app, ["replay", "--policy", "health:flaky=256", "--failure-rate", "5e-3",
                                  "--drain-flaky", "0.5"])
    assert drained.exit_code == 0, drained.output
    bad = runner.invoke(app, ["replay", "--failure-rate", "1e-3", "--drain-flaky", "1"])
    assert bad.exit_code == 2 and "--drain-flaky" in bad.output
