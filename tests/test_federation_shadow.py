"""Node-level EASY backfilling (``carbon-aware-shadow``, ``ours-displace-shadow``): the head's reservation and the pass
test (module docstring of :mod:`quasched.federation.shadow`). Run invariants: ``test_federation`` (every registered
dispatcher) and ``test_federation_planner`` (capacity)."""

from __future__ import annotations

import numpy as np
import pytest
from builders import nodes, pod
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from quasched.federation.shadow import holds, may_pass, reservation
from quasched.model.cluster import Cluster
from quasched.model.fit import fit_mask

HEAD = 999


def hand_cluster(twin: bool) -> tuple[Cluster, np.ndarray]:
    """n0: 4 A100, pod 100 on devices 0-1 until 10; n1: 4 V100, pod 101 on devices 0-2 until 20; with ``twin`` n2 = n0
    (pod 102 until 10). Returns the cluster and the ends by uid."""
    specs = [(64_000, 1 << 20, 4, "A100"), (64_000, 1 << 20, 4, "V100")] + [(64_000, 1 << 20, 4, "A100")] * twin
    cluster, end = Cluster(nodes(*specs)), np.full(HEAD + 1, np.inf)
    for uid, node, devices, until in [(100, 0, (0, 1), 10.0), (101, 1, (0, 1, 2), 20.0), (102, 2, (0, 1), 10.0)][:2 + twin]:
        cluster.place(pod(k=len(devices), m=1000, uid=uid), node, devices)
        end[uid] = until
    return cluster, end


def test_reservation_is_the_first_departure_that_lets_the_head_fit():
    """The head (3 GPUs, 60 CPU cores) fits no node now (2 and 1 GPUs free); at 10 pod 100 leaves n0 (4 free)."""
    cluster, end = hand_cluster(twin=False)
    booked = reservation(cluster, pod(cpu=60_000, k=3, m=1000, uid=HEAD), end, 0.0)
    assert booked.time == 10.0 and booked.nodes == [0]
    assert booked.gpu_free[0].tolist() == [1000] * 4 and booked.free[0][0] == 64_000
    assert reservation(cluster, pod(k=4, m=1000, spec="V100", uid=HEAD), end, 0.0)[:2] == (20.0, [1])
    assert reservation(cluster, pod(k=1, m=1000, uid=HEAD), end, 3.0)[:2] == (3.0, [0, 1])  # fits now


@pytest.mark.parametrize("twin", [False, True])
@pytest.mark.parametrize("job, until, allowed, allowed_twin", [
    (pod(k=1, m=1000), 5.0, True, True),  # ends by the shadow time 10
    (pod(k=2, m=1000), 10.0, True, True),  # ... just
    (pod(k=1, m=1000), 50.0, True, True),  # runs past 10 on n0: 4 - 1 = 3 GPUs left for the head (the extra)
    (pod(k=1, m=500), 50.0, True, True),  # a half GPU spoils one device at worst: 3 left
    (pod(k=2, m=1000), 50.0, False, True),  # 2 left: refused, unless the twin n2 keeps a shadow node for the head
    (pod(k=1, m=1000, spec="V100"), 50.0, True, True),  # cannot land on n0: stays off the shadow node
    (pod(cpu=8_000), 50.0, False, True),  # CPU: 64 - 8 < 60 cores at 10
    (pod(cpu=4_000), 50.0, True, True)])  # 64 - 4 = 60: fits exactly
def test_pass_allowed_exactly_when_it_ends_by_the_shadow_time_or_spares_the_heads_room(twin, job, until, allowed,
                                                                                         allowed_twin):
    cluster, end = hand_cluster(twin)
    head = pod(cpu=60_000, k=3, m=1000, uid=HEAD)
    booked = reservation(cluster, head, end, 0.0)
    assert booked.time == 10.0 and booked.nodes == ([0, 2] if twin else [0])
    assert may_pass(cluster, head, booked, job, until) == (allowed_twin if twin else allowed)


def test_holds_is_the_fit_rule_on_live_rows():
    cluster, _ = hand_cluster(twin=True)
    for job in (pod(k=1, m=1000), pod(k=2, m=600), pod(k=3, m=1000), pod(k=1, m=1000, spec="V100"), pod(cpu=70_000)):
        live = [holds(cluster, job, n, cluster.free[n], cluster.gpu_free[n], cluster.app_count[n]) for n in range(3)]
        assert live == fit_mask(cluster, job).tolist()


shapes = st.tuples(st.integers(0, 40_000), st.integers(0, 3), st.sampled_from([0, 300, 500, 1000]),
                   st.sampled_from(["", "A100", "V100"]), st.sampled_from(["", "a", "b"]), st.integers(1, 2))


def shaped(uid: int, cpu: int, k: int, milli: int, spec: str, app: str, limit: int):
    """A pod of a drawn shape (a GPU pod when both ``k`` and ``milli`` are positive; sharing pods take one device)."""
    k, milli = (min(k, 1) if milli < 1000 else k, milli) if k and milli else (0, 0)
    return pod(cpu=cpu, k=k, m=milli, spec=spec if k else "", uid=uid, app=app, max_per_node=limit if app else -1)


