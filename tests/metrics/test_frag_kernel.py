"""The compiled fragmentation kernels equal the straightforward NumPy computation, bit for bit."""

from __future__ import annotations

import importlib.util
import shutil
import warnings

import numpy as np
import pytest
from builders import pod
from hypothesis import given, settings, strategies as st

from quasched.metrics import frag_aot, frag_kernel
from quasched.metrics.frag_categories import Q2, Q3
from quasched.metrics.fragmentation import FragmentationModel, frag_amount, jit_forced, kernels
from quasched.metrics.typical import TypicalPods
from quasched.policies.fgd import sigmoid_score

MODELS = ("", "T4", "A100")
SHAPE = st.tuples(st.integers(0, 8000), st.sampled_from([0, 100, 250, 500, 1000]), st.integers(0, 3),
                  st.sampled_from(["", "T4", "A100", "T4|A100"]))
MILLI = st.sampled_from([0, 0, 50, 100, 250, 500, 750, 900, 1000, 1000])


def numpy_vectors(model: FragmentationModel, cpu: np.ndarray, gpu: np.ndarray, model_id: np.ndarray) -> np.ndarray:
    """The vectorised reference (the formula of ``FragmentationModel.vectors``, NumPy's cumulative sum)."""
    idle = gpu.sum(axis=1)[:, None]
    fits = gpu[:, None, :] >= model.t_milli[None, :, None]
    fitting = np.where(fits, gpu[:, None, :], 0).sum(axis=2)
    cpu_ok, gpu_ok = cpu[:, None] >= model.t_cpu, fits.sum(axis=2) >= model.t_count
    category = np.select(
        [model.t_milli == 0, ~model.access[model_id], gpu_ok & cpu_ok, gpu_ok, cpu_ok],
        [np.where(cpu_ok, 4, 5), 6, Q3, 3, Q2], 0)
    satisfied = category == Q3
    contrib = np.zeros((*category.shape, 7))
    np.put_along_axis(contrib, category[..., None], (model.freq * np.where(satisfied, fitting, idle))[..., None], 2)
    contrib[..., Q2] += np.where(satisfied, model.freq * (idle - fitting), 0.0)
    return np.cumsum(contrib, axis=1)[:, -1, :]


def typical_of(shapes: list) -> TypicalPods:
    counts = list(range(len(shapes), 0, -1))
    return TypicalPods(tuple(shapes), tuple(counts), np.array(counts) / sum(counts))


