"""Power, energy and carbon: hand-computed nodes and timelines, the PWR score, invariants."""

from __future__ import annotations

import os

import numpy as np
import pytest
from builders import nodes, pod
from hypothesis import given, settings, strategies as st

from quasched.metrics.power import (CPU_PROFILES, PWR_MODEL, PowerMeter, carbon_kg, cluster_power_w, cpu_power_w,
                                    energy_kwh, gpu_power_w, hourly_energy_kwh, node_power_w)
from quasched.metrics.typical import TypicalPods
from quasched.model import Cluster
from quasched.model.random import NumpyStream
from quasched.policies import CycleState, make_policy
from quasched.policies.pwr import PWR
from quasched.traces.carbon import ATTRIBUTION, load_carbon
from quasched.traces.errors import TraceError, TraceNotFound

XEON = CPU_PROFILES["xeon-e5-2682-v4"]  # 15 W idle, 120 W full, 16 cores per socket


def g2_node() -> Cluster:
    """96 vCPU = 48 cores = 3 sockets; 8 G2 GPUs modelled as A10 (30 W idle, 150 W full)."""
    return Cluster(nodes((96_000, 1 << 20, 8, "G2")))


def test_node_with_no_gpu_half_a_gpu_and_one_gpu_used():
    c = g2_node()
    # idle: 8 × 30 + 3 sockets × 15 = 285 W under both models
    assert node_power_w(c).tolist() == [285.0] and node_power_w(c, mode="linear").tolist() == [285.0]
    c.place(pod(uid=0, cpu=4000, k=1, m=500), 0, (0,))
    # step: 7 × 30 + 150 = 360; 4 vCPU = 2 cores in use → 1 active socket: 2 × 15 + 120 = 150 → 510
    assert node_power_w(c).tolist() == [510.0]
    # linear: 8 × 30 + 120 × 0.5 = 300; CPU 3 × 15 + 105 × 2/16 = 58.125 → 358.125
    assert node_power_w(c, mode="linear").tolist() == [358.125]
    c.place(pod(uid=1, cpu=0, k=1, m=500), 0, (0,))
    # the device is full now: step unchanged, linear 240 + 120 = 360 (+58.125)
    assert node_power_w(c).tolist() == [510.0] and node_power_w(c, mode="linear").tolist() == [418.125]


@pytest.mark.parametrize("vcpu, free, step, linear", [
    (8, 8, 15, 15),            # 4 cores, 1 socket, idle
    (8, 7, 120, 15 + 105 / 16),  # 1 vCPU used: floor(7/2) = 3 idle cores → 1 working core → socket active
    (68, 2, 3 * 120, 45 + 105 * 33 / 16),  # 34 cores in 3 sockets, 33 working → 3 active
    (68, 34, 15 + 2 * 120, 45 + 105 * 17 / 16),  # 17 working cores → 2 active sockets
])
def test_cpu_sockets(vcpu, free, step, linear):
    args = (np.array([vcpu * 1000]), np.array([free * 1000]), XEON)
    assert cpu_power_w(*args).tolist() == [step]
    assert cpu_power_w(*args, mode="linear").tolist() == pytest.approx([linear])


def test_openb_cluster_spans_the_documented_range(openb):
    c = Cluster(openb.nodes())
    assert cluster_power_w(c) == 230_100  # docs/simulator-spec.md, Power: 230.1 kW idle
    c.gpu_alloc[:] = 1000 * c.device_exists
    c.free[:, 0] = 0
    assert cluster_power_w(c) == 1_474_110  # ≈ 1,029 kW + 445 kW all busy


def test_gpu_power_vectorised_and_unknown_model():
    alloc = np.array([[0, 0], [300, 0], [1000, 1000]])
    assert gpu_power_w(alloc, np.array([2, 2, 2]), np.full(3, 10.0), np.full(3, 70.0)).tolist() == [20, 80, 140]
    assert gpu_power_w(alloc, np.array([2, 2, 2]), np.full(3, 10.0), np.full(3, 70.0), "linear").tolist() == \
        pytest.approx([20, 38, 140])
    with pytest.raises(ValueError, match="unknown power mode"):
        gpu_power_w(alloc, np.array([2, 2, 2]), np.full(3, 10.0), np.full(3, 70.0), "cubic")  # type: ignore[arg-type]
    assert PWR_MODEL.gpu_profile("H800").full_w == 400  # fallback A100
    with pytest.raises(KeyError, match="no power profile"):
        type(PWR_MODEL)(fallback="").gpu_profile("H800")


