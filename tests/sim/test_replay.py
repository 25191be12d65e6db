"""Time-based replay: hand-computed timelines, tie rules, skipped rows, determinism."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from builders import nodes

from quasched.metrics.typical import TypicalPods
from quasched.model import Cluster, Workload
from quasched.report.replay import summary_rows
from quasched.sim.events import build_timeline
from quasched.sim.records import ARRIVE, DEPART, QUEUE, START, WITHDRAW
from quasched.sim.replay import replay, run_replay
from quasched.sim.replay_result import DONE, SKIPPED, WITHDRAWN, ReplayConfig, time_average

NAN = float("nan")
#: one typical pod (2 cores, one whole GPU) so fragmentation is easy to compute by hand
TYPICAL = TypicalPods(shapes=((2000, 1000, 1, ""),), counts=(1,), freq=np.array([1.0]))


def workload(rows: list[tuple], **extra) -> Workload:
    """Rows ``(cpu, mem, num_gpu, gpu_milli, creation, deletion)``."""
    col = lambda i, dtype: np.array([r[i] for r in rows], dtype=dtype)  # noqa: E731
    return Workload(
        name=np.array([f"p{i}" for i in range(len(rows))], dtype=object),
        cpu_milli=col(0, np.int64), memory_mib=col(1, np.int64),
        num_gpu=col(2, np.int64), gpu_milli=col(3, np.int64),
        gpu_model=np.full(len(rows), "", dtype=object),
        creation_time=col(4, float), deletion_time=col(5, float), **extra,
    )


# n0: 4 cores, 8 GiB, 1 GPU; n1: 8 cores, 16 GiB, 1 GPU
TWO_NODES = nodes((4000, 8192, 1, "A"), (8000, 16384, 1, "A"))
TIMELINE = workload([
    (6000, 16384, 1, 1000, 0, 10),   # p0: only n1 has the CPU
    (2000, 1024, 1, 500, 1, 5),      # p1: n1's GPU is taken -> n0
    (6000, 16384, 1, 1000, 2, 12),   # p2: needs n1, busy -> queued until p0 leaves at 10
    (1000, 1024, 0, 0, 3, NAN),      # p3: n1's memory is full -> n0; runs to the trace end (15)
    (1000, 1024, 0, 0, NAN, 15),     # p4: no creation time -> skipped (its deletion sets the end)
    (6000, 16384, 1, 1000, 10, 11),  # p5: arrives after p2 took n1 at 10, withdrawn at 11
])


def rows(result):
    ev = result.events
    return list(zip(ev.time.tolist(), ev.kind.tolist(), ev.pod.tolist(), ev.node.tolist(),
                    ev.queue_len.tolist()))


def test_hand_computed_timeline():
    config = ReplayConfig(policy="bestfit", seed=1, departure="trace", missing_creation="skip")
    r = replay(TWO_NODES, TIMELINE, config, typical=TYPICAL)
    assert rows(r) == [
        (0, ARRIVE, 0, 1, 0),
        (1, ARRIVE, 1, 0, 0),
        (2, QUEUE, 2, -1, 1),
        (3, ARRIVE, 3, 0, 1),
        (5, DEPART, 1, 0, 1),   # n0 freed, but p2 still does not fit there
        (10, DEPART, 0, 1, 1),
        (10, START, 2, 1, 0),   # the queue is retried before the arrival at 10
        (10, QUEUE, 5, -1, 1),
        (11, WITHDRAW, 5, -1, 0),
        (12, DEPART, 2, 1, 0),
        (15, DEPART, 3, 0, 0),
    ]
    ev = r.events
    assert ev.used_gpu_milli.tolist() == [1000, 1500, 1500, 1500, 1000, 0, 1000, 1000, 1000, 0, 0]
    assert ev.used_gpus.tolist() == [1, 2, 2, 2, 1, 0, 1, 1, 1, 0, 0]
    cpu = [6000, 8000, 8000, 9000, 7000, 1000, 7000, 7000, 7000, 1000, 0]
    mem = [16384, 17408, 17408, 18432, 17408, 1024, 17408, 17408, 17408, 1024, 0]
    np.testing.assert_allclose(ev.cpu_alloc_pct, [100 * c / 12000 for c in cpu])
    np.testing.assert_allclose(ev.mem_alloc_pct, [100 * m / 24576 for m in mem])
    np.testing.assert_allclose(ev.gpu_alloc_pct, [u / 20 for u in ev.used_gpu_milli.tolist()])
    # n0 after p1 (2 cores, 500 milli free) lacks GPU for the typical pod; after p3 it lacks both
    assert ev.frag_milli.tolist() == [0, 500, 500, 500, 0, 0, 0, 0, 0, 0, 0]
    assert ev.frag_ratio.tolist() == [0, 100, 100, 100, 0, 0, 0, 0, 0, 0, 0]

    pods = r.pods
    np.testing.assert_array_equal(pods.wait, [0, 0, 8, 0, NAN, NAN])
    np.testing.assert_array_equal(pods.placed, [0, 1, 10, 3, NAN, NAN])
    np.testing.assert_array_equal(pods.departed, [10, 5, 12, 15, NAN, NAN])
    assert pods.node.tolist() == [1, 0, 1, 0, -1, -1]
    assert pods.status.tolist() == [DONE, DONE, DONE, DONE, SKIPPED, WITHDRAWN]
    assert pods.devices[1] == (0,) and pods.devices[3] == ()

    s = r.summary()
    assert (s["skipped"], s["arrived"], s["placed"], s["placed_on_arrival"]) == (1, 5, 4, 3)
    assert (s["queued"], s["never_placed"], s["withdrawn"], s["still_queued"]) == (2, 1, 1, 0)
    assert (s["wait_mean_s"], s["wait_p50_s"], s["wait_max_s"]) == (2.0, 0.0, 8.0)
    assert s["wait_p95_s"] == pytest.approx(8 * 0.85)  # linear interpolation of [0, 0, 0, 8]
    assert s["gpu_alloc_avg_pct"] == pytest.approx(100 * 14000 / 15 / 2000)
    assert s["peak_queue"] == 1 and s["events"] == 11
    assert (s["start_s"], s["end_s"]) == (0, 15)
    cols = r.events.columns(TIMELINE.name)
    assert cols["kind"][:3].tolist() == ["arrive", "arrive", "queue"] and cols["pod"][2] == "p2"
    labels = [label for label, _ in summary_rows(r)]
    assert "never placed" in labels and "peak queue" in labels
    assert not r.cluster.placements


def test_duration_mode_keeps_lifetimes():
    config = ReplayConfig(policy="bestfit", departure="duration", missing_creation="skip")
    r = replay(TWO_NODES, TIMELINE, config, typical=TYPICAL)
    assert rows(r)[6:] == [
        (10, START, 2, 1, 0),
        (10, QUEUE, 5, -1, 1),
        (15, DEPART, 3, 0, 1),   # open-ended: the end of the trace
        (20, DEPART, 2, 1, 1),   # placed at 10, lives 12 - 2 = 10 s
        (20, START, 5, 1, 0),
        (21, DEPART, 5, 1, 0),
    ]
    np.testing.assert_array_equal(r.pods.wait, [0, 0, 8, 0, NAN, 10])
    assert r.summary()["never_placed"] == 0


def test_departures_before_arrivals_at_equal_times():
    one_gpu = nodes((8000, 8192, 1, "A"))
    w = workload([(1000, 1024, 1, 1000, 0, 5), (1000, 1024, 1, 1000, 5, 6)])
    r = replay(one_gpu, w, ReplayConfig(policy="fgd", departure="trace", missing_creation="skip"))
    assert rows(r) == [(0, ARRIVE, 0, 0, 0), (5, DEPART, 0, 0, 0), (5, ARRIVE, 1, 0, 0), (6, DEPART, 1, 0, 0)]
    assert r.pods.wait.tolist() == [0, 0]


def test_arrivals_in_file_order_and_zero_lifetime():
    one_gpu = nodes((8000, 8192, 1, "A"))
    # p0 and p1 arrive together; p0 lives 0 s and leaves before p1 is scheduled
    w = workload([(1000, 1024, 1, 1000, 3, 3), (1000, 1024, 1, 1000, 3, 9), (1000, 1024, 1, 1000, 3, 4)])
    r = replay(one_gpu, w, ReplayConfig(policy="bestfit", departure="trace", missing_creation="skip"))
    assert rows(r) == [
        (3, ARRIVE, 0, 0, 0), (3, DEPART, 0, 0, 0), (3, ARRIVE, 1, 0, 0), (3, QUEUE, 2, -1, 1),
        (4, WITHDRAW, 2, -1, 0), (9, DEPART, 1, 0, 0),
    ]


def test_fifo_retry_order_and_no_head_of_line_blocking():
    node = nodes((4000, 8192, 2, "A"))
    w = workload([
        (1000, 1024, 2, 1000, 0, 10),  # p0 holds both GPUs
        (1000, 1024, 2, 1000, 1, 30),  # p1 queued (needs both)
        (1000, 1024, 1, 1000, 2, 30),  # p2 queued (needs one)
        (1000, 1024, 0, 0, 3, 30),     # p3 CPU-only: placed although others wait
        (1000, 1024, 1, 1000, 4, 30),  # p4 queued
    ])
    r = replay(node, w, ReplayConfig(policy="firstfit", departure="trace", missing_creation="skip"))
    ev = r.events
    starts = ev.pod[ev.kind == START].tolist()
    assert starts == [1]  # the head takes both GPUs freed at 10; p2 and p4 keep waiting
    assert ev.kind[ev.pod == 3].tolist()[0] == ARRIVE
    assert r.pods.status[[2, 4]].tolist() == [WITHDRAWN, WITHDRAWN]

    w2 = workload([
        (1000, 1024, 2, 1000, 0, 10),
        (5000, 1024, 2, 1000, 1, 30),  # p1 never fits (CPU): p2 and p4 start in order when p0 leaves
        (1000, 1024, 1, 1000, 2, 30),
        (1000, 1024, 0, 0, 3, 30),
        (1000, 1024, 1, 1000, 4, 30),
    ])
    r2 = replay(node, w2, ReplayConfig(policy="firstfit", departure="trace", missing_creation="skip"))
    ev2 = r2.events
    assert ev2.pod[ev2.kind == START].tolist() == [2, 4]
    assert r2.pods.wait[[2, 4]].tolist() == [8, 6]


def test_skipped_rows_and_start_option():
    w = workload([(1000, 1024, 0, 0, NAN, 7), (1000, 1024, 0, 0, 2, NAN), (1000, 1024, 0, 0, NAN, NAN)])
    tl = build_timeline(w)
    assert tl.n_skipped == 2 and tl.order.tolist() == [1] and (tl.start, tl.end) == (0, 7)
    assert tl.deletion[1] == 7
    r = replay(nodes((8000, 8192, 0, "")), w, ReplayConfig(policy="bestfit", departure="trace", missing_creation="skip"))
    assert r.summary()["skipped"] == 2 and r.pods.status.tolist() == [SKIPPED, DONE, SKIPPED]
    assert set(r.events.pod.tolist()) == {1}
    r2 = replay(nodes((8000, 8192, 0, "")), w, ReplayConfig(policy="bestfit", missing_creation="start"))
    assert r2.summary()["skipped"] == 0
    assert r2.pods.placed.tolist() == [0, 2, 0] and r2.pods.departed.tolist() == [7, 7, 7]


def test_deterministic_for_a_seed_and_run_replay_entry_point():
    rng = np.random.default_rng(5)
    n = 60
    create = rng.integers(0, 50, n).astype(float)
    w = workload([
        (int(rng.integers(1, 8)) * 1000, 1024, int(k), int(m), c, c + int(rng.integers(0, 30)))
        for k, m, c in zip(rng.choice([0, 1, 1, 2], n), rng.choice([300, 500, 1000], n), create)
    ])
    w = replace(w, gpu_milli=np.where(w.num_gpu == 0, 0, np.where(w.num_gpu > 1, 1000, w.gpu_milli)))
    spec = nodes(*[(16000, 65536, 2, "A")] * 4)
    a = run_replay(spec, w, "random", 7, missing_creation="skip")
    b = run_replay(spec, w, "random", 7, missing_creation="skip")
    assert a.summary()["queued"] > 0
    for name, column in a.events.__dict__.items():
        np.testing.assert_array_equal(column, getattr(b.events, name), err_msg=name)
    np.testing.assert_array_equal(a.pods.devices, b.pods.devices)
    assert a.config == ReplayConfig(policy="random", seed=7, missing_creation="skip")


def test_time_average():
    assert time_average(np.array([0.0, 1.0, 1.0, 4.0]), np.array([10.0, 99.0, 20.0, 0.0])) == pytest.approx(
        (10 * 1 + 20 * 3) / 4)
    assert time_average(np.array([3.0]), np.array([5.0])) == 5.0


def test_bad_options():
    with pytest.raises(ValueError, match="departure"):
        replay(TWO_NODES, TIMELINE, ReplayConfig(departure="never", missing_creation="skip"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="missing_creation"):
        build_timeline(TIMELINE, "guess")  # type: ignore[arg-type]


def test_final_cluster_is_empty():
    r = replay(TWO_NODES, TIMELINE, ReplayConfig(policy="gpupacking", missing_creation="skip"))
    fresh = Cluster(TWO_NODES)
    assert all(np.array_equal(a, b) for a, b in zip(r.cluster.snapshot(), fresh.snapshot()))


def test_progress_callback():
    calls = []
    run_replay(TWO_NODES, TIMELINE, "bestfit", 0, progress=lambda done, total: calls.append((done, total)), missing_creation="skip")
    assert calls == [(5, 5)]


@pytest.mark.slow  # the full DLRM trace
def test_dlrm_trace_on_a_small_cluster(data_dir):
    """The real v2025 trace on 30 % of the trace-sized cluster: queueing, withdrawals, clean end."""
    from quasched.traces.catalog import DLRM_FILE
    from quasched.traces.dlrm import dlrm_cluster, load_dlrm

    w = load_dlrm(data_dir / DLRM_FILE)
    spec = dlrm_cluster(w, headroom=0.3)
    r = run_replay(spec, w, "bestfit", 42, departure="trace", missing_creation="skip")
    s = r.summary()
    skipped = int(np.isnan(w.creation_time).sum())
    assert s["skipped"] == skipped and s["arrived"] == len(w) - skipped
    assert s["placed"] + s["never_placed"] == s["arrived"]
    assert s["queued"] > 0 and s["withdrawn"] > 0 and s["still_queued"] == 0
    ev = r.events
    assert np.all(np.diff(ev.time) >= 0)
    assert ev.used_gpu_milli.max() <= 1000 * spec.total_gpus and ev.cpu_alloc_pct.max() <= 100
    assert (ev.kind == START).sum() == s["placed"] - s["placed_on_arrival"] > 0
    starts = s["placed"] - s["placed_on_arrival"]
    assert len(ev) == s["arrived"] + starts + s["placed"] + s["withdrawn"]  # arrive/queue, start, depart, withdraw
    assert not r.cluster.placements and (r.cluster.gpu_free.sum() == 1000 * spec.total_gpus)