@settings(max_examples=100, deadline=None)
@given(gpus=st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["A100", "V100"]), st.booleans()), min_size=1,
                     max_size=4),
       running=st.lists(shapes, max_size=10), probes=st.lists(shapes, min_size=1, max_size=6), seed=st.integers(0, 99))
def test_holds_agrees_with_the_clusters_fit_check(gpus, running, probes, seed):
    """``holds`` over a node's live rows is the cluster's own fit check (resources, cordons, GPU model, devices, app
    density), on random clusters and placements."""
    rng = np.random.default_rng(seed)
    cluster = Cluster(nodes(*[(64_000, 1 << 20, g, model) for g, model, _ in gpus]))
    for n, (_, _, cordoned) in enumerate(gpus):
        if cordoned:
            cluster.cordon(n)
    for uid, shape in enumerate(running):
        place_somewhere(cluster, shaped(uid, *shape), rng)
    for i, shape in enumerate(probes):
        job = shaped(100 + i, *shape)
        fits = fit_mask(cluster, job).tolist()
        assert [holds(cluster, job, n, cluster.free[n], cluster.gpu_free[n], cluster.app_count[n])
                for n in range(cluster.n_nodes)] == fits


def place_somewhere(cluster: Cluster, job, rng: np.random.Generator) -> bool:
    """Places ``job`` on a random node that holds it, on random devices that fit (an adversarial scheduler)."""
    fit = np.flatnonzero(fit_mask(cluster, job))
    if not len(fit):
        return False
    node = int(rng.choice(fit))
    devices = rng.permutation(np.flatnonzero(cluster.gpu_free[node] >= job.gpu_milli))[:job.num_gpu] if job.gpu_milli else []
    cluster.place(job, node, sorted(int(d) for d in devices))
    return True


jobs = st.tuples(st.integers(0, 3), st.booleans(), st.integers(1, 30))  # GPUs (0: CPU only), sharing, duration


@settings(max_examples=60, deadline=None)
@given(gpus=st.lists(st.integers(1, 4), min_size=1, max_size=3), running=st.lists(jobs, max_size=8),
       head_gpus=st.integers(1, 4), arrivals=st.lists(st.tuples(st.integers(0, 25), jobs), max_size=10),
       seed=st.integers(0, 2**16))
def test_head_starts_by_its_shadow_time(gpus, running, head_gpus, arrivals, seed):
    """EASY's guarantee: with known durations and only guarded passes (placed anywhere they fit), the head can start no
    later than the shadow time computed when it became head, and later reservations are never later."""
    rng = np.random.default_rng(seed)
    cluster, end = Cluster(nodes(*[(8_000, 1 << 20, g, "A100") for g in gpus])), np.full(HEAD + 1, np.inf)
    for uid, (k, share, duration) in enumerate(running):
        if place_somewhere(cluster, pod(cpu=2_000, k=min(k, 1) if share else k, m=500 if share and k else 1000 * (k > 0),
                                        uid=uid), rng):
            end[uid] = duration
    head = pod(cpu=2_000, k=head_gpus, m=1000, uid=HEAD)
    assume(head_gpus <= max(gpus) and not fit_mask(cluster, head).any())
    shadow = reservation(cluster, head, end, 0.0).time
    assert shadow < np.inf

    def depart_until(t: float) -> float | None:
        """Departures up to ``t`` in time order; the first time the head fits, if it does."""
        for uid in sorted(cluster.placements, key=lambda u: end[u]):
            if end[uid] > t:
                break
            cluster.remove(uid)
            if fit_mask(cluster, head).any() and not any(end[u] == end[uid] for u in cluster.placements):
                return float(end[uid])
        return None

    for i, (at, (k, share, duration)) in enumerate(sorted(arrivals)):
        started = depart_until(at)
        if started is not None:
            assert started <= shadow
            return
        job = pod(cpu=2_000, k=min(k, 1) if share else k, m=500 if share and k else 1000 * (k > 0), uid=100 + i)
        booked = reservation(cluster, head, end, float(at))
        assert booked.time <= shadow
        if may_pass(cluster, head, booked, job, at + duration) and place_somewhere(cluster, job, rng):
            end[job.uid] = at + duration
    started = depart_until(np.inf)
    assert started is not None and started <= shadow


def test_a_job_of_an_app_new_to_the_cluster_after_the_reservation():
    """The reservation copies the app counts of its nodes; apps first seen later (the cluster's app columns grow) count
    0 there, and a limited job (1 per node) still passes as its GPUs allow."""
    cluster, end = hand_cluster(twin=False)
    head = pod(cpu=60_000, k=3, m=1000, uid=HEAD)
    booked = reservation(cluster, head, end, 0.0)
    for app in ("x", "y", "z"):
        assert may_pass(cluster, head, booked, pod(k=1, m=1000, app=app, max_per_node=1), 50.0)
        assert not may_pass(cluster, head, booked, pod(k=2, m=1000, app=app, max_per_node=1), 50.0)
    rows = cluster.free[0].copy(), cluster.gpu_free[0].copy(), cluster.app_count[0].copy()
    for app in ("v", "w"):  # rows copied before the apps' columns exist
        job = pod(k=1, m=1000, app=app, max_per_node=1)
        assert holds(cluster, job, 0, *rows) == fit_mask(cluster, job)[0]