def test_energy_and_carbon_of_a_hand_timeline():
    times, power = np.array([0.0, 1800.0, 7200.0]), np.array([1000.0, 2000.0, 500.0])
    # 1000 W × 0.5 h + 2000 W × 1.5 h + 500 W × 1 h = 4 kWh
    assert energy_kwh(times, power, end_s=10_800) == pytest.approx(4.0)
    assert energy_kwh(times, power) == pytest.approx(3.5)  # the last value adds nothing without an end
    assert hourly_energy_kwh(times, power, 0.0, 3, end_s=10_800).tolist() == pytest.approx([1.5, 2.0, 0.5])
    # 1.5 × 100 + 2 × 200 + 0.5 × 400 = 750 g
    assert carbon_kg(times, power, np.array([100.0, 200.0, 400.0]), 0.0, end_s=10_800) == pytest.approx(0.75)
    assert carbon_kg(times, power, np.array([100.0, 200.0, 400.0]), 0.0, end_s=10_800, pue=1.5) == \
        pytest.approx(1.125)
    # half an hour later: 1000 W 0:30-1:00 | 2000 W 1:00-2:00 | 2000 W 2:00-2:30 + 500 W 2:30-3:00 | 500 W 3:00-3:30
    assert carbon_kg(times + 1800, power, np.array([100.0, 200.0, 400.0, 800.0]), 0.0, end_s=12_600) == \
        pytest.approx((0.5 * 100 + 2 * 200 + (1 + 0.25) * 400 + 0.25 * 800) / 1000)
    with pytest.raises(ValueError, match="covers"):
        carbon_kg(times, power, np.array([100.0]), 0.0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from([0, 250, 500, 1000]), st.integers(1, 2),
                          st.integers(0, 16_000)), min_size=1, max_size=25), st.integers(0, 2**16))
def test_meter_matches_the_vectorised_model_and_bounds_hold(ops, seed):
    c = Cluster(nodes((32_000, 1 << 20, 2, "T4"), (64_000, 1 << 20, 4, "V100M16"), (16_000, 1 << 20, 0, "")))
    meter = PowerMeter(c)
    floor = cluster_power_w(c)
    placed: list[int] = []
    rng = np.random.default_rng(seed)
    policy = make_policy("pwr", None)  # type: ignore[arg-type]
    from quasched.policies import Scheduler

    sched = Scheduler(c, policy, np.arange(3), NumpyStream(seed))
    for uid, (_, m, k, cpu) in enumerate(ops):
        if placed and rng.random() < 0.3:
            c.remove(placed.pop(int(rng.integers(len(placed)))))
        if sched.schedule(pod(uid=uid, cpu=cpu, k=k if m else 0, m=m)).placed:
            placed.append(uid)
        step, linear = meter.refresh()
        assert step == pytest.approx(cluster_power_w(c)) and linear == pytest.approx(cluster_power_w(c, mode="linear"))
        assert step >= linear - 1e-9 >= floor - 1e-6  # the step model never draws less; nothing below idle


