"""Resumable sweeps: the results store, the backends and ``quasched sweep`` (built-in synthetic trace)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from typer.testing import CliRunner

from quasched.cli import app
from quasched.extras import MissingExtra
from quasched.metrics.curves import CURVES, Curves, arrival_curves
from quasched.sim.arrival import ExperimentConfig
from quasched.sim.backends import LocalBackend, RayBackend, make_backend
from quasched.sim.matrix import matrix_tasks, run_matrix, run_task, task_key
from quasched.sim.store import ResultStore, RunKey, summary_from_json, summary_to_json
from quasched.sim.sweep import RunSummary

TASKS = matrix_tasks(["synthetic"], ["fgd", "bestfit"], [1, 2], ExperimentConfig(), arrival_curves)


def same(a: RunSummary, b: RunSummary) -> bool:
    """Equal in everything but the wall time."""
    curves = all(np.array_equal(a.curves[c], b.curves[c], equal_nan=True) for c in CURVES)
    return curves and replace(a, curves=b.curves, elapsed_s=b.elapsed_s) == b


class Interrupted(Exception):
    pass


class StopAfter(LocalBackend):
    """In process; raises after ``n`` runs (a sweep killed half way); counts what it ran."""

    def __init__(self, n: int = 10**9) -> None:
        super().__init__(1)
        self.n, self.ran = n, []

    def map(self, fn, tasks, initializer=None, initargs=()):
        for task, result in super().map(fn, tasks, initializer, initargs):
            if len(self.ran) == self.n:
                raise Interrupted
            self.ran.append(task)
            yield task, result


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The matrix run once, uninterrupted, in process."""
    with ResultStore(tmp_path_factory.mktemp("ref") / "runs.sqlite") as store:
        return run_matrix(TASKS, store, LocalBackend(1))


def test_interrupted_sweep_resumes_with_only_the_missing_runs_and_identical_results(tmp_path, reference):
    path = tmp_path / "runs.sqlite"
    with ResultStore(path) as store, pytest.raises(Interrupted):
        run_matrix(TASKS, store, StopAfter(3))
    with ResultStore(path) as store:
        assert len(store) == 3
        backend = StopAfter()
        seen = []
        result = run_matrix(TASKS, store, backend, on_done=lambda t, r, stored: seen.append((t, stored)))
        assert backend.ran == [TASKS[3]]
        assert result.skipped == 3 and sorted(stored for _, stored in seen) == [False, True, True, True]
        assert all(same(a, b) for a, b in zip(result.runs, reference.runs))
        again = StopAfter()
        assert run_matrix(TASKS, store, again).skipped == 4 and again.ran == []


@pytest.mark.slow  # a process pool
def test_process_pool_and_in_process_give_identical_results(tmp_path, reference):
    with ResultStore(tmp_path / "pool.sqlite") as store:
        pooled = run_matrix(TASKS, store, LocalBackend(2))
    assert [t.config for t in pooled.tasks] == [t.config for t in reference.tasks]
    assert all(same(a, b) for a, b in zip(pooled.runs, reference.runs))


def test_stored_summary_round_trips_exactly(tmp_path, reference):
    run = reference.runs[0]
    key = task_key(TASKS[0], "inputs")
    with ResultStore(tmp_path / "s.sqlite") as store:
        store.put(key, run)
        back = store.get(key)
        assert back is not None and same(back, run) and back.elapsed_s == run.elapsed_s
        assert store.get(replace(key, seed=99)) is None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6) | st.just(float("nan")), min_size=1, max_size=20),
       st.dictionaries(st.text(max_size=30), st.integers(1, 10**6), max_size=5))
def test_summary_json_round_trips_any_curves_and_failures(values, shapes):
    curve = np.asarray(values)
    run = RunSummary("fgd", 1, 10, 7, Curves(curve, curve * 2, -curve), Counter(shapes), 1.0 / 3, 0.1, 2.5,
                     {"gpu_alloc_pct": 0.1 + 0.2})
    assert same(summary_from_json(summary_to_json(run)), run)


