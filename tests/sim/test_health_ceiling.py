"""The health ceiling's mechanisms: a drain lifted by a priced wait (``drain_lift``) and the benchmark-only oracle."""

from __future__ import annotations

import dataclasses
import inspect
import sys

import numpy as np
import pytest
from builders import nodes
from repo import REPO
from test_replay import TYPICAL, workload
from typer.testing import CliRunner

from quasched import cli
from quasched.policies.registry import make_policy
from quasched.sim.failures import DeviceFailure, FailureConfig
from quasched.sim.replay import replay
from quasched.sim.replay_result import ReplayConfig

sys.path.insert(0, str(REPO / "benchmarks"))
import health as bench  # noqa: E402 (benchmarks/ is not a package)

DAY = 86400.0
SMALL_BIG = nodes((8000, 8192, 1, "A"), (8000, 8192, 2, "A"))
#: A (2 GPUs) holds n1 for 100 days, C holds n0 for 20 s, B (1 day of work) arrives at 5 s and waits
PODS = workload([(1000, 1024, 2, 1000, 0, 100 * DAY), (1000, 1024, 1, 1000, 0, 20),
                 (1000, 1024, 1, 1000, 5, 5 + DAY)])
WARNING_AT_10 = [DeviceFailure(10.0, 0, 0, False, 0.0, True)]


def run(config: FailureConfig, seed: int = 0, **kw):
    return replay(SMALL_BIG, PODS, ReplayConfig(policy="fgd", seed=seed, failures=config), typical=TYPICAL, **kw)


@pytest.mark.parametrize("lift_run", ["mean", "known"])
def test_drain_lift_places_the_waiting_pod_once_it_has_waited_its_priced_wait(lift_run):
    # the warning on n0 at 10 s (C still there) gives p = 0.513 ≥ 0.5: n0 is drained for ~11 days. B has waited
    # since 5 s; the node's priced wait is κ p (f − 1) λ R (C/2 + r) with λ = 2e-5 / 1.95 per GPU-hour,
    # C/2 = 900 s, r = 0, R the mean GPU pod's work (mean) or B's day (known). B is placed on n0 when it has
    # waited that long (its odds fade a little meanwhile, so the check at 5 s + W lifts the drain); without the
    # lift it waits for the drain's end.
    lam = 2e-5 / 1.95 / 3600
    p = 1 / (1 + np.exp(-(np.log(0.05 / 0.95) + np.log(20) - 19 * lam * 10)))
    run_s = {"mean": (100 * DAY + 20 + DAY) / 3, "known": DAY}[lift_run]
    wait = 1000 * p * 19 * lam * run_s * 900
    assert p >= 0.5 and 1000 < wait < 30 * 3600
    for seed in range(3):
        lifted = run(FailureConfig(checkpoint_min=30, drain_flaky=0.5, drain_lift=1000, drain_lift_run=lift_run),
                     seed, failures=WARNING_AT_10)
        assert lifted.pods.node.tolist() == [1, 0, 0]
        assert lifted.pods.placed[2] == pytest.approx(5 + wait, rel=1e-6)
        held = run(FailureConfig(checkpoint_min=30, drain_flaky=0.5), seed, failures=WARNING_AT_10)
        assert held.pods.placed[2] > 8 * DAY


def test_drain_lift_options_are_checked():
    with pytest.raises(ValueError, match="drain_lift_run"):
        FailureConfig(drain_lift_run="median")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite drain_h"):
        FailureConfig(drain_lift=10, drain_h=np.inf)
    with pytest.raises(ValueError, match="drain_lift"):
        FailureConfig(drain_lift=-1)


def test_the_oracle_cordons_the_true_flaky_nodes_for_the_whole_run():
    # n0 is cordoned from the start: every pod goes to n1, one after the other, and n0 never takes one
    config = FailureConfig(checkpoint_min=30)
    r = run(config, oracle_cordon=np.array([True, False]), failures=[])
    assert r.pods.node.tolist() == [1, 1, 1] and r.summary()["drains"] == 0
    assert r.pods.placed[1] == pytest.approx(100 * DAY)
    assert bench.oracle_cordon(None, config, np.array([8, 8])) is None
    mask = bench.oracle_cordon("flaky", FailureConfig(seed=3, flaky_share=0.5), np.full(64, 8))
    assert 10 < mask.sum() < 54  # the failure model's own draw (device_rates)
    with pytest.raises(ValueError, match="oracle"):
        bench.oracle_cordon("lucky", config, np.array([8]))


def test_the_oracle_is_unreachable_from_policies_failure_options_and_the_cli():
    assert "oracle" not in {f.name for f in dataclasses.fields(FailureConfig)}
    assert "oracle" not in {f.name for f in dataclasses.fields(ReplayConfig)}
    with pytest.raises(TypeError):
        FailureConfig(oracle="flaky")  # type: ignore[call-arg]
    for spec in ("health:oracle=1", "oracle"):
        with pytest.raises(ValueError, match="oracle"):
            make_policy(spec, TYPICAL)
    assert "oracle" not in inspect.getsource(cli)
    result = CliRunner().invoke(cli.app, ["replay", "--help"])
    assert result.exit_code == 0 and "oracle" not in result.output.lower()


def test_replay_cli_with_a_lifted_drain():
    args = ["replay", "--policy", "health", "--failure-rate", "5e-3", "--precursor-share", "1", "--drain-flaky",
            "0.5", "--drain-lift", "1000", "--drain-lift-run", "known"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    bad = CliRunner().invoke(cli.app, [*args, "--drain-h", "inf"])
    assert bad.exit_code == 2 and "finite drain_h" in bad.output
