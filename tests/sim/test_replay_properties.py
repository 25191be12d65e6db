"""Property tests of the time-based replay on random small clusters and workloads.

- no resource is ever over-committed, at any event (rebuilt from the event log);
- each pod is placed at most once, departs at most once, after it was placed;
- the cluster is empty after the last departure;
- the logged queue length and allocation agree with the log itself;
- the class-guarded queue retry gives exactly the events of a naive replay
  that retries every queued pod after every departure batch.
"""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from builders import nodes
from hypothesis import given, settings, strategies as st

from quasched.metrics.fragmentation import cluster_fragmentation, state_table
from quasched.metrics.typical import TypicalPods
from quasched.model import Cluster, NodeSpec, Workload
from quasched.model.random import NumpyStream
from quasched.policies import Scheduler, make_policy, policy_names
from quasched.policies.queue import FitClasses
from quasched.sim.engine import node_ranks
from quasched.sim.events import build_timeline
from quasched.sim.records import ARRIVE, DEPART, QUEUE, START, WITHDRAW
from quasched.sim.replay import replay
from quasched.sim.replay_result import ReplayConfig

NAN = float("nan")

node_st = st.tuples(
    st.sampled_from([4000, 8000, 16000]),
    st.sampled_from([4096, 16384]),
    st.sampled_from([0, 1, 2, 4]),
    st.sampled_from(["T4", "V100"]),
).map(lambda t: (t[0], t[1], t[2], t[3] if t[2] else ""))

pod_st = st.tuples(
    st.one_of(
        st.tuples(st.just(0), st.just(0)),
        st.tuples(st.just(1), st.sampled_from([250, 500, 700])),
        st.tuples(st.sampled_from([1, 2, 4]), st.just(1000)),
    ),
    st.sampled_from([1000, 2000, 4000, 6000]),              # cpu
    st.sampled_from([512, 2048, 8192]),                       # memory
    st.sampled_from(["", "", "T4", "V100|T4", "V100"]),       # gpu spec
    st.integers(-2, 12).map(lambda x: NAN if x < 0 else float(x)),  # creation (NaN ~1 in 8)
    st.integers(-2, 8).map(lambda x: NAN if x < 0 else float(x)),   # lifetime (NaN: open-ended)
    st.sampled_from([-1, -1, 0, 1]),                          # app (0, 1 limited to 1 per node)
    st.sampled_from([0, 0, 30, 60]),                          # rdma
)


def make_workload(rows) -> Workload:
    creation = np.array([r[4] for r in rows])
    lifetime = np.array([r[5] for r in rows])
    gpu = [r[0] for r in rows]
    return Workload(
        name=np.array([f"p{i}" for i in range(len(rows))], dtype=object),
        cpu_milli=np.array([r[1] for r in rows], dtype=np.int64),
        memory_mib=np.array([r[2] for r in rows], dtype=np.int64),
        num_gpu=np.array([g[0] for g in gpu], dtype=np.int64),
        gpu_milli=np.array([g[1] for g in gpu], dtype=np.int64),
        gpu_model=np.array([r[3] if r[0][0] else "" for r in rows], dtype=object),
        app=np.array([r[6] for r in rows], dtype=np.int64),
        max_per_node=np.array([1 if r[6] >= 0 else -1 for r in rows], dtype=np.int64),
        rdma=np.array([r[7] for r in rows], dtype=np.int64),
        creation_time=creation,
        deletion_time=creation + lifetime,
        app_names=("a0", "a1"),
    )


problems = st.tuples(
    st.lists(node_st, min_size=1, max_size=4),
    st.lists(pod_st, min_size=1, max_size=40),
    st.sampled_from(policy_names()),
    st.sampled_from(["trace", "duration"]),
    st.integers(0, 2**16),
)