def test_key_changes_with_every_setting_that_changes_the_result():
    task = TASKS[0]
    base = task_key(task, "abc")
    variants = [
        task_key(task, "abd"),
        task_key(replace(task, trace="openb-default"), "abc"),
        task_key(replace(task, config=replace(task.config, seed=3)), "abc"),
        task_key(replace(task, config=replace(task.config, policy="gpupacking")), "abc"),
        task_key(replace(task, config=replace(task.config, tune_ratio=1.2)), "abc"),
        task_key(replace(task, config=replace(task.config, rng="go")), "abc"),
        replace(base, code="0" * 16),
    ]
    assert len({base.id, *(v.id for v in variants)}) == len(variants) + 1
    assert json.loads(base.config)["curves"].endswith("arrival_curves")
    assert isinstance(base, RunKey) and task_key(task, "abc") == base


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="unknown backend 'spark'"):
        make_backend("spark")


def test_ray_backend_runs_the_same_results(reference):
    ray = pytest.importorskip("ray")
    try:
        results = dict(RayBackend(num_cpus=2).map(run_task, TASKS))
    finally:
        ray.shutdown()  # no Ray threads left behind for later tests that fork
    assert all(same(results[t], r) for t, r in zip(TASKS, reference.runs))


def test_sweep_command_resumes_from_its_store_and_writes_tables(tmp_path):
    runner = CliRunner()
    args = ["sweep", "--traces", "synthetic", "--policy", "fgd,bestfit", "--seeds", "1", "--rng", "native",
            "--store", str(tmp_path / "runs.sqlite"), "--workers", "1", "--out", str(tmp_path / "out")]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "0 from the store" in first.output
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "0 runs in" in again.output and "2 from the store" in again.output
    csv = (tmp_path / "out" / "matrix.csv").read_text().splitlines()
    assert csv[0].startswith("trace,policy,runs,alloc@100_mean") and len(csv) == 3
    assert (tmp_path / "out" / "alloc_130.png").stat().st_size > 0
    assert (tmp_path / "out" / "synthetic" / "analysis_allo_discrete.csv").exists()


def test_sweep_command_names_an_unknown_trace(tmp_path):
    result = CliRunner().invoke(app, ["sweep", "--traces", "openb-nope", "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2 and "openb-nope" in result.output


class FakeRay:
    """The part of Ray's API the backend uses, run in process, finishing tasks in reverse submission order."""

    def __init__(self) -> None:
        self.init_args: dict | None = None
        self.refs: list[tuple[int, object]] = []

    def is_initialized(self) -> bool:
        return self.init_args is not None

    def init(self, **kwargs) -> None:
        self.init_args = kwargs

    def remote(self, fn):
        ray = self

        class Remote:
            @staticmethod
            def remote(task):
                ray.refs.append((len(ray.refs), fn(task)))
                return ray.refs[-1]
        return Remote

    def wait(self, refs, num_returns):
        assert num_returns == 1
        return [max(refs, key=lambda r: r[0])], []

    def get(self, ref):
        return ref[1]


def test_ray_backend_submits_every_task_and_yields_each_once(monkeypatch):
    """Without Ray installed (CI's dev install), the backend's orchestration against a stand-in of Ray's API."""
    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    backend = RayBackend(num_cpus=2)
    results = list(backend.map(lambda t: t * 10, [1, 2, 3]))
    assert results == [(3, 30), (2, 20), (1, 10)]
    assert fake.init_args == {"address": None, "num_cpus": 2, "include_dashboard": False, "log_to_driver": False}
    list(RayBackend(address="head:6379", num_cpus=2).map(str, [1]))
    assert fake.init_args["address"] is None  # already initialised: not started again


def test_missing_ray_is_a_clean_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(MissingExtra, match=r"pip install 'quasched\[ray\]'"):
        make_backend("ray")
    result = CliRunner().invoke(app, ["sweep", "--backend", "ray", "--traces", "synthetic", "--policy", "fgd",
                                      "--seeds", "1", "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2 and "error: `quasched sweep --backend ray` (ray) needs the Python package 'ray'" in result.output
    assert "pip install 'quasched[ray]'" in result.output
    assert not (tmp_path / "s.sqlite").exists()
