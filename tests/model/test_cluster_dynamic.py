"""A changing cluster: nodes added and removed, cordons, GPU device health, new apps and GPU models.

Hand-computed unit tests first, then a hypothesis state machine that mixes
placements with every kind of cluster change and checks after each step that
the arrays agree with the placements, that the fit rule agrees with a naive
per-node oracle written here from the raw arrays, and that nothing new lands
on a cordoned node or an unhealthy device; last, a property of the pending
queue's guarded retry against a naive front-to-back retry.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from builders import assert_consistent, nodes, pod
from hypothesis import HealthCheck, event, given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from quasched.metrics.typical import TypicalPods
from quasched.model import Cluster, PlacementError, Workload
from quasched.model.fit import APP_DENSITY, GPU_MODEL, UNSCHEDULABLE, fit_mask
from quasched.model.random import NumpyStream
from quasched.policies import Scheduler, make_policy, policy_names
from quasched.policies.devices import best_fit
from quasched.policies.queue import PendingQueue

BIG = {"cpu": 64_000, "memory": 1 << 18}


def same(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> bool:
    """Equal snapshots. An app seen for the first time gets a column of ``app_count`` for good
    (interning, not state), so a narrower 2-D array is compared padded with zero columns."""
    def pad(x: np.ndarray, width: int) -> np.ndarray:
        return np.pad(x, ((0, 0), (0, width - x.shape[1]))) if x.ndim == 2 else x

    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.ndim == 2 and x.shape[0] == y.shape[0] and x.shape[1] != y.shape[1]:
            width = max(x.shape[1], y.shape[1])
            x, y = pad(x, width), pad(y, width)
        if not np.array_equal(x, y):
            return False
    return True


def place_anywhere(cluster: Cluster, p) -> int:
    """Bind ``p`` on the first node that fits, devices by best fit; returns the node."""
    node = int(np.flatnonzero(fit_mask(cluster, p))[0])
    cluster.place(p, node, best_fit(cluster.gpu_free[node], p))
    return node


# ------------------------------------------------------------------ unit tests
def test_add_node_reuses_removed_slot_and_arrays_stay_at_max_concurrent_size():
    cluster = Cluster(nodes((8000, 4096, 2, "T4"), (8000, 4096, 2, "T4"), (8000, 4096, 0, "")))
    layout = cluster.layout
    cluster.remove_node("n1")
    assert cluster.n_nodes == 3 and not cluster.present[1] and not cluster.schedulable[1]
    assert cluster.capacity[1].tolist() == [0] * 5 and cluster.gpu_free[1].tolist() == [0, 0]
    with pytest.raises(PlacementError):
        cluster.node("n1")

    slot = cluster.add_node("m", {"cpu": 2000, "memory": 1024}, num_gpus=1, gpu_model="T4")
    assert slot == 1 and cluster.n_nodes == 3 and cluster.layout == layout  # reused, nothing resized
    assert cluster.node("m") == 1 and cluster.names[1] == "m"
    assert cluster.capacity[1, :2].tolist() == [2000, 1024] and cluster.free[1, :2].tolist() == [2000, 1024]
    assert cluster.gpu_healthy[1].tolist() == [True, False] and cluster.gpu_free[1].tolist() == [1000, 0]

    # three present: the next node needs a fourth slot, then removals make room again
    assert cluster.add_node("x", BIG) == 3 and cluster.n_nodes == 4
    cluster.remove_node("n0")
    cluster.remove_node("n2")
    assert cluster.add_node("y", BIG) == 0
    assert cluster.add_node("z", BIG) == 2
    assert cluster.n_nodes == 4 and cluster.present.all()
    assert all(len(getattr(cluster, a)) == 4 for a in Cluster._NODE_ARRAYS)
    with pytest.raises(PlacementError, match="unique"):
        cluster.add_node("x", BIG)
    assert_consistent(cluster)


def test_remove_node_refuses_a_node_with_pods():
    cluster = Cluster(nodes((8000, 4096, 1, "T4"), (8000, 4096, 1, "T4")))
    cluster.place(pod(k=1, m=500, uid=7), 1, (0,))
    with pytest.raises(PlacementError, match="still runs 1 pods"):
        cluster.remove_node("n1")
    assert cluster.present[1] and cluster.node("n1") == 1
    assert cluster.free[1, 0] == 7000 and cluster.gpu_alloc[1, 0] == 500
    cluster.remove(7)
    cluster.remove_node(1)
    assert not cluster.present[1]
    assert_consistent(cluster)


def test_cordon_excludes_the_node_from_fit_but_keeps_its_pods():
    cluster = Cluster(nodes((8000, 4096, 1, "T4"), (8000, 4096, 1, "T4")))
    cluster.place(pod(cpu=3000, uid=1), 0)
    before = cluster.snapshot()
    cluster.cordon("n0")
    assert fit_mask(cluster, pod(uid=2)).tolist() == [False, True]
    assert 1 in cluster.placements and cluster.free[0, 0] == 5000  # the pod stays, its resources held
    with pytest.raises(PlacementError, match=UNSCHEDULABLE):
        cluster.place(pod(uid=2), 0)
    cluster.remove(1)  # removing from a cordoned node works
    assert cluster.free[0, 0] == 8000 and fit_mask(cluster, pod(uid=2)).tolist() == [False, True]
    cluster.place(pod(cpu=3000, uid=1), 1)
    cluster.remove(1)
    cluster.uncordon("n0")
    cluster.place(pod(cpu=3000, uid=1), 0)
    assert same(before, cluster.snapshot())
    assert_consistent(cluster)


def test_unhealthy_device_has_no_free_milli_is_avoided_and_remove_restores_exactly():
    cluster = Cluster(nodes((8000, 4096, 2, "T4"), (8000, 4096, 2, "T4")))
    start = cluster.snapshot()
    cluster.place(pod(k=1, m=300, uid=1), 0, (0,))
    cluster.set_device_health("n0", 0, False)
    assert cluster.gpu_free[0].tolist() == [0, 1000] and cluster.gpu_free_max[0] == 1000
    assert cluster.gpu_alloc[0].tolist() == [300, 0]  # the running pod keeps its share
    assert 1 in cluster.placements

    assert fit_mask(cluster, pod(k=1, m=800, uid=2)).tolist() == [True, True]  # device 1 is left
    assert best_fit(cluster.gpu_free[0], pod(k=1, m=800, uid=2)) == (1,)
    assert fit_mask(cluster, pod(k=2, m=1000, uid=3)).tolist() == [False, True]
    with pytest.raises(PlacementError, match="device 0 lacks"):
        cluster.place(pod(k=1, m=100, uid=2), 0, (0,))
    cluster.set_device_health("n0", 1, False)
    assert fit_mask(cluster, pod(k=1, m=1, uid=2)).tolist() == [False, True]
    assert cluster.gpu_free_max[0] == 0

    cluster.remove(1)
    assert cluster.gpu_alloc[0].tolist() == [0, 0] and cluster.gpu_free[0].tolist() == [0, 0]
    cluster.set_device_health("n0", 0, True)
    cluster.set_device_health("n0", 1, True)
    assert same(start, cluster.snapshot())
    with pytest.raises(PlacementError, match="no GPU device 2"):
        cluster.set_device_health("n0", 2, False)
    assert_consistent(cluster)



def test_measured_swings_follow_the_layout_and_leave_placement_alone():
    cluster = Cluster(nodes((8000, 4096, 2, "T4"), (8000, 4096, 2, "T4")))
    start, version = cluster.snapshot(), cluster.version.copy()
    assert np.isnan(cluster.measured_swing_w).all() and cluster.measured_swing_w.shape == (2, 2)
    cluster.measure_swing("n0", 1, 55.5)
    cluster.measure_swing("n0", 1, 50.0)  # replaced, still one device known
    cluster.measure_swing("n1", 0, 0.0)
    assert cluster.measured_devices == 2 and same(start, cluster.snapshot()) and (cluster.version == version).all()
    for device, watts, why in ((2, 1.0, "no GPU device 2"), (0, -1.0, ">= 0"), (0, float("nan"), ">= 0")):
        with pytest.raises(PlacementError, match=why):
            cluster.measure_swing("n0", device, watts)
    cluster.add_node("a", BIG, num_gpus=4, gpu_model="A100")  # the device axis grows: new devices unknown
    assert cluster.measured_swing_w.shape == (3, 4) and cluster.measured_swing_w[0, 1] == 50.0
    assert np.isnan(cluster.measured_swing_w[[0, 0, 2, 2], [2, 3, 0, 3]]).all()
    cluster.remove_node("n0")  # forgotten with its node; a node recreated in the slot starts unknown
    assert cluster.measured_devices == 1
    assert cluster.add_node("n0", BIG, num_gpus=2, gpu_model="T4") == 0 and np.isnan(cluster.measured_swing_w[0]).all()
    cluster.measure_swing("n1", 0, None)
    cluster.measure_swing("n1", 0, None)  # forgetting twice counts once
    assert cluster.measured_devices == 0 and np.isnan(cluster.measured_swing_w).all()
    assert_consistent(cluster)

def test_a_new_gpu_model_joins_with_add_node():
    cluster = Cluster(nodes((8000, 4096, 2, "T4"), (8000, 4096, 0, "")))
    only_a100 = pod(k=1, m=500, spec="A100", uid=1)
    assert not fit_mask(cluster, only_a100).any()
    assert not cluster.spec_mask("A100").any()  # cached before the model exists
    slot = cluster.add_node("a", BIG, num_gpus=4, gpu_model="A100")
    assert slot == 2 and cluster.models == ["", "T4", "A100"] and cluster.max_devices == 4
    assert cluster.spec_mask("A100").tolist() == [False, False, True]
    assert cluster.spec_mask("T4|A100").tolist() == [True, False, True]
    assert fit_mask(cluster, only_a100).tolist() == [False, False, True]
    assert fit_mask(cluster, pod(k=4, m=1000, uid=2)).tolist() == [False, False, True]
    assert fit_mask(cluster, pod(k=2, m=1000, spec="T4", uid=3)).tolist() == [True, False, False]
    with pytest.raises(PlacementError, match=GPU_MODEL):
        cluster.place(only_a100, 0, (0,))
    cluster.place(only_a100, 2, (3,))
    assert cluster.gpu_alloc[2].tolist() == [0, 0, 0, 500] and cluster.gpu_alloc[0].tolist() == [0, 0, 0, 0]
    # padding of the older nodes stays absent after the device axis grew
    assert cluster.gpu_healthy[0].tolist() == [True, True, False, False]
    cluster.remove(1)
    cluster.remove_node("a")
    assert not fit_mask(cluster, only_a100).any()
    assert_consistent(cluster)


def test_apps_appearing_at_run_time_get_density_limits():
    cluster = Cluster(nodes((64000, 1 << 16, 0, ""), (64000, 1 << 16, 0, "")))
    assert cluster.app_count.shape == (2, 1)
    apps = [f"app{i}" for i in range(5)]
    uid = 0
    for app in apps:  # two per node allowed: two land on n0, two on n1, the fifth fits nowhere
        for expected in ([True, True], [True, True], [False, True], [False, True], [False, False]):
            p = pod(app=app, max_per_node=2, uid=uid)
            assert fit_mask(cluster, p).tolist() == expected
            if any(expected):
                place_anywhere(cluster, p)
            else:
                with pytest.raises(PlacementError, match=APP_DENSITY):
                    cluster.place(p, 0)
            uid += 1
    assert cluster.app_count.shape[1] >= len(apps)
    assert cluster.app_count[:, [cluster.app_column(a) for a in apps]].tolist() == [[2] * 5, [2] * 5]
    assert fit_mask(cluster, pod(app="app0", uid=99)).all()  # same app, no limit: not counted against
    assert fit_mask(cluster, pod(app="fresh", max_per_node=1, uid=99)).all()
    cluster.remove(0)
    assert fit_mask(cluster, pod(app="app0", max_per_node=2, uid=99)).tolist() == [True, False]
    assert_consistent(cluster)


def test_take_grown_reports_growth_not_placements():
    cluster = Cluster(nodes(*[(8000, 4096, 2, "T4")] * 4))
    assert cluster.take_grown().tolist() == []  # construction is not growth
    cluster.place(pod(k=1, m=500, uid=1), 1, (0,))
    cluster.place(pod(uid=2), 2)
    cluster.cordon(0)
    cluster.set_device_health(3, 1, False)
    assert cluster.take_grown().tolist() == []  # placements, cordons and failures only shrink
    cluster.remove(1)
    assert cluster.take_grown().tolist() == [1]
    assert cluster.take_grown().tolist() == []  # forgotten once taken
    cluster.uncordon(0)
    cluster.set_device_health(3, 1, True)
    cluster.set_device_health(2, 0, False)
    assert cluster.take_grown().tolist() == [0, 3]
    slot = cluster.add_node("new", BIG)
    assert cluster.take_grown().tolist() == [slot]
    cluster.remove(2)
    cluster.remove_node(2)  # grown, then gone: not reported
    assert cluster.take_grown().tolist() == []


def test_pod_uids_are_independent_of_workload_rows():
    w = Workload(name=np.array(["job"], dtype=object), cpu_milli=np.array([1000]), memory_mib=np.array([512]),
                 num_gpu=np.array([1]), gpu_milli=np.array([400]), gpu_model=np.array([""], dtype=object))
    cluster = Cluster(nodes((8000, 4096, 1, "T4")))
    a, b = w.pod(0, uid=10), w.pod(0, uid=11)
    cluster.place(a, 0, (0,))
    cluster.place(b, 0, (0,))
    assert sorted(cluster.placements) == [10, 11] and cluster.gpu_alloc[0, 0] == 800
    with pytest.raises(PlacementError, match="already placed"):
        cluster.place(w.pod(0, uid=10), 0, (0,))
    cluster.remove(10)
    assert list(cluster.placements) == [11] and cluster.gpu_alloc[0, 0] == 400
    assert cluster.free[0, 0] == 7000
    assert_consistent(cluster)


# ------------------------------------------------------- the naive fit oracle
def naive_fits(cluster: Cluster, p) -> np.ndarray:
    """The fit rule written out node by node from the raw arrays and the placement list."""
    out = np.zeros(cluster.n_nodes, dtype=bool)
    for n in range(cluster.n_nodes):
        if not cluster.present[n] or cluster.cordoned[n]:
            continue
        if any(cluster.free[n, r] < p.request[r] for r in range(len(p.request))):
            continue
        if p.app and p.max_per_node != -1:
            same_app = sum(1 for q in cluster.placements.values() if q.node == n and q.pod.app == p.app)
            if same_app >= p.max_per_node:
                continue
        if p.gpu_milli > 0:
            allowed = [t for t in p.gpu_model.split("|") if t]
            model = cluster.models[cluster.model_id[n]]
            if cluster.num_gpus[n] == 0 or (allowed and model not in allowed):
                continue
            usable = sum(1 for d in range(int(cluster.num_gpus[n]))
                         if cluster.gpu_healthy[n, d] and 1000 - cluster.gpu_alloc[n, d] >= p.gpu_milli)
            if usable < p.num_gpu:
                continue
        out[n] = True
    return out


PROBES = [
    pod(cpu=500, mem=256, uid=-1),
    pod(cpu=30_000, mem=256, uid=-2),
    pod(cpu=500, mem=256, k=1, m=300, uid=-3),
    pod(cpu=500, mem=256, k=1, m=900, spec="V100|A100", uid=-4),
    pod(cpu=500, mem=256, k=1, m=1000, uid=-5),
    pod(cpu=500, mem=256, k=2, m=1000, uid=-6),
    pod(cpu=500, mem=256, k=4, m=1000, spec="A100", uid=-7),
    pod(cpu=500, mem=256, k=1, m=500, spec="H100", uid=-8),
    pod(cpu=500, mem=256, app="web", max_per_node=1, uid=-9),
    pod(cpu=500, mem=256, k=1, m=200, app="ml", max_per_node=2, rdma=40, uid=-10),
]

NODE_ROWS = st.tuples(
    st.sampled_from([4000, 8000, 16000, 32000]),
    st.sampled_from([2048, 16384]),
    st.sampled_from([0, 1, 2, 4]),
    st.sampled_from(["T4", "V100"]),
).map(lambda t: (t[0], t[1], t[2], t[3] if t[2] else ""))

POD_ROWS = st.tuples(
    st.one_of(st.just((0, 0)), st.tuples(st.just(1), st.sampled_from([200, 500, 700])),
              st.tuples(st.sampled_from([1, 2, 4]), st.just(1000))),
    st.sampled_from([500, 2000, 6000]),
    st.sampled_from([256, 2048]),
    st.sampled_from(["", "", "T4", "V100|A100", "A100"]),
    st.sampled_from([("", -1), ("", -1), ("web", 1), ("ml", 2), ("batch", -1)]),
    st.sampled_from([0, 0, 40]),
)

#: Slots and GPU models the scheduler-driven machine may use: the policies size their
#: caches when attached, so the cluster is built this large and then shrunk.
SPARE_SLOTS = 6
KNOWN_MODELS = ("", "T4", "V100", "A100")  # "" = the model of CPU-only nodes


def presized(rows) -> Cluster:
    """A cluster of ``rows`` with room for SPARE_SLOTS more nodes and every KNOWN_MODEL registered."""
    models = [KNOWN_MODELS[i % len(KNOWN_MODELS)] for i in range(SPARE_SLOTS)]
    spares = [(1000, 1024, 8 if model else 0, model) for model in models]
    cluster = Cluster(nodes(*rows, *spares))
    for i in range(len(rows), len(rows) + SPARE_SLOTS):
        cluster.remove_node(i)
    cluster.take_grown()
    return cluster


def make_pod(row, uid: int):
    (k, m), cpu, mem, spec, (app, limit), rdma = row
    return pod(cpu=cpu, mem=mem, k=k, m=m, spec=spec if k else "", app=app, max_per_node=limit, rdma=rdma, uid=uid)


# ---------------------------------------------------------- the state machine
class DynamicCluster(RuleBasedStateMachine):
    """Placements (by a real scheduler or directly) interleaved with every kind of cluster change."""

    @initialize(rows=st.lists(NODE_ROWS, min_size=1, max_size=4), policy=st.sampled_from((None, *policy_names())),
                seed=st.integers(0, 2**16))
    def init(self, rows, policy, seed):
        """``policy`` None: direct placement; else a real scheduler. Either way the cluster starts as
        just ``rows`` and is free to grow (new slots, more devices, new GPU models)."""
        self.scheduler = None
        self.cluster = Cluster(nodes(*rows))
        if policy is not None:
            typical = TypicalPods.from_workload(workload_of(PROBES))
            rank = np.random.default_rng(seed).permutation(self.cluster.n_nodes)
            self.scheduler = Scheduler(self.cluster, make_policy(policy, typical), rank, NumpyStream(seed))
        self.uid = 0
        self.step = 0
        self.placed_at: dict[int, int] = {}
        self.cordoned_at: dict[int, int] = {}
        self.failed_at: dict[tuple[int, int], int] = {}
        self.last_place: tuple[int, tuple] | None = None
        self.n_added = 0

    def _changed(self) -> None:
        self.step += 1
        self.last_place = None

    @rule(row=POD_ROWS, pick=st.integers(0, 10**6))
    def place(self, row, pick):
        cluster = self.cluster
        p = make_pod(row, self.uid)
        self.uid += 1
        before = cluster.snapshot()
        fits = np.flatnonzero(naive_fits(cluster, p))
        if self.scheduler is not None:
            decision = self.scheduler.schedule(p)
            assert decision.placed == bool(len(fits))
            event(f"scheduled by {self.scheduler.policy.name}")
            node, devices = decision.node, decision.devices
        elif len(fits):
            node = int(fits[pick % len(fits)])
            devices = best_fit(cluster.gpu_free[node], p)
            cluster.place(p, node, devices)
        else:
            with pytest.raises(PlacementError):
                cluster.place(p, int(np.flatnonzero(cluster.present)[0]) if cluster.present.any() else 0)
            node = -1
        if node < 0:
            assert same(before, cluster.snapshot())
            return
        assert node in fits and not cluster.cordoned[node]
        assert all(cluster.gpu_healthy[node, d] for d in devices)
        self._changed()
        self.placed_at[p.uid] = self.step
        self.last_place = (p.uid, before)

    @precondition(lambda self: self.cluster.placements)
    @rule(pick=st.integers(0, 10**6), last=st.booleans())
    def remove(self, pick, last):
        cluster = self.cluster
        uids = sorted(cluster.placements)
        uid = self.last_place[0] if last and self.last_place else uids[pick % len(uids)]
        restore = self.last_place[1] if self.last_place and self.last_place[0] == uid else None
        node = cluster.placements[uid].node
        cluster.remove(uid)
        if restore is not None:
            assert same(restore, cluster.snapshot())
            event("remove restored the snapshot before its place")
        assert node in cluster.take_grown().tolist()
        self._changed()

    @rule(row=NODE_ROWS, model=st.sampled_from(("", "A100", "H100")), more_gpus=st.booleans())
    def add_node(self, row, model, more_gpus):
        cluster = self.cluster
        cpu, mem, gpus, old_model = row
        gpus = 8 if more_gpus and (self.scheduler is None or cluster.max_devices >= 8) else gpus
        model = (model or old_model) if gpus else ""
        if self.scheduler is not None:  # keep within what the scheduler was sized for
            if cluster.present.all() or model not in KNOWN_MODELS:
                return
        n_before = cluster.n_nodes
        slot = cluster.add_node(f"added-{self.n_added}", {"cpu": cpu, "memory": mem}, num_gpus=gpus, gpu_model=model)
        self.n_added += 1
        assert cluster.n_nodes == max(n_before, slot + 1)
        assert cluster.n_nodes == n_before or cluster.present.all()  # grows only when no slot was free
        assert cluster.free[slot].tolist() == cluster.capacity[slot].tolist() and cluster.schedulable[slot]
        assert cluster.gpu_free[slot].tolist() == [1000] * gpus + [0] * (cluster.max_devices - gpus)
        assert slot in cluster.take_grown().tolist()
        self.cordoned_at.pop(slot, None)
        self._changed()

    @rule(pick=st.integers(0, 10**6))
    def remove_node(self, pick):
        cluster = self.cluster
        present = np.flatnonzero(cluster.present)
        if len(present) <= 1:
            return
        node = int(present[pick % len(present)])
        if any(p.node == node for p in cluster.placements.values()):
            before = cluster.snapshot()
            with pytest.raises(PlacementError):
                cluster.remove_node(node)
            assert same(before, cluster.snapshot())
            return
        cluster.remove_node(node)
        self.cordoned_at.pop(node, None)  # the slot's next node starts uncordoned, all devices healthy
        self.failed_at = {key: at for key, at in self.failed_at.items() if key[0] != node}
        assert not cluster.present[node] and not cluster.schedulable[node]
        assert not fit_mask(cluster, PROBES[0])[node]
        self._changed()

    @rule(pick=st.integers(0, 10**6), on=st.booleans())
    def cordon(self, pick, on):
        cluster = self.cluster
        present = np.flatnonzero(cluster.present)
        node = int(present[pick % len(present)])
        if on:
            cluster.cordon(node)
            self.cordoned_at[node] = self.step
        else:
            cluster.uncordon(node)
            self.cordoned_at.pop(node, None)
        self._changed()

    @rule(pick=st.integers(0, 10**6), healthy=st.booleans())
    def device_health(self, pick, healthy):
        cluster = self.cluster
        devices = [(int(n), d) for n in np.flatnonzero(cluster.present) for d in range(cluster.num_gpus[n])]
        if not devices:
            return
        node, device = devices[pick % len(devices)]
        cluster.set_device_health(node, device, healthy)
        assert cluster.gpu_free[node, device] == (1000 - cluster.gpu_alloc[node, device] if healthy else 0)
        if healthy:
            self.failed_at.pop((node, device), None)
        else:
            self.failed_at.setdefault((node, device), self.step)
        self._changed()

    @invariant()
    def consistent(self):
        cluster = self.cluster
        assert_consistent(cluster)
        assert (cluster.app_count[~cluster.present] == 0).all() and (cluster.gpu_alloc[~cluster.present] == 0).all()
        for uid, placement in cluster.placements.items():
            if placement.node in self.cordoned_at:
                assert self.placed_at[uid] <= self.cordoned_at[placement.node]
            for d in placement.devices:
                if (placement.node, d) in self.failed_at:
                    assert self.placed_at[uid] <= self.failed_at[placement.node, d]

    @invariant()
    def fit_rule_matches_the_oracle(self):
        for p in PROBES:
            assert np.array_equal(fit_mask(self.cluster, p), naive_fits(self.cluster, p)), p


def workload_of(pods) -> Workload:
    return Workload(
        name=np.array([p.name for p in pods], dtype=object),
        cpu_milli=np.array([p.cpu_milli for p in pods], dtype=np.int64),
        memory_mib=np.array([p.memory_mib for p in pods], dtype=np.int64),
        num_gpu=np.array([p.num_gpu for p in pods], dtype=np.int64),
        gpu_milli=np.array([p.gpu_milli for p in pods], dtype=np.int64),
        gpu_model=np.array([p.gpu_model for p in pods], dtype=object),
    )


DynamicCluster.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                            suppress_health_check=[HealthCheck.too_slow])
TestDynamicCluster = DynamicCluster.TestCase
TestDynamicCluster.pytestmark = pytest.mark.slow  # a long stateful property run


# ------------------------------------------------------ the pending queue
#: Big pods on few small nodes, so pods queue up and the cluster changes free some of them.
QUEUED_POD_ROWS = POD_ROWS.map(lambda row: (row[0], 4 * row[1], *row[2:]))
OPS = st.lists(st.tuples(st.sampled_from(["arrive", "arrive", "remove", "remove", "remove", "add_node", "recover",
                                          "fail", "cordon", "uncordon", "retry", "retry"]),
                         st.integers(0, 10**6), QUEUED_POD_ROWS, NODE_ROWS), min_size=1, max_size=40)


def naive_retry(scheduler: Scheduler, queue: PendingQueue) -> list[tuple[int, int, tuple[int, ...]]]:
    """Every queued pod, front to back, one scheduling cycle each."""
    placed = []
    for p in queue.pods():
        decision = scheduler.schedule(p)
        if decision.placed:
            queue.discard(p.uid)
            placed.append((p.uid, decision.node, decision.devices))
    return placed


@pytest.mark.slow  # a long property run
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(NODE_ROWS, min_size=1, max_size=3), st.lists(QUEUED_POD_ROWS, min_size=1, max_size=25), OPS,
       st.sampled_from(policy_names()), st.integers(0, 2**16))
def test_guarded_retry_places_like_a_naive_retry_while_the_cluster_changes(rows, arrivals, ops, policy, seed):
    cluster = presized(rows)
    typical = TypicalPods.from_workload(workload_of(PROBES))
    scheduler = Scheduler(cluster, make_policy(policy, typical), np.random.default_rng(seed).permutation(
        cluster.n_nodes), NumpyStream(seed))
    queue = PendingQueue(cluster)
    uid = 0

    def arrive(row) -> None:
        nonlocal uid
        p = make_pod(row, uid)
        uid += 1
        if not scheduler.schedule(p).placed:
            queue.push(p)  # the queue's premise: a queued pod failed on every node

    def retry() -> None:
        twin_cluster, twin_scheduler, twin_queue = copy.deepcopy((cluster, scheduler, queue))
        waiting = len(queue)
        got = [(p.uid, d.node, d.devices) for p, d in queue.retry(scheduler.schedule)]
        event("retry placed " + ("nothing" if not got else "all" if len(got) == waiting else "some"))
        assert got == naive_retry(twin_scheduler, twin_queue)
        assert same(cluster.snapshot(), twin_cluster.snapshot())
        assert [p.uid for p in queue.pods()] == [p.uid for p in twin_queue.pods()]

    for row in arrivals:
        arrive(row)
    added = 0
    for kind, pick, pod_row, node_row in ops:
        present = np.flatnonzero(cluster.present)
        devices = [(int(n), d) for n in present for d in range(cluster.num_gpus[n])]
        if kind == "arrive":
            arrive(pod_row)
        elif kind == "remove" and cluster.placements:
            cluster.remove(sorted(cluster.placements)[pick % len(cluster.placements)])
        elif kind == "add_node" and not cluster.present.all():
            cpu, mem, gpus, model = node_row
            cluster.add_node(f"added-{added}", {"cpu": cpu, "memory": mem}, num_gpus=gpus, gpu_model=model)
            added += 1
        elif kind in ("recover", "fail") and devices:
            cluster.set_device_health(*devices[pick % len(devices)], kind == "recover")
        elif kind in ("cordon", "uncordon"):
            node = int(present[pick % len(present)])
            cluster.cordon(node) if kind == "cordon" else cluster.uncordon(node)
        elif kind == "retry":
            retry()
        assert_consistent(cluster)
    retry()  # every queued pod that fits now starts
    assert not any(fit_mask(cluster, p).any() for p in queue.pods())
