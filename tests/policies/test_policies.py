"""Hand-computed scores, device choices, filter and host selection for every policy."""

from __future__ import annotations

import numpy as np
import pytest
from builders import cluster_with_free, nodes, pod

from quasched.metrics.typical import TypicalPods
from quasched.model import Cluster
from quasched.model.random import NumpyStream
from quasched.policies import (REGISTRY, CycleState, Policy, Scheduler, devices, make_policy, parse_spec, parse_specs,
                               policy_names)
from quasched.policies.best_fit import BestFit
from quasched.policies.dot_product import DotProduct
from quasched.policies.filter import feasible_nodes
from quasched.policies.first_fit import FirstFit
from quasched.policies.gpu_clustering import GpuClustering
from quasched.policies.gpu_packing import GpuPacking


def scores(plugin, cluster, p):
    """Raw scores of a score plugin on every node."""
    plugin.attach(cluster, NumpyStream(0))
    return plugin.score(cluster, p, np.arange(cluster.n_nodes), CycleState()).tolist()


def alone(plugin) -> Policy:
    return Policy([(plugin, 1.0)])


@pytest.mark.parametrize(
    "free, k, m, expected",
    [
        ([200, 1000, 1000, 500], 2, 1000, 48),
        ([1000] * 4, 2, 1000, 29),
        ([1000] * 8, 2, 1000, 25),
        ([200, 1000, 1000, 500], 2, 200, 93),
    ],
)
def test_gpu_packing_reference_unit_vectors(free, k, m, expected):
    assert scores(GpuPacking(), cluster_with_free([free]), pod(k=k, m=m)) == [expected]


def test_gpu_packing_ignores_cpu_only_pods():
    assert scores(GpuPacking(), cluster_with_free([[1000], [300]]), pod()) == [0, 0]


def test_dot_product_prefers_the_node_left_emptiest_in_the_request_direction():
    cluster = cluster_with_free([[1000, 1000], [500, 0]], cpu=64_000)
    # a = 64/128·8/128 + (2000/8000)(500/8000) = 0.046875 → trunc(100·(1−a/2)) = 97
    # a = 64/128·8/128 + (500/8000)(500/8000)  = 0.0351563 → 98
    assert scores(DotProduct(), cluster, pod(cpu=8000, k=1, m=500)) == [97, 98]


def test_best_fit_raw_and_min_max_normalisation():
    cluster = cluster_with_free([[1000, 1000], [500, 0]], cpu=64_000)
    policy = BestFit()
    raw = scores(policy, cluster, pod(cpu=8000, k=1, m=500))
    # s = (56/128)·0.5 + (1500/8000)·0.5 = 0.3125 → 68;  s = 0.21875 + 0 = 0.21875 → 78
    assert raw == [68, 78]
    assert policy.normalize(np.array(raw)).tolist() == [0, 100]
    assert policy.normalize(np.array([5, 5])).tolist() == [0, 0]


def test_gpu_clustering_affinity_tiers():
    cluster = cluster_with_free([[1000] * 8] * 4)
    for uid, (node, m, device) in enumerate([(1, 500, 0), (2, 500, 0), (2, 1000, 1), (3, 1000, 0)]):
        cluster.place(pod(uid=uid, k=1, m=m), node, (device,))
    s = scores(GpuClustering(), cluster, pod(uid=9, k=1, m=300))
    # idle: 0 + 25; only share pods: 1 + 75 (used 500 → 25·500 div 8000 = 1); mixed: 4 + 50; other class: 3 + 0
    assert s == [25, 76, 54, 3]


def test_first_fit_takes_the_first_feasible_node():
    cluster = cluster_with_free([[0], [1000], [1000]])
    scheduler = Scheduler(cluster, alone(FirstFit()), rank=np.array([2, 1, 0]), rng=NumpyStream(0))
    assert scheduler.schedule(pod(k=1, m=1000)).node == 1


def test_ties_go_to_the_lowest_rank():
    cluster = cluster_with_free([[1000]] * 3)
    scheduler = Scheduler(cluster, alone(GpuPacking()), rank=np.array([2, 0, 1]), rng=NumpyStream(0))
    assert scheduler.schedule(pod(k=1, m=1000)).node == 1


def test_single_feasible_node_is_chosen_without_scoring():
    class Exploding(GpuPacking):
        def score(self, *args):
            raise AssertionError("score must not run")

    cluster = cluster_with_free([[0], [1000]])
    assert Scheduler(cluster, alone(Exploding()), np.array([0, 1]), NumpyStream(0)).schedule(pod(k=1, m=1)).node == 1


