"""The flaky-node posterior (:mod:`quasched.policies.flaky`): hand-computed odds, monotonicity, calibration."""

from __future__ import annotations

import numpy as np
import pytest
from builders import nodes, pod
from hypothesis import given, settings, strategies as st
from test_replay import TYPICAL, workload

from quasched.model import Cluster
from quasched.model.health import ErrorPrior
from quasched.policies.base import CycleState
from quasched.policies.flaky import FlakyPosterior
from quasched.policies.registry import make_policy
from quasched.sim.failures import DeviceFailure, FailureConfig, device_rates, failure_stream
from quasched.sim.replay import replay
from quasched.sim.replay_result import ReplayConfig

HOUR = 3600.0
PRIOR = ErrorPrior(share=0.05, factor=20.0, rate=1e-5 / HOUR)


def scored(errors: list[int], p, now: float = 0.0, prior: ErrorPrior | None = PRIOR) -> np.ndarray:
    """Scores of 8-GPU nodes with ``errors[i]`` errors on node ``i`` at ``now``."""
    cluster = Cluster(nodes(*[(64_000, 65_536, 8, "A")] * len(errors)))
    cluster.errors.prior = prior
    for node, n in enumerate(errors):
        for _ in range(n):
            cluster.errors.record(0.0, node, 0)
    cluster.errors.now = now
    plugin = FlakyPosterior()
    plugin.attach(cluster, None)  # type: ignore[arg-type]
    return plugin.score(cluster, p, np.arange(len(errors)), CycleState())


def test_posterior_by_hand():
    # odds 1/19 · 20^n: p = 1/20, 20/39, 400/419
    p = np.array([1 / 20, 20 / 39, 400 / 419])
    assert scored([0, 1, 2], pod(k=8, m=1000)) == pytest.approx(100 * (1 - p))  # d · k = K² = 64
    assert scored([0, 1, 2], pod(k=1, m=1000)) == pytest.approx(100 * (1 - p / 64))
    assert scored([0, 1, 2], pod(k=1, m=500)) == pytest.approx(100 * (1 - p / 128))  # half a GPU's work
    assert scored([0, 1, 2], pod(cpu=4000)) == pytest.approx([100] * 3)  # a CPU pod loses nothing to a GPU
    assert scored([0, 1, 2], pod(k=8, m=1000), prior=None) == pytest.approx([100] * 3)  # no model, no posterior


def test_clean_time_lowers_the_odds():
    # (f − 1) λ g T = ln 2: every node's odds halve; one error: 10/19 → p = 10/29
    t = np.log(2) / (19 * 1e-5 / HOUR * 8)
    assert scored([1], pod(k=8, m=1000), now=t) == pytest.approx([100 * (1 - 10 / 29)])
    assert scored([1], pod(k=8, m=1000), now=t)[0] > scored([1], pod(k=8, m=1000))[0]


def test_a_certain_prior_or_none():
    assert scored([0], pod(k=8, m=1000), prior=ErrorPrior(0.0, 20.0, 1e-9)) == pytest.approx([100])
    assert scored([0], pod(k=8, m=1000), prior=ErrorPrior(1.0, 20.0, 1e-9)) == pytest.approx([0])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=5), st.floats(0, 5e4), st.integers(1, 8))
def test_more_errors_or_more_gpus_never_score_more(errors, now, k):
    base = scored(errors, pod(k=k, m=1000), now)
    assert ((0 <= base) & (base <= 100)).all()
    assert (scored([e + 1 for e in errors], pod(k=k, m=1000), now) <= base + 1e-9).all()
    assert (scored(errors, pod(k=min(k + 1, 8), m=1000), now) <= base + 1e-9).all()
    assert (scored(errors, pod(k=k, m=1000), now + HOUR) >= base - 1e-9).all()


def test_posterior_is_calibrated_on_the_failure_model():
    # 1000 8-GPU nodes, errors (failures and warnings) for 500 h: Σ p ≈ the number of flaky nodes
    config = FailureConfig(rate=1e-4, seed=5, precursor_share=0.5)
    num_gpus = np.full(1000, 8)
    horizon = 500 * HOUR
    errors = np.zeros(len(num_gpus), dtype=int)
    for event in failure_stream(config, num_gpus, 0.0):
        if event.time >= horizon:
            break
        errors[event.node] += 1
    prior = config.error_prior(0.0)
    odds = prior.share / (1 - prior.share) * prior.factor ** errors * np.exp(
        -(prior.factor - 1) * prior.rate * 8 * horizon)
    p = odds / (1 + odds)
    flaky = device_rates(config, num_gpus)[1]
    assert abs(p.sum() - flaky.sum()) < 4 * np.sqrt((p * (1 - p)).sum()) + 3
    assert p[flaky].mean() > 0.8 and p[~flaky].mean() < 0.05


def test_health_adds_the_flaky_term_only_when_weighted():
    assert [type(p).__name__ for p, _ in make_policy("health", None).plugins] == ["FGD", "HealthScore"]
    plugins = make_policy("health:flaky=64", None).plugins
    assert [(type(p).__name__, w) for p, w in plugins][-1] == ("FlakyPosterior", 64.0)


def test_replay_keeps_a_pod_off_a_node_that_erred_weeks_ago():
    # two warnings on node 0 ten weeks before the pod arrives: Health's week half-life has forgotten them
    # (weight 0 here: FGD ties go to the rank, node 0 on some seeds); the posterior has not (p ≈ 0.95)
    week = 168 * HOUR
    pods = workload([(1000, 1024, 1, 1000, 10 * week, 10 * week + HOUR)])
    warnings = [DeviceFailure(t, 0, 0, False, 0.0, True) for t in (1.0, 2.0)]
    config = FailureConfig(checkpoint_min=30)
    chosen = {spec: {int(replay(nodes(*[(8000, 8192, 1, "A")] * 3), pods,
                                ReplayConfig(policy=spec, seed=seed, failures=config), typical=TYPICAL,
                                failures=warnings).pods.node[0]) for seed in range(8)}
              for spec in ("health:weight=0", "health:weight=0,flaky=256")}
    assert 0 in chosen["health:weight=0"] and 0 not in chosen["health:weight=0,flaky=256"]


def test_drain_flaky_cordons_until_the_posterior_falls_below_the_threshold():
    # one warning on node 0 at 1 s: odds 20/19, p = 0.51 ≥ 0.5; the log odds fall by (f − 1) λ per second on a
    # 1-GPU node, so node 0 is cordoned until 1 + ln(20/19) / ((f − 1) λ). A arrives at 2 s and takes node 1;
    # B, arriving after 5 days, waits for node 0's uncordon
    config = FailureConfig(checkpoint_min=30, drain_flaky=0.5)
    prior = config.error_prior(0.0)
    until = 1 + np.log(20 / 19) / ((prior.factor - 1) * prior.rate)
    assert 8 * 86400 < until < 14 * 86400
    pods = workload([(1000, 1024, 1, 1000, 2, 100 * 86400), (1000, 1024, 1, 1000, 5 * 86400, 6 * 86400)])
    for seed in range(4):
        r = replay(nodes(*[(8000, 8192, 1, "A")] * 2), pods, ReplayConfig(policy="fgd", seed=seed, failures=config),
                   typical=TYPICAL, failures=[DeviceFailure(1.0, 0, 0, False, 0.0, True)])
        assert r.pods.node.tolist() == [1, 0] and r.pods.placed[1] == pytest.approx(until)


def test_drain_flaky_is_checked():
    with pytest.raises(ValueError, match="drain_flaky"):
        FailureConfig(drain_flaky=1.0)