def naive_replay(spec: NodeSpec, w: Workload, config: ReplayConfig, typical: TypicalPods):
    """Reference: same event rules, the whole queue retried pod by pod after each departure batch."""
    tl = build_timeline(w)
    rng = NumpyStream(config.seed)
    cluster = Cluster(spec)
    scheduler = Scheduler(cluster, make_policy(config.policy, typical), node_ranks(spec, rng), rng)
    heap: list[tuple[float, int]] = []
    queue: list[int] = []
    running: set[int] = set()
    log: list[tuple[float, int, int, int]] = []

    def placed(t: float, uid: int, node: int, kind: int) -> None:
        running.add(uid)
        if config.departure == "duration":
            end = t + (tl.deletion[uid] - tl.arrival[uid]) if np.isfinite(w.deletion_time[uid]) else max(t, tl.end)
            heapq.heappush(heap, (end, uid))
        log.append((t, kind, uid, node))

    arrivals = [(float(tl.arrival[u]), int(u)) for u in tl.order]
    while arrivals or heap:
        if heap and (not arrivals or heap[0][0] <= arrivals[0][0]):
            t = heap[0][0]
            freed = False
            while heap and heap[0][0] == t:
                _, uid = heapq.heappop(heap)
                if uid in running:
                    running.remove(uid)
                    log.append((t, DEPART, uid, cluster.remove(uid).node))
                    freed = True
                elif uid in queue:
                    queue.remove(uid)
                    log.append((t, WITHDRAW, uid, -1))
            if freed:
                for uid in list(queue):
                    decision = scheduler.schedule(w.pod(uid))
                    if decision.placed:
                        queue.remove(uid)
                        placed(t, uid, decision.node, START)
            continue
        t, uid = arrivals.pop(0)
        if config.departure == "trace":
            heapq.heappush(heap, (float(tl.deletion[uid]), uid))
        decision = scheduler.schedule(w.pod(uid))
        if decision.placed:
            placed(t, uid, decision.node, ARRIVE)
        else:
            queue.append(uid)
            log.append((t, QUEUE, uid, -1))
    return log


def check_log(result) -> None:
    """Rebuild node usage from the log; nothing is over-committed after any event."""
    spec, w, ev, pods = result.nodes, result.workload, result.events, result.pods
    cluster = result.cluster
    cpu = np.zeros(len(spec), dtype=np.int64)
    mem = np.zeros(len(spec), dtype=np.int64)
    rdma = np.zeros(len(spec), dtype=np.int64)
    gpu = np.zeros((len(spec), cluster.max_devices), dtype=np.int64)
    apps = np.zeros((len(spec), 2), dtype=np.int64)
    placed, departed, queued = set(), set(), 0
    shadow = Cluster(spec)  # the same placements, replayed from the log
    table = state_table(shadow, result.typical)
    assert np.all(np.diff(ev.time) >= 0)
    for e in range(len(ev)):
        kind, uid, node = int(ev.kind[e]), int(ev.pod[e]), int(ev.node[e])
        sign = 0
        if kind in (ARRIVE, START):
            assert uid not in placed
            placed.add(uid)
            assert node == pods.node[uid] and ev.time[e] == pods.placed[uid]
            sign = 1
            queued -= kind == START
            shadow.place(w.pod(uid), node, pods.devices[uid])
        elif kind == DEPART:
            assert uid in placed and uid not in departed
            departed.add(uid)
            assert ev.time[e] == pods.departed[uid]
            sign = -1
            shadow.remove(uid)
        elif kind == QUEUE:
            queued += 1
        elif kind == WITHDRAW:
            assert uid not in placed
            queued -= 1
        assert ev.queue_len[e] == queued
        if sign:
            cpu[node] += sign * w.cpu_milli[uid]
            mem[node] += sign * w.memory_mib[uid]
            rdma[node] += sign * w.rdma[uid]
            for d in pods.devices[uid]:
                assert d < spec.num_gpus[node]
                gpu[node, d] += sign * w.gpu_milli[uid]
            if w.app[uid] >= 0:
                apps[node, w.app[uid]] += sign
            if sign > 0 and w.gpu_milli[uid] > 0:
                assert len(set(pods.devices[uid])) == w.num_gpu[uid]
                assert cluster.spec_mask(str(w.gpu_model[uid]))[node]
        assert (cpu <= spec.cpu_milli).all() and (mem <= spec.memory_mib).all()
        assert (rdma <= 100).all() and (gpu <= 1000).all() and (apps <= 1).all()
        assert ev.used_gpu_milli[e] == gpu.sum()
        assert ev.cpu_alloc_pct[e] == 100 * cpu.sum() / spec.cpu_milli.sum()
        assert ev.mem_alloc_pct[e] == 100 * mem.sum() / spec.memory_mib.sum()
        assert ev.used_gpus[e] == np.count_nonzero(gpu)
        report = cluster_fragmentation(table)
        assert (ev.frag_milli[e], ev.frag_ratio[e]) == (report.frag_milli, report.frag_ratio)
    assert placed == departed  # everything placed left again
    assert (cpu == 0).all() and (gpu == 0).all()


