"""The learned policy: checkpoints, the gymnasium environment, its equivalence to the registry policy, CMA-ES."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from extra import needs

needs("gymnasium", "learn")
needs("cma", "learn")

from builders import assert_consistent, nodes
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings, strategies as st

from quasched.learn.env import ArrivalEnv, candidate_block, linear_action
from quasched.learn.es import START, train, weights_of
from quasched.metrics.typical import TypicalPods
from quasched.model.workload import Workload
from quasched.policies import make_policy
from quasched.policies.fgd import linear_score
from quasched.policies.learned import FEATURES, PACKAGED, load_weights, save_weights
from quasched.sim.arrival import ExperimentConfig, run_experiment
from quasched.traces.synthetic import synthetic_cluster, synthetic_workload

SMALL_NODES, SMALL_PODS = synthetic_cluster(12, seed=1), synthetic_workload(160, seed=1)
#: candidate columns: free CPU, memory, GPU after the placement, device free milli, real slot
CPU_AFTER, GPU_AFTER, DEVICE, REAL = len(FEATURES), len(FEATURES) + 2, len(FEATURES) + 3, len(FEATURES) + 4


def same_pods(n: int, cpu: int, gpu_milli: int, num_gpu: int = 1) -> Workload:
    """``n`` identical pods (so the shuffled arrival order does not matter)."""
    return Workload(name=np.array([f"p{i}" for i in range(n)], dtype=object),
                    cpu_milli=np.full(n, cpu), memory_mib=np.full(n, 1024),
                    num_gpu=np.full(n, num_gpu), gpu_milli=np.full(n, gpu_milli),
                    gpu_model=np.array([""] * n, dtype=object))


def play(env: ArrivalEnv, seed: int, weights: list[float]) -> float:
    """One episode with the linear policy of ``weights``; its return."""
    obs, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        obs, reward, done, _, _ = env.step(linear_action(obs, env.action_masks(), weights))
        total += reward
    return total


def test_checkpoint_round_trip(tmp_path):
    path = save_weights(tmp_path / "w.json", [1, 0.5, 0, 0.25, 0, 3], trained_on="x")
    assert load_weights(path) == [1, 0.5, 0, 0.25, 0, 3]
    assert json.loads(path.read_text())["trained_on"] == "x"
    assert len(load_weights(PACKAGED)) == len(FEATURES)


@pytest.mark.parametrize("content, field", [
    ('{"features": ["fgd"], "weights": [1]}', "features"),
    ('{"features": %s, "weights": [1, 2]}' % json.dumps(FEATURES), "weights"),
    ('{"features": %s, "weights": [1, -2, 0, 0, 0, 0]}' % json.dumps(FEATURES), "weights"),
    ('{"features": %s, "weights": [0, 0, 0, 0, 0, 0]}' % json.dumps(FEATURES), "weights"),
    ('{"weights": [1]}', "features"),
    ("not json", "JSONDecodeError"),
])
def test_bad_checkpoint_names_file_and_field(tmp_path, content, field):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=rf"bad\.json.*{field}"):
        make_policy(f"learned:weights={path}", None)  # type: ignore[arg-type]


def test_env_passes_the_gymnasium_checker():
    check_env(ArrivalEnv(SMALL_NODES, SMALL_PODS, max_candidates=8), skip_render_check=True)


def test_mask_holds_exactly_the_feasible_nodes():
    # whole-GPU pods of 4 cores: n1 lacks CPU, n2 has no GPU, n3 has one GPU of another model
    spec = nodes((8000, 1 << 16, 2, "T4"), (2000, 1 << 16, 1, "T4"), (16000, 1 << 16, 0, ""), (4000, 1 << 16, 1, "V100"))
    env = ArrivalEnv(spec, same_pods(3, 4000, 1000), max_candidates=4, config=ExperimentConfig(tune_ratio=0))
    obs, _ = env.reset(seed=0)
    assert env.action_masks().tolist() == [True, True, False, False]
    rows = candidate_block(obs, 4)
    assert sorted(rows[:2, CPU_AFTER].tolist()) == [0.0, 0.5]  # n3: 0 of 4 cores left, n0: 4 of 8
    assert rows[2:].sum() == 0


def test_sharing_pods_get_one_candidate_per_distinct_fitting_device():
    spec = nodes((64000, 1 << 16, 2, "T4"), (64000, 1 << 16, 1, "T4"))
    env = ArrivalEnv(spec, same_pods(4, 1000, 500), max_candidates=6, config=ExperimentConfig(tune_ratio=0))
    obs, _ = env.reset(seed=0)
    first = candidate_block(obs, 6)
    n0 = int(np.flatnonzero(env.action_masks() & (first[:, GPU_AFTER] == 1500 / 8000))[0])
    obs, *_ = env.step(n0)  # n0 now has 500 and 1000 free: two distinct devices; n1 one
    rows = candidate_block(obs, 6)[env.action_masks()]
    assert sorted(zip(rows[:, GPU_AFTER], rows[:, DEVICE])) == [(500 / 8000, 1.0), (1000 / 8000, 0.5), (1000 / 8000, 1.0)]


def test_few_candidate_slots_offer_the_best_by_fgd():
    wide, narrow = (ArrivalEnv(SMALL_NODES, SMALL_PODS, max_candidates=k) for k in (200, 3))
    all_rows = candidate_block(wide.reset(seed=5)[0], 200)[wide.action_masks()]
    kept = candidate_block(narrow.reset(seed=5)[0], 3)
    assert len(all_rows) > 3 and narrow.action_masks().all()
    assert sorted(kept[:, 0]) == sorted(all_rows[:, 0])[-3:]


@settings(max_examples=6, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.01, 0.5, 1.0, 2.0]), min_size=6, max_size=6).filter(any),
       st.integers(0, 1000))
def test_an_episode_is_the_registry_policy_in_the_arrival_experiment(weights, seed):
    with tempfile.TemporaryDirectory() as tmp:
        path = save_weights(Path(tmp) / "w.json", weights)
        expected = run_experiment(SMALL_NODES, SMALL_PODS, ExperimentConfig(policy=f"learned:weights={path}", seed=seed))
    env = ArrivalEnv(SMALL_NODES, SMALL_PODS, max_candidates=len(SMALL_NODES) * 8)
    ret = play(env, seed, weights)
    got = env.core.recorder.result()
    assert got.node.tolist() == expected.events.node.tolist()
    assert got.used_gpu_milli.tolist() == expected.events.used_gpu_milli.tolist()  # same devices
    assert ret == pytest.approx(100 * expected.cluster.gpu_allocated / (1000 * SMALL_NODES.total_gpus))


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 1000), st.integers(1, 12))
def test_any_actions_keep_the_cluster_consistent_and_the_return_is_the_allocation(seed, k):
    env = ArrivalEnv(SMALL_NODES, SMALL_PODS, max_candidates=k)
    env.reset(seed=seed)
    pick = np.random.default_rng(seed)
    total, done = 0.0, False
    while not done:
        _, reward, done, _, _ = env.step(int(pick.integers(k)))  # masked slots included
        total += reward
    assert_consistent(env.core.cluster)
    assert total == pytest.approx(100 * env.core.cluster.gpu_allocated / (1000 * SMALL_NODES.total_gpus))
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


def test_start_weights_are_fgd_plus_twice_the_headroom():
    with tempfile.TemporaryDirectory() as tmp:
        path = save_weights(Path(tmp) / "w.json", weights_of(np.array(START)))
        policy = make_policy(f"learned:weights={path}", TypicalPods.from_workload(SMALL_PODS))
    assert [(plugin.name, weight) for plugin, weight in policy.plugins] == [("fgd", 1.0), ("headroom", 2.0)]
    assert policy.plugins[0][0].scale is linear_score and policy.device_rule == "best-score-tightest"


def test_cma_es_is_deterministic_and_keeps_the_best():
    traces = {"small": (SMALL_NODES, SMALL_PODS)}
    runs = [train(traces, [0], generations=1, popsize=3, seed=7, workers=1) for _ in range(2)]
    assert runs[0].best_weights == runs[1].best_weights and runs[0].history[0].fitness == runs[1].history[0].fitness
    assert runs[0].best_fitness >= max(runs[0].history[0].fitness)
    assert runs[0].history[0].cpu_s > 0


def test_cli_rejects_a_bad_checkpoint_before_running(tmp_path):
    from typer.testing import CliRunner

    from quasched.cli import app

    result = CliRunner().invoke(app, ["simulate", "--policy", f"fgd,learned:weights={tmp_path / 'none.json'}"],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "weights=" in result.output and "none.json" in result.output
    assert "cannot read it (No such file or directory)" in " ".join(result.output.split())
