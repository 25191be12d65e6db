"""Synthetic openb-like generator: determinism and shape."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from quasched.traces import describe, load_openb_pods, load_trace, synthetic_cluster, synthetic_workload
from quasched.traces.synthetic import NODE_TYPES


def same(a, b) -> bool:
    """Whether two NodeSpecs / Workloads hold equal arrays (NaN equal to NaN)."""
    arrays = [k for k, v in vars(a).items() if isinstance(v, np.ndarray)]
    return all(pd.Series(getattr(a, k)).equals(pd.Series(getattr(b, k))) for k in arrays)


def test_deterministic_per_seed() -> None:
    assert same(synthetic_workload(seed=3), synthetic_workload(seed=3))
    assert same(synthetic_cluster(seed=3), synthetic_cluster(seed=3))
    assert not same(synthetic_workload(seed=3), synthetic_workload(seed=4))
    assert not same(synthetic_cluster(seed=3), synthetic_cluster(seed=4))


def test_cluster_nodes_are_openb_types() -> None:
    nodes = synthetic_cluster(n_nodes=300, seed=1)
    assert len(nodes) == 300 and len(set(nodes.name)) == 300
    types = {row[:4] for row in NODE_TYPES}
    rows = zip(nodes.gpu_model, nodes.num_gpus, nodes.cpu_milli, nodes.memory_mib)
    assert {(str(m), int(g), int(c), int(mem)) for m, g, c, mem in rows} <= types
    share = {m: float(np.mean(nodes.gpu_model == m)) for m in ("G2", "T4")}
    assert share["G2"] == pytest.approx(549 / 1213, abs=0.08)
    assert share["T4"] == pytest.approx(404 / 1213, abs=0.08)


def test_pod_mix() -> None:
    w = synthetic_workload(n_pods=20_000, seed=2)
    s = describe(w)
    assert s["cpu_only"] / 20_000 == pytest.approx(0.133, abs=0.015)
    assert s["sharing"] / 20_000 == pytest.approx(0.378, abs=0.015)
    assert s["gpu_1"] / 20_000 == pytest.approx(0.480, abs=0.015)
    assert min(s["gpu_2"], s["gpu_4"], s["gpu_8"]) > 0 and s["gpu_other"] == 0
    assert s["with_gpu_model"] == 0
    sharing = (w.num_gpu == 1) & (w.gpu_milli < 1000)
    assert set(np.unique(w.gpu_milli[sharing])) <= {810, 470, 320, 650, 230, 460, 590, 160, 550, 220, 370, 110}
    multi = w.num_gpu > 1
    assert np.all(w.cpu_milli[multi] >= 8000 * w.num_gpu[multi])  # sizes scale with the GPU count


def test_every_pod_fits_some_node_type() -> None:
    w = synthetic_workload(n_pods=5000, seed=5, gpu_model_fraction=0.5)
    fits = np.zeros(len(w), dtype=bool)
    for model, gpus, cpu, memory, _ in NODE_TYPES:
        spec_ok = np.array([s == "" or model in s.split("|") for s in w.gpu_model])
        fits |= (w.cpu_milli <= cpu) & (w.memory_mib <= memory) & (w.num_gpu <= gpus) & spec_ok
    assert fits.all()


def test_gpu_model_fraction() -> None:
    w = synthetic_workload(n_pods=10_000, seed=7, gpu_model_fraction=0.3)
    constrained = w.gpu_model != ""
    assert np.all(w.num_gpu[constrained] == 1)
    assert constrained.sum() / np.sum(w.num_gpu == 1) == pytest.approx(0.3, abs=0.03)


def test_defaults_make_a_loaded_small_cluster() -> None:
    nodes, w = load_trace("synthetic")
    assert len(nodes) == 120 and len(w) == 1000 and w.source == "synthetic"
    assert 100 < describe(w, nodes)["gpu_capacity_pct"] < 160


def test_output_passes_the_openb_validation(tmp_path) -> None:
    w = synthetic_workload(n_pods=500, seed=9, gpu_model_fraction=0.2)
    frame = pd.DataFrame({k: getattr(w, k) for k in ("name", "cpu_milli", "memory_mib", "num_gpu",
                                                     "gpu_milli", "gpu_model", "creation_time",
                                                     "deletion_time")}).rename(columns={"gpu_model": "gpu_spec"})
    frame.to_csv(tmp_path / "syn.csv", index=False)
    again = load_openb_pods(tmp_path / "syn.csv")
    assert same(again, w)