@pytest.mark.slow  # a long property run
@settings(max_examples=100, deadline=None)
@given(problems)
def test_replay_invariants_and_naive_equivalence(problem):
    node_rows, pod_rows, policy, departure, seed = problem
    spec = nodes(*node_rows)
    w = make_workload(pod_rows)
    typical = TypicalPods.from_workload(w)
    config = ReplayConfig(policy=policy, seed=seed, departure=departure, missing_creation="skip")
    result = replay(spec, w, config, typical=typical)
    check_log(result)
    fresh = Cluster(spec)
    assert all(np.array_equal(a, b) for a, b in zip(result.cluster.snapshot(), fresh.snapshot())
               if a.shape == b.shape)
    assert not result.cluster.placements and not result.cluster.app_count.any()

    ev = result.events
    ours = list(zip(ev.time.tolist(), ev.kind.tolist(), ev.pod.tolist(), ev.node.tolist()))
    assert ours == naive_replay(spec, w, config, typical)

    s = result.summary()
    assert s["placed"] + s["never_placed"] == s["arrived"] == len(w) - s["skipped"]
    assert s["wait_max_s"] != s["wait_max_s"] or s["wait_max_s"] >= 0  # NaN when nothing placed


@settings(max_examples=60, deadline=None)
@given(
    st.lists(node_st, min_size=1, max_size=4),
    st.lists(pod_st, min_size=1, max_size=12),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 11), st.integers(0, 11)), max_size=12),
    st.integers(0, 2**16),
)
def test_fit_classes_match_the_filter(node_rows, pod_rows, moves, seed):
    """Fit classes (interned by fit key) agree with the Filter step in whatever state random placements leave."""
    from quasched.model.fit import fit_mask

    spec = nodes(*node_rows)
    w = make_workload(pod_rows)
    cluster = Cluster(spec)
    classes = FitClasses()
    of_pod = np.array([classes.of(w.pod(i)) for i in range(len(w))])
    scheduler = Scheduler(cluster, make_policy("random", TypicalPods.from_workload(w)),
                          np.arange(len(spec)), NumpyStream(seed))
    all_nodes = np.arange(len(spec))
    for _, place, remove in [(0, None, None), *moves]:  # the empty cluster first: checked even without moves
        for uid in () if place is None else (place % len(w), remove % len(w)):
            if uid in cluster.placements and uid == remove % len(w):
                cluster.remove(uid)
            elif uid not in cluster.placements:
                scheduler.schedule(w.pod(uid))
        got = classes.fits(cluster, of_pod, all_nodes)
        want = np.array([fit_mask(cluster, w.pod(i)) for i in range(len(w))])
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow  # a long property run
def test_naive_equivalence_under_heavy_queueing():
    """A few hundred pods on a tight cluster: long queues, many retries and starts."""
    rng = np.random.default_rng(11)
    rows = []
    for _ in range(250):
        k, m = [(0, 0), (1, 300), (1, 500), (1, 1000), (2, 1000), (4, 1000)][rng.integers(6)]
        rows.append(((k, m), int(rng.choice([1000, 2000, 4000])), 1024, ["", "T4", "V100"][rng.integers(3)],
                     float(rng.integers(0, 200)), float(rng.integers(0, 40)) if rng.random() > 0.05 else NAN,
                     int(rng.choice([-1, -1, 0, 1])), int(rng.choice([0, 30]))))
    w = make_workload(rows)
    spec = nodes((16000, 65536, 4, "T4"), (8000, 65536, 2, "V100"), (16000, 65536, 4, "V100"))
    typical = TypicalPods.from_workload(w)
    for policy in ("fgd", "random", "bestfit"):
        for departure in ("trace", "duration"):
            config = ReplayConfig(policy=policy, seed=3, departure=departure, missing_creation="skip")
            result = replay(spec, w, config, typical=typical)
            ev = result.events
            assert (ev.kind == START).sum() > 20 and ev.queue_len.max() > 10
            check_log(result)
            ours = list(zip(ev.time.tolist(), ev.kind.tolist(), ev.pod.tolist(), ev.node.tolist()))
            assert ours == naive_replay(spec, w, config, typical)
