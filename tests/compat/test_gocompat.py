"""Go math/rand port: seeding, derived draws and the FGD artifact specification's shuffle, tuning and rank vectors for every trace and seed."""

from __future__ import annotations

import re

import pytest

from quasched.model.gorand import CompatDataMissing, GoRand, load_cooked


@pytest.fixture(scope="module")
def cooked(compat_dir):
    return load_cooked(compat_dir)


def test_missing_table_names_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("QUASCHED_COMPAT_DATA", raising=False)
    monkeypatch.delenv("QUASCHED_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    load_cooked.cache_clear()
    with pytest.raises(CompatDataMissing, match="go_rng_cooked.txt") as err:
        load_cooked(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(err.value) and "--rng native" in str(err.value)


def test_intn_is_uniform_and_in_range(cooked):
    rng = GoRand(1, cooked)
    draws = [rng.intn(7) for _ in range(7000)]
    assert set(draws) == set(range(7))
    assert all(800 < draws.count(v) < 1200 for v in range(7))


def test_same_seed_same_stream_and_zero_seed_fallback(cooked):
    a, b = GoRand(42, cooked), GoRand(42 + (2**31 - 1), cooked)
    assert [a.int63() for _ in range(50)] == [b.int63() for _ in range(50)]
    assert GoRand(0, cooked).int63() == GoRand(89482311, cooked).int63()


def test_perm_is_a_permutation(cooked):
    assert sorted(GoRand(7, cooked).perm(1213)) == list(range(1213))


def _vectors(shared_docs):
    """Rows of the artifact specification's table of reference vectors: trace, seed, tuning, final milli, first pods, rank-0..2 nodes."""
    text = (shared_docs / "fgd-compatible-simulation.md").read_text()
    section = text[text.index("### 12.3"):text.index("### 12.4")]
    pattern = r"^\| (\w+) \| (\d+) \| \d+ \| \d+ \| ([+-]\d+) \| (\d+) \| ([\d,]+) \| ([\d,]+) \|$"
    return [m.groups() for m in re.finditer(pattern, section, re.M)]


@pytest.mark.slow  # every trace and seed
def test_shuffle_tuning_and_ranks_match_reference_for_every_trace_and_seed(shared_docs, openb, cooked):
    from quasched.sim.arrival import tune_workload
    from quasched.sim.engine import node_ranks

    rows = _vectors(shared_docs)
    assert len(rows) == 170
    nodes = openb.nodes()
    by_rank = {}
    for trace, seed, tuning, final, first, ranked in rows:
        workload = openb.pods(trace)
        rng = GoRand(int(seed), cooked)
        rng.after_seed()
        tuned = tune_workload(workload, 1000 * nodes.total_gpus, 1.3, rng)
        rng.after_tuning()
        rank = node_ranks(nodes, rng)
        assert len(tuned) - len(workload) == int(tuning), (trace, seed)
        assert int(tuned.gpu_request.sum()) == int(final), (trace, seed)
        assert [n[-4:] for n in tuned.name[:3]] == first.split(","), (trace, seed)
        by_rank = {int(r): str(n)[-4:] for r, n in zip(rank, nodes.name)}
        assert [by_rank[r] for r in range(3)] == ranked.split(","), (trace, seed)