def test_best_device_choice_and_exclusive_allocation():
    free = np.array([700, 300, 1000, 300])
    assert devices.best_fit(free, pod(k=1, m=200)) == (1,)
    assert devices.best_fit(free, pod(k=1, m=500)) == (0,)
    assert devices.best_fit(np.array([1000, 0, 1000, 1000]), pod(k=2, m=1000)) == (0, 2)


def test_random_device_choice_is_uniform_over_fitting_devices():
    rng = NumpyStream(3)
    picks = [devices.uniform(np.array([300, 1000, 100, 600]), pod(k=1, m=250), rng)[0] for _ in range(3000)]
    assert set(picks) == {0, 1, 3}
    assert all(850 < picks.count(d) < 1150 for d in (0, 1, 3))


def test_filter_checks_every_resource_and_gpu_model():
    spec = nodes((8000, 1000, 2, "T4"), (8000, 1000, 2, "V100M16"), (2000, 1000, 2, "T4"),
                 (8000, 100, 2, "T4"), (8000, 1000, 0, ""))
    cluster = Cluster(spec)
    assert feasible_nodes(cluster, pod(cpu=4000, mem=500, k=1, m=500, spec="T4|A10")).tolist() == [0]
    assert feasible_nodes(cluster, pod(cpu=4000, mem=500)).tolist() == [0, 1, 4]
    assert feasible_nodes(cluster, pod(cpu=1000, mem=10, k=3, m=1000)).tolist() == []


def test_filter_enforces_app_density_rdma_and_disk():
    cluster = Cluster(nodes((8000, 4096, 1, "T4"), (8000, 4096, 1, "T4")))
    first = pod(uid=0, app="a", max_per_node=1, rdma=60)
    cluster.place(first, 0)
    second = pod(uid=1, app="a", max_per_node=1)
    assert feasible_nodes(cluster, second).tolist() == [1]
    assert feasible_nodes(cluster, pod(uid=2, rdma=50)).tolist() == [1]


@pytest.mark.parametrize("name", policy_names())
def test_every_registered_policy_builds_and_scores(name):
    cluster = cluster_with_free([[1000, 500], [1000, 1000]])
    typical = TypicalPods(((1000, 500, 1, ""),), (1,), np.array([1.0]))
    policy = make_policy(name, typical)
    policy.attach(cluster, NumpyStream(0))
    for p in (pod(k=1, m=500), pod(k=2, m=1000), pod()):
        final = policy.score(cluster, p, np.array([0, 1]), CycleState())
        assert final.shape == (2,)
        for plugin, _ in policy.plugins:  # the 0..100 contract of NormalizeScore
            part = plugin.normalize(plugin.score(cluster, p, np.array([0, 1]), CycleState()))
            assert ((part >= 0) & (part <= 100) | np.isneginf(part)).all(), (name, part)


@pytest.mark.parametrize("name", policy_names())
def test_every_registered_policy_says_what_it_is_for(name):
    info = REGISTRY.get(name)
    assert info.purpose and info.summary and info.label and not info.summary.lower().startswith("ours")
    assert str(parse_spec(name)) == name and parse_spec(name).label == info.label  # defaults are not spelled out


def test_unknown_policy_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown policy 'nope'; choose from random, .*, guard, power, health"):
        make_policy("nope", None)  # type: ignore[arg-type]


def test_policy_specs_parse_validate_and_label():
    fgd, guard, best = parse_specs("fgd,guard:beta=4,delta=8,bestfit")
    assert (fgd.label, guard.label, best.label) == ("FGD", "Guard(beta=4.0, delta=8.0)", "BestFit")
    assert str(guard) == "guard:beta=4.0,delta=8.0" and parse_specs(str(guard)) == [guard]
    assert str(parse_specs("pwr:fgd=900")[0]) == "pwr:fgd=900" and parse_specs("health:flaky=1")[0].label == \
        "Health(flaky=1.0)"
    assert [s.name for s in parse_specs("all")] == ["random", "dotprod", "gpuclustering", "gpupacking",
                                                    "bestfit", "fgd"]
    for bad, why in (("FGD", "unknown policy"), ("guard:beta=-1", "at least"), ("guard:learn=1", "bad parameter"),
                     ("fgd:scale=cubic", "choose from"), ("power:beta=x", "not a float"), ("pwr:fgd=1001", "at most")):
        with pytest.raises(ValueError, match=why):
            parse_specs(bad)


