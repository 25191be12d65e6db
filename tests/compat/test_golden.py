"""Exact reproduction of the FGD artifact on openb-default (tune 1.3), one seed per policy.

The full 6 policies × 10 seeds comparison is ``benchmarks/reproduce_published.py``
(results in BENCHMARKS.md).
"""

from __future__ import annotations

import pytest

from quasched.compat.curves import discrete_curves
from quasched.compat.golden import compare_curves, compare_events, published_curves
from quasched.sim.arrival import ExperimentConfig, run_experiment
from quasched.sim.sweep import summarize

pytestmark = pytest.mark.slow  # full runs of the published traces


@pytest.fixture(scope="module")
def published(golden_dir):
    return published_curves(golden_dir)


@pytest.fixture(scope="module")
def default_trace(openb):
    return openb.nodes(), openb.pods("default")


@pytest.mark.parametrize(
    "policy, seed, golden_file",
    [
        ("fgd", 42, "FGD_42.csv"),
        ("dotprod", 42, "DotProd_42.csv"),
        ("dotprod", 43, "DotProd_43.csv"),
        ("gpuclustering", 42, "GpuClustering_42.csv"),
        ("gpupacking", 42, "GpuPacking_42.csv"),
        ("bestfit", 42, "BestFit_42.csv"),
    ],
)
def test_deterministic_policy_reproduces_published_run(policy, seed, golden_file, published,
                                                       default_trace, compat_dir, golden_dir):
    nodes, workload = default_trace
    result = run_experiment(nodes, workload, ExperimentConfig(policy=policy, seed=seed, rng="go", compat_data=compat_dir))
    run = summarize(result, keep_log=True, curves=discrete_curves)
    for diff in compare_curves(run, published):
        assert not diff.mismatches, f"{diff.curve}: {diff.mismatches[:5]}"
    mismatches = compare_events(run, golden_dir / golden_file, nodes.total_gpus)
    assert mismatches == dict.fromkeys(mismatches, 0)


def test_fgd_end_state_matches_reference_summary(default_trace, compat_dir):
    nodes, workload = default_trace
    result = run_experiment(nodes, workload, ExperimentConfig(policy="fgd", seed=42, rng="go", compat_data=compat_dir))
    assert len(result.events) == 10866 and len(result.failed) == 2532
    assert result.cluster.used_gpu_milli == 5_919_410
    assert int(result.cluster.cpu_free.sum()) == 107_018_000 - 89_928_302
    assert result.events.frag_milli[-1] == pytest.approx(291_361.65, abs=0.01)


def test_random_policy_matches_published_distribution(published, default_trace, compat_dir):
    nodes, workload = default_trace
    result = run_experiment(nodes, workload, ExperimentConfig(policy="random", seed=42, rng="go", compat_data=compat_dir))
    col130 = summarize(result, curves=discrete_curves).curves.alloc[130]
    reference = published["alloc"]
    values = reference[reference.sc_policy == "01-Random"]["130"]
    assert values.min() <= col130 <= values.max()
    assert col130 == 87.29  # the spec's validated prototype: same random stream, draw for draw