STATES = st.lists(st.tuples(st.integers(0, 16000), st.lists(MILLI, min_size=4, max_size=4), st.integers(0, 2)),
                  min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(st.lists(SHAPE, min_size=1, max_size=12, unique=True), STATES)
def test_compiled_vectors_equal_the_numpy_reference(shapes, states):
    model = FragmentationModel(typical_of(shapes), MODELS)
    cpu = np.array([s[0] for s in states])
    gpu = np.sort(np.array([s[1] for s in states]), axis=1)
    model_id = np.array([s[2] for s in states])
    got = model.vectors(cpu, gpu, model_id)
    assert got.tobytes() == numpy_vectors(model, cpu, gpu, model_id).tobytes()
    assert kernels().amounts(got).tobytes() == frag_amount(got).tobytes()


@settings(max_examples=60, deadline=None)
@given(st.lists(SHAPE, min_size=1, max_size=12, unique=True), STATES,
       st.sampled_from([(1, 100), (1, 500), (1, 1000), (2, 1000), (0, 0)]))
def test_placement_deltas_equal_evaluating_the_states_after_the_placement(shapes, states, demand):
    model = FragmentationModel(typical_of(shapes), MODELS)
    k, m = demand
    p = pod(cpu=1500, k=k, m=m)
    cpu = np.array([s[0] for s in states])
    gpu = np.sort(np.array([s[1] for s in states]), axis=1)
    model_id = np.array([s[2] for s in states])
    before = frag_amount(numpy_vectors(model, cpu, gpu, model_id))
    got = model.deltas(cpu, gpu, model_id, before, p)
    for s in range(len(states)):
        if p.is_sharing:  # every distinct device with room, one at a time
            columns = [c for c in range(4) if gpu[s, c] >= m and (c == 0 or gpu[s, c] != gpu[s, c - 1])]
        else:  # the k smallest devices with room
            columns = [c for c in range(4) if gpu[s, c] >= m and m > 0][:k]
        afters = [gpu[s] - m * (np.arange(4) == c) for c in columns] if p.is_sharing else \
            [gpu[s] - m * np.isin(np.arange(4), columns)]
        expected = [before[s] - frag_amount(numpy_vectors(model, cpu[s:s + 1] - 1500, a[None], model_id[s:s + 1]))[0]
                    for a in afters]
        row = got[s][~np.isnan(got[s])]
        assert row.tobytes() == np.array(expected).tobytes()
        if p.is_sharing:
            assert np.flatnonzero(~np.isnan(got[s])).tolist() == columns


def test_worked_example_deltas():
    """The worked example of docs/simulator-spec.md: a (2 CPU, 0.2 GPU) pod on (6 CPU, [300, 1000]), F = 800; on device 1 F becomes 700."""
    toy = TypicalPods(((4000, 500, 1, ""), (8000, 1000, 1, ""), (2000, 0, 0, "")), (5, 3, 2), np.array([0.5, 0.3, 0.2]))
    model = FragmentationModel(toy, ("T4",))
    got = model.deltas(np.array([6000]), np.array([[300, 1000]]), np.array([0]), np.array([800.0]),
                       pod(cpu=2000, k=1, m=200))
    assert got[0, 1] == pytest.approx(100)
    assert sigmoid_score(got[0]).tolist() == [54, 52]


@pytest.mark.slow  # compiles the ahead-of-time module
@pytest.mark.skipif(shutil.which("cc") is None, reason="building the extension needs a C compiler")
def test_ahead_of_time_module_computes_what_the_jit_kernels_compute(tmp_path):
    """The pycc build of the same functions: every kernel's output bytes equal the JIT's (random states)."""
    path = frag_aot.build(tmp_path)
    spec = importlib.util.spec_from_file_location(frag_aot.module_name(), path)
    assert spec is not None and spec.loader is not None
    aot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(aot)
    rng = np.random.default_rng(7)
    cpu, model_id = rng.integers(0, 16000, 400), rng.integers(0, 3, 400)
    gpu = np.sort(rng.choice([0, 50, 100, 250, 500, 750, 1000], (400, 8)), axis=1)
    model = FragmentationModel(typical_of([(1000, 500, 1, ""), (2000, 1000, 2, "A100"), (500, 0, 0, "")]), MODELS)
    tables = (model.t_cpu, model.t_milli, model.t_count, model.freq, model.access)
    vectors = frag_kernel.vectors(cpu, gpu, model_id, *tables)
    assert aot.vectors(cpu, gpu, model_id, *tables).tobytes() == vectors.tobytes()
    before = frag_kernel.amounts(vectors)
    assert aot.amounts(vectors).tobytes() == before.tobytes()
    for milli, count, sharing in ((300, 1, True), (1000, 2, False), (0, 0, False)):
        args = (cpu - 500, gpu, model_id, before, milli, count, sharing, *tables)
        assert aot.deltas(*args).tobytes() == frag_kernel.deltas(*args).tobytes()
    jit_blocks, aot_blocks = np.zeros((7, 7)), np.zeros((7, 7))
    for first in (0, 130):  # from scratch, then from the third block after rows from 130 on changed
        vectors[first:] = vectors[first:][::-1]
        frag_kernel.refold(jit_blocks, vectors, first, 64)
        aot.refold(aot_blocks, vectors, first, 64)
        assert aot_blocks.tobytes() == jit_blocks.tobytes()


@pytest.mark.parametrize(("value", "forced", "warns"), [
    ("", False, False), ("0", False, False), ("false", False, False), ("Off", False, False),
    ("1", True, False), ("TRUE", True, False), (" yes ", True, False), ("on", True, False),
    ("ture", False, True), ("2", False, True)])
def test_quasched_jit_reads_booleans_and_names_a_value_it_ignores(monkeypatch, value, forced, warns):
    """``QUASCHED_JIT=false`` used to force the JIT (anything but "" and "0" did); a typo is named, not obeyed."""
    monkeypatch.setenv("QUASCHED_JIT", value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert jit_forced() is forced
    assert [str(w.message) for w in caught] == ([f"QUASCHED_JIT={value!r} is ignored: write 1 (force the JIT) "
                                                 "or 0 (the default)"] if warns else [])