@pytest.mark.parametrize("spec, terms", [
    ("guard:beta=3,delta=5", [("fgd", 1.0), ("home-headroom", 3.0), ("device-balance", 16.0), ("last-homes", 5.0)]),
    ("power:gamma=2", [("fgd", 1.0), ("home-headroom", 8.0), ("cpu-balance", 2.0), ("pwr-fill", 16.0), ("pwr", 1.0),
                       ("pwr", 0.001)]),
    ("health:weight=3,flaky=2", [("fgd", 1.0), ("health", 3.0), ("flaky", 2.0)]),
    ("pwr:fgd=900", [("pwr", 100.0), ("fgd", 900.0)]),
])
def test_a_composed_policy_scores_the_weighted_sum_of_its_terms(spec, terms):
    cluster = cluster_with_free([[1000, 500], [1000, 1000], [300, 0]])
    typical = TypicalPods(((1000, 500, 1, ""), (2000, 1000, 1, "")), (3, 1), np.array([0.75, 0.25]))
    nodes_, p = np.array([0, 1, 2]), pod(k=1, m=1000)
    composed = make_policy(spec, typical)
    composed.attach(cluster, NumpyStream(0))
    assert [(plugin.name, weight) for plugin, weight in composed.plugins] == terms
    got = composed.score(cluster, p, nodes_, CycleState())
    want = sum(w * plugin.normalize(plugin.score(cluster, p, nodes_, CycleState())) for plugin, w in composed.plugins)
    np.testing.assert_allclose(got, want)


def test_fgd_follows_typical_pods_learned_online():
    from quasched.metrics.typical import TypicalWindow
    from quasched.policies.fgd import FGD

    window = TypicalWindow(window=4, every=2)
    cluster = cluster_with_free([[1000, 1000], [600, 1000]])
    plugin = FGD(window)
    plugin.attach(cluster, NumpyStream(0))
    sharing = pod(k=1, m=400)
    # no arrivals yet: no typical pods, every usable device scores 50
    assert plugin.score(cluster, sharing, np.array([0, 1]), CycleState()).tolist() == [[50, -np.inf], [50, 50]]
    for uid in range(2):  # two 1-GPU arrivals: typical = {1 x 1000 m}
        window.observe(pod(uid=uid, k=1, m=1000))
    assert window.current.shapes == ((1000, 1000, 1, ""),)
    # node 1 [600, 1000], F = 600 (the 600 m device cannot host a typical pod). 400 m on the 600 m device:
    # [200, 1000], F = 200, ΔF = +400 → trunc(100 σ(0.4)) = 59; on the whole device: [600, 600], nothing
    # hosts a typical pod, F = 1200, ΔF = −600 → trunc(100 σ(−0.6)) = 35
    assert plugin.score(cluster, sharing, np.array([1]), CycleState()).tolist() == [[59, 35]]
    for uid in range(2, 6):  # the window forgets: now only 400 m pods are typical
        window.observe(pod(uid=uid, k=1, m=400))
    assert window.current.shapes == ((1000, 400, 1, ""),)
    # with 400 m typical pods, keeping devices that still host one wins: [200, 1000] leaves a 200 m
    # fragment (ΔF = −200 → 45), [600, 600] none (ΔF = 0 → 50)
    assert plugin.score(cluster, sharing, np.array([1]), CycleState()).tolist() == [[45, 50]]
    assert plugin.table.typical is window.current