def test_pwr_scores_minus_added_power_and_normalises():
    # n0: T4 (swing 60 W), one device busy at 500 m; n1: T4 idle; n2: V100 (swing 270 W) idle; 16 vCPU each
    c = Cluster(nodes((16_000, 1 << 20, 2, "T4"), (16_000, 1 << 20, 2, "T4"), (16_000, 1 << 20, 2, "V100M16")))
    c.place(pod(uid=0, cpu=2000, k=1, m=500), 0, (0,))
    plugin = PWR()
    plugin.attach(c, NumpyStream(0))
    every = np.arange(3)
    # sharing 300 m, 2 vCPU: n0 adds nothing (busy device, its socket already active);
    # n1 adds 60 + (120 − 15); n2 adds 270 + 105
    raw = plugin.score(c, pod(uid=1, cpu=2000, k=1, m=300), every, CycleState())
    assert raw.tolist() == [0, -165, -375]
    assert plugin.normalize(raw).tolist() == [100, (210 * 100) // 375, 0]
    # a whole GPU: n0 and n1 both add one idle T4 (60 W); n0's socket is already active
    assert plugin.score(c, pod(uid=2, cpu=2000, k=1, m=1000), every, CycleState()).tolist() == [-60, -165, -375]
    assert plugin.normalize(np.array([-5, -5])).tolist() == [100, 100]
    linear = PWR("linear")
    linear.attach(c, NumpyStream(0))
    # linear: 0.3 × swing + CPU 105 × 1/16 per working core (n0 already has 1 working core → 2)
    got = linear.score(c, pod(uid=1, cpu=2000, k=1, m=300), every, CycleState()).tolist()
    assert got == [int(-(0.3 * 60 + 105 / 16)), int(-(0.3 * 60 + 105 / 16)), int(-(0.3 * 270 + 105 / 16))]


def test_pwr_policy_places_where_least_power_is_added_and_mixes_weigh_fgd():
    c = Cluster(nodes((16_000, 1 << 20, 2, "V100M16"), (16_000, 1 << 20, 2, "T4")))
    from quasched.policies import Scheduler

    typical = TypicalPods(((1000, 500, 1, ""),), (1,), np.array([1.0]))
    assert Scheduler(c, make_policy("pwr", typical), np.array([0, 1]), NumpyStream(0)).schedule(
        pod(uid=0, k=1, m=1000)).node == 1
    mix = make_policy("pwr:fgd=800", typical)
    (p, wp), (f, wf) = mix.plugins
    assert (p.name, wp, f.name, wf) == ("pwr", 200.0, "fgd", 800.0)
    with pytest.raises(ValueError, match="at most 1000"):
        make_policy("pwr:fgd=1200", typical)


def test_carbon_loader(tmp_path, monkeypatch, carbon_dir):
    de = load_carbon("DE-LU", carbon_dir)
    assert len(de) == 8760 and str(de.start) == "2023-01-01T00" and de.g_per_kwh[0] == 140.51
    assert de.hours_from(np.datetime64("2023-12-31T23:30"), 2).tolist() == [de.g_per_kwh[-1], de.g_per_kwh[0]]
    assert "Electricity Maps" in ATTRIBUTION and "ODbL" in ATTRIBUTION
    monkeypatch.setenv("QUASCHED_CARBON", str(carbon_dir))
    assert load_carbon("GB", kind="lca").kind == "lca"
    monkeypatch.delenv("QUASCHED_CARBON")
    with pytest.raises(TraceNotFound, match="carbon-dir"):
        load_carbon("GB", tmp_path)
    with pytest.raises(TraceError, match="no zone 'XX'"):
        load_carbon("XX", carbon_dir)
    bad = tmp_path / "carbon_intensity_2023_hourly.csv"
    bad.write_text("datetime_utc,zone,direct_gco2_per_kwh,lca_gco2_per_kwh,estimated\n"
                   "2023-01-01 00:00:00,Z,10,12,0\n2023-01-01 02:00:00,Z,11,13,0\n")
    with pytest.raises(TraceError, match="line 3"):
        load_carbon("Z", tmp_path)


@pytest.mark.parametrize("row, message", [
    ("2023-01-01 01:00:00,Z,abc,13,0", "line 3, field 'direct_gco2_per_kwh': 'abc' is not a non-negative number"),
    ("2023-01-01 01:00:00,Z,-1,13,0", "line 3, field 'direct_gco2_per_kwh': '-1' is not a non-negative number"),
    ("2023-01-01 01:00:00,Z,,13,0", "line 3, field 'direct_gco2_per_kwh': '' is not"),
    ("2023-01-01 01:00:00,Z,11,13,yes", "line 3, field 'estimated': 'yes' is not 0 or 1"),
    ("2023-13-01 01:00:00,Z,11,13,0", "line 3, field 'datetime_utc': '2023-13-01 01:00:00' is not a time"),
    ("2023-01-01 01:30:00,Z,11,13,0", "line 3, field 'datetime_utc': '2023-01-01 01:30:00' is not a time on the hour"),
    ("2023-01-01 01:00:00+01:00,Z,11,13,0", "line 3, field 'datetime_utc': zone Z: hour 2023-01-01T00 follows"),
    ("\n2023-01-01 01:00:00,Z,abc,13,0", "line 4, field 'direct_gco2_per_kwh': 'abc' is not"),
    ("2023-01-01 01:00:00,Z,11,13", "line 3, field 'estimated': malformed CSV: 4 fields, the header has 5"),
    ("2023-01-01 01:00:00,Z,11,13,0,9", r"line 3: malformed CSV: 6 fields, the header has 5"),
])
def test_carbon_loader_names_the_line_and_field_of_a_bad_value(tmp_path, row, message):
    (tmp_path / "carbon_intensity_2023_hourly.csv").write_text(
        "datetime_utc,zone,direct_gco2_per_kwh,lca_gco2_per_kwh,estimated\n"
        f"2023-01-01 00:00:00,Z,10,12,1\n{row}\n2023-01-01 02:00:00,Y,x,x,x\n")
    with pytest.raises(TraceError, match=message):
        load_carbon("Z", tmp_path)


@pytest.mark.parametrize("text, message", [
    ("", "the file is empty"),
    ("datetime_utc,zone,direct_gco2_per_kwh,lca_gco2_per_kwh,estimated\n", "a header but no data rows"),
    ("datetime_utc,zone,direct_gco2_per_kwh,lca_gco2_per_kwh,estimated,zone\n2023-01-01 00:00:00,Z,1,2,0,Y\n",
     "line 1, field 'zone': duplicate column"),
    ("datetime_utc,zone,direct_gco2_per_kwh,estimated\n2023-01-01 00:00:00,Z,1,0\n",
     "line 1, field 'lca_gco2_per_kwh': required column is missing"),
])
def test_carbon_file_structure_is_checked_like_the_traces(tmp_path, text, message):
    # an extra field on every row made pandas take the first column as the index (zone '10'); a duplicate
    # column was read as its first copy; both were silent
    (tmp_path / "carbon_intensity_2023_hourly.csv").write_text(text)
    with pytest.raises(TraceError, match=message):
        load_carbon("Z", tmp_path)


def test_replay_energy_and_carbon_by_hand(carbon_dir):
    """Two pods on one T4 node: the replay's records, energy and carbon computed by hand."""
    from quasched.model.workload import Workload
    from quasched.sim.replay import run_replay

    spec = nodes((16_000, 1 << 20, 2, "T4"))
    workload = Workload(
        name=np.array(["a", "b"], dtype=object), cpu_milli=np.array([2000, 2000]), memory_mib=np.array([0, 0]),
        num_gpu=np.array([1, 1]), gpu_milli=np.array([1000, 1000]), gpu_model=np.array(["", ""], dtype=object),
        creation_time=np.array([0.0, 1800.0]), deletion_time=np.array([3600.0, 7200.0]))
    r = run_replay(spec, workload, "pwr", 0)
    # idle 2 × 10 + 15 = 35 W; one T4 busy + socket active: 10 + 70 + 120 = 200 W; both: 140 + 120 = 260 W
    assert r.events.time.tolist() == [0, 1800, 3600, 7200]
    assert r.events.power_w.tolist() == [200, 260, 200, 35]
    # 0.5 h × 200 + 0.5 h × 260 + 1 h × 200 = 430 Wh
    assert r.energy_kwh() == pytest.approx(0.43)
    series = load_carbon("DE-LU", carbon_dir)
    g = series.g_per_kwh
    assert r.carbon_kg(series) == pytest.approx((0.1 * g[0] + 0.13 * g[0] + 0.2 * g[1]) / 1000)
    start = np.datetime64("2023-06-01T12:30")
    h = series.hours_from(start, 3)
    # 12:30-13:00 200 W; 13:00-13:30 260 W; 13:30-14:30 200 W (half in each hour)
    assert r.carbon_kg(series, start=start) == pytest.approx((0.1 * h[0] + (0.13 + 0.1) * h[1] + 0.1 * h[2]) / 1000)


def test_replay_cli_reports_energy_and_attributed_carbon(tmp_path, carbon_dir):
    from typer.testing import CliRunner

    from quasched.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["replay", "--carbon-zone", "GB", "--carbon-dir", str(carbon_dir), "--pue", "1.2",
                                 "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "kg CO2e" in result.output and "Electricity Maps" in result.output and "ODbL" in result.output
    summary = (tmp_path / "summary.csv").read_text()
    assert "energy_kwh" in summary and "carbon_kg" in summary and "Electricity Maps" in summary
    bad = runner.invoke(app, ["replay", "--carbon-zone", "XX", "--carbon-dir", str(carbon_dir)])
    assert bad.exit_code != 0 and "no zone 'XX'" in bad.output


def test_pwr_stops_steering_from_until_percent_allocated():
    c = Cluster(nodes((16_000, 1 << 20, 2, "T4"), (16_000, 1 << 20, 2, "V100M16")))
    plugin = PWR(until=25)
    plugin.attach(c, NumpyStream(0))
    whole = pod(uid=9, cpu=0, k=1, m=1000)
    assert plugin.score(c, whole, np.arange(2), CycleState()).tolist() == [-60, -270]
    c.place(pod(uid=0, cpu=0, k=1, m=1000), 1, (0,))  # 1 of 4 GPUs = 25 % allocated
    assert plugin.score(c, whole, np.arange(2), CycleState()).tolist() == [0, 0]
    assert plugin.normalize(np.array([0, 0])).tolist() == [100, 100]
    power = make_policy("power:gpu=0.3,until=60", TypicalPods(((1000, 500, 1, ""),), (1,), np.array([1.0])))
    assert [(p.name, w) for p, w in power.plugins[4:]] == [("pwr", 0.3), ("pwr", 0.001)]
    assert [(p.until, p.terms) for p, _ in power.plugins[4:]] == [(60, "gpu"), (60, "cpu")]
    # the terms split the added power: n0 T4, n1 V100 (one device busy), 16 vCPU each, a whole GPU + 2 vCPU
    for terms, want in (("gpu", [-60, -270]), ("cpu", [-105, 0]), ("all", [-165, -270])):
        one = PWR(terms=terms)  # type: ignore[arg-type]
        one.attach(c, NumpyStream(0))
        c.place(pod(uid=5, cpu=2000, k=0, m=0), 1) if terms == "gpu" else None
        assert one.score(c, pod(uid=9, cpu=2000, k=1, m=1000), np.arange(2), CycleState()).tolist() == want, terms



def test_pwr_charges_an_idle_device_its_measured_swing_else_its_models():
    # two T4 nodes (model swing 70 − 10 = 60 W), 2 GPUs each; n1's device 0 measured to swing 40 W; no CPU asked
    c = Cluster(nodes((16_000, 1 << 20, 2, "T4"), (16_000, 1 << 20, 2, "T4")))
    plugin = PWR()
    plugin.attach(c, NumpyStream(0))
    every = np.arange(2)

    def score(k: int, m: int) -> list[int]:
        return plugin.score(c, pod(uid=9, cpu=0, k=k, m=m), every, CycleState()).tolist()

    c.measure_swing("n1", 0, 60.0)  # measured as modelled: the same scores
    assert (score(1, 1000), score(2, 1000), score(1, 300)) == ([-60, -60], [-120, -120], [-60, -60])
    c.measure_swing("n1", 0, 40.0)
    # whole GPU: n1 takes device 0 (40 W); two GPUs: 40 + 60; sharing: the first idle device, n1's device 0
    assert (score(1, 1000), score(2, 1000), score(1, 300)) == ([-60, -40], [-120, -100], [-60, -40])
    c.place(pod(uid=0, cpu=0, k=1, m=500), 1, (0,))  # device 0 busy: a share fits there (0 W), a whole GPU takes 1
    assert (score(1, 1000), score(1, 300)) == ([-60, -60], [-60, 0])
    c.remove(0)
    c.measure_swing("n1", 0, None)  # forgotten: the model's again
    assert score(1, 1000) == [-60, -60] and c.measured_devices == 0


@pytest.mark.parametrize("policy", ["power", "pwr"])
def test_power_places_a_whole_gpu_on_the_device_measured_to_swing_less(policy):
    """Two nodes of one GPU model: the tie goes to n0 (rank 0) unless n1's device is measured to add less."""
    from quasched.policies import Scheduler

    typical = TypicalPods(((1000, 500, 1, ""),), (1,), np.array([1.0]))
    for measured, node in ((None, 0), (300.0, 1), (360.0, 0)):  # A100: model swing 400 − 50 = 350 W
        c = Cluster(nodes((16_000, 1 << 20, 1, "A100"), (16_000, 1 << 20, 1, "A100")))
        c.measure_swing("n1", 0, measured)
        scheduler = Scheduler(c, make_policy(policy, typical), np.array([0, 1]), NumpyStream(0))
        assert scheduler.schedule(pod(uid=1, cpu=1000, k=1, m=1000)).node == node, measured

def test_carbon_loader_reads_a_rewritten_file_again(tmp_path, monkeypatch):
    """The parsed file is kept while it is unchanged: a rewrite (even of the same size, whose time stamp may not move)
    is read again once its time stamp moves, and the same file reached by a relative path is the same entry."""
    path = tmp_path / "carbon_intensity_2023_hourly.csv"
    header = "datetime_utc,zone,direct_gco2_per_kwh,lca_gco2_per_kwh,estimated\n"
    path.write_text(header + "2023-01-01 00:00:00,Z,10,12,0\n")
    assert load_carbon("Z", tmp_path).g_per_kwh.tolist() == [10]
    path.write_text(header + "2023-01-01 00:00:00,Z,20,12,0\n")  # the same size
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert load_carbon("Z", tmp_path).g_per_kwh.tolist() == [20]
    monkeypatch.chdir(tmp_path)
    assert load_carbon("Z", ".").g_per_kwh.tolist() == [20]