def test_a_second_shape_joins_the_learned_typical_pods_within_a_few_arrivals():
    """The service's window (2000 arrivals, rebuilt every 200 or on a drift of 0.05): one whole-GPU job, then
    half-GPU ones; the mix the policy uses follows each arrival, not the first job alone until the 200th."""
    from quasched.metrics.typical import TypicalWindow

    window = TypicalWindow()
    guard = make_policy("guard", window)
    cluster = cluster_with_free([[1000, 1000], [500, 1000]])
    guard.attach(cluster, NumpyStream(0))
    whole, half = pod(uid=1, cpu=4000, k=1, m=1000), pod(uid=2, cpu=2000, k=1, m=500)
    window.observe(whole)
    assert window.current.shapes == (whole.shape,)
    # the mixes {whole 1/2, half 1/2}, {1/3, 2/3}, {1/4, 3/4} are 0.5, 1/6 and 1/12 apart in total variation
    for uid in (2, 3, 4):
        built = window.current
        window.observe(pod(uid=uid, cpu=2000, k=1, m=500))
        assert window.current is not built and window.distance() == 0
    # 3 half and 1 whole: 95 % of 4 pods is 3.8 > 3, so both are typical, 3/4 and 1/4
    assert window.current.shapes == (half.shape, whole.shape)
    np.testing.assert_allclose(window.current.freq, [0.75, 0.25])
    guard.score(cluster, half, np.array([0, 1]), CycleState())
    fgd, *following = (plugin for plugin, _ in guard.plugins)
    assert fgd.table.typical is window.current and all(p._known is window.current for p in following)
    # whole, half: {2/5, 3/5} is 0.15 from {1/4, 3/4} and {2/6, 4/6} 1/15 from that, both rebuilt; then half again:
    # {2/7, 5/7} is 1/21 < 0.05 from {2/6, 4/6}, kept
    for arrival in (whole, half):
        built = window.current
        window.observe(arrival)
        assert window.current is not built
    built = window.current
    window.observe(half)
    assert window.current is built and window.distance() == pytest.approx(1 / 21)

def test_bind_rechecks_a_node_that_changed_since_the_filter():
    from quasched.model import PlacementError

    cluster = Cluster(nodes((4000, 4096, 1, "T4"), (1000, 4096, 1, "T4")))
    scheduler = Scheduler(cluster, alone(FirstFit()), np.array([0, 1]), NumpyStream(0))
    p = pod(uid=1, cpu=3000)
    decision = scheduler.decide(p)
    assert decision.node == 0
    cluster.place(pod(uid=2, cpu=2000), 0)  # the node changed after the Filter passed it
    with pytest.raises(PlacementError, match="cpu"):
        cluster.place(p, decision.node, decision.devices, filtered_at=decision.version)


@pytest.mark.parametrize("name", ["guard", "power"])
def test_typical_pods_learned_online_rebuild_the_fixed_terms(name):
    """In a service the typical pods come from a window of arrivals: no preference before the first one, then the
    same scores as the policy built on the window's current pods."""
    from quasched.metrics.typical import TypicalWindow

    cluster = cluster_with_free([[1000, 500], [1000, 1000], [300, 0]])
    window = TypicalWindow(window=4, every=2)
    online = make_policy(name, window)  # type: ignore[arg-type]
    online.attach(cluster, NumpyStream(0))
    p = pod(k=1, m=1000)
    for plugin, _ in online.plugins[1:4]:
        assert plugin.normalize(plugin.score(cluster, p, np.array([0, 1, 2]), CycleState())).tolist() == [50.0] * 3
    window.observe(pod(uid=1, cpu=2000, k=1, m=500))
    fixed = make_policy(name, window.current)
    fixed.attach(cluster, NumpyStream(0))
    np.testing.assert_allclose(online.score(cluster, p, np.array([0, 1, 2]), CycleState()),
                               fixed.score(cluster, p, np.array([0, 1, 2]), CycleState()))


class CountingStream(NumpyStream):
    """A stream that counts its cycle hook's calls."""

    def __init__(self) -> None:
        super().__init__(0)
        self.cycles = 0

    def on_schedule_cycle(self) -> None:
        self.cycles += 1


def test_a_cycle_among_candidates_picks_among_them_and_leaves_the_host_board_whole():
    """Three equal nodes, ranks 2, 0, 1: among candidates 0 and 2 the host is 2 (rank 1); then among every node the
    board still knows node 1 (rank 0); only the loop's cycles run the stream's hook."""
    class Boarded(GpuPacking):
        def epoch(self) -> object | None:
            return "steady"

    cluster = cluster_with_free([[1000]] * 3)
    rng = CountingStream()
    scheduler = Scheduler(cluster, alone(Boarded()), rank=np.array([2, 0, 1]), rng=rng)
    decision = scheduler.decide(pod(k=1, m=500), np.array([0, 2]), counted=False)
    assert (decision.node, decision.devices, decision.n_feasible) == (2, (0,), 2)
    assert rng.cycles == 0
    assert scheduler.decide(pod(k=1, m=500)).node == 1
    assert rng.cycles == 1
    assert not scheduler.decide(pod(k=1, m=500), np.array([], dtype=np.int64)).placed
