"""The session-14 summaries of benchmark runs, by hand: the health saving per warned share, the federation intervals."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from federation_tails import information, intervals  # noqa: E402 (benchmarks/ is not a package)
from health_sensitivity import check_same_failures, one_share, share_folder  # noqa: E402

SETUP = "healthfgd+drain_errors=1"


def runs(lost_fgd: list[float], lost_ours: list[float], seeds: list[int]) -> pd.DataFrame:
    """Runs CSV rows of ``health.py`` for FGD and ``SETUP``: FGD allocates 10 % on every seed, ``SETUP`` 10.5 % on
    the first and 0.3 points less on each next seed (Δ +0.5, +0.2, −0.1, ...); waits 100 s vs 120 s."""
    rows = []
    for policy, lost, alloc, step, wait in (("fgd", lost_fgd, 10.0, 0.0, 100.0), (SETUP, lost_ours, 10.5, 0.3, 120.0)):
        rows += [{"policy": policy, "seed": s, "lost_gpu_h": x, "gpu_alloc_avg_pct": alloc - i * step,
                  "wait_mean_s": wait, "warnings": 3, "lost_unsignalled_gpu_h": x / 2}
                 for i, (s, x) in enumerate(zip(seeds, lost))]
    return pd.DataFrame(rows)


def test_one_share_pools_savings_and_splits_held_out_seeds() -> None:
    # FGD loses 10, 20 (tuning) and 30 (held out); ours 7, 16, 18: savings 30 %, 20 %, 40 % per seed
    row = one_share(runs([10, 20, 30], [7, 16, 18], [42, 43, 47]), SETUP, heldout={47}, goal=30)
    assert row["saving_pct"] == pytest.approx(100 * (1 - 41 / 60))
    assert row["saving_tuning_pct"] == pytest.approx(100 * (1 - 23 / 30))
    assert row["saving_heldout_pct"] == pytest.approx(40.0)
    assert row["seeds_ge_30"] == 2  # 30 % counts, 20 % does not
    assert (row["min_seed_saving_pct"], row["max_seed_saving_pct"]) == pytest.approx((20.0, 40.0))
    assert (row["dalloc_min"], row["dalloc_mean"]) == pytest.approx((-0.1, 0.2))  # Δ +0.5, +0.2, −0.1
    assert row["wait_vs_fgd_pct"] == pytest.approx(20.0)
    assert (row["lost_unsignalled_gpu_h"], row["fgd_lost_unsignalled_gpu_h"]) == pytest.approx((41 / 6, 10.0))


def test_one_share_names_seeds_fgd_did_not_run() -> None:
    table = runs([10, 20], [7, 16], [42, 43])
    with pytest.raises(SystemExit, match=r"seeds \[43\] that fgd did not"):
        one_share(table[(table.policy != "fgd") | (table.seed == 42)], SETUP, heldout=set(), goal=30)


def test_the_failure_check_passes_equal_runs_and_names_the_folder_and_seed_that_differ() -> None:
    first = ("share0", pd.Series([10.0, 20.0, 30.0], index=[42, 43, 44]))
    check_same_failures(first, "share1", pd.Series([20.0, 30.0], index=[43, 44]))  # a subset of the seeds is fine
    with pytest.raises(SystemExit, match=r"share1: .* from share0's on seeds \[43\] \(seed 43: 20.5 against 20.0\)"):
        check_same_failures(first, "share1", pd.Series([10.0, 20.5], index=[42, 43]))
    with pytest.raises(SystemExit, match="on no common seed"):
        check_same_failures(first, "share1", pd.Series([10.0], index=[50]))


@pytest.mark.parametrize("item", ["0.7", "x=../runs", "0.7="])
def test_share_folder_names_a_malformed_item(item: str) -> None:
    assert share_folder("0.7=../runs") == (0.7, Path("../runs"))
    with pytest.raises(SystemExit, match="expected SHARE=FOLDER"):
        share_folder(item)


def test_one_share_names_a_missing_setup_and_its_folder() -> None:
    with pytest.raises(SystemExit, match="share0.7: setup 'pwr' not among the policies"):
        one_share(runs([10], [7], [42]), "pwr", heldout=set(), goal=30, where="share0.7")


def test_the_saving_interval_resamples_seeds_in_pairs() -> None:
    # equal FGD losses, savings 20 % and 40 %: a resample is both seeds of one kind (a quarter each) or one of each (30 %)
    row = one_share(runs([10, 10], [8, 6], [42, 43]), SETUP, heldout=set(), goal=30)
    assert (row["saving_2.5_pct"], row["saving_pct"], row["saving_97.5_pct"]) == pytest.approx((20.0, 30.0, 40.0))
    one = one_share(runs([10], [7], [42]), SETUP, heldout=set(), goal=30)  # one seed: every resample is that seed
    assert one["saving_2.5_pct"] == one["saving_97.5_pct"] == pytest.approx(30.0)


def test_intervals_hold_the_point_estimates_and_pool_the_real_zones() -> None:
    index = pd.MultiIndex.from_tuples([("fresh1 seeds", 1), ("fresh1 zones", 2), ("fresh1 synthetic", 3),
                                       ("fresh1 synthetic", 4)], names=["set", "seed"])
    carbon = pd.DataFrame({"ours": [11.0, 3.0, 5.0, 8.0], "oracle@ours": [10.0, 2.0, 5.0, 4.0]}, index=index)
    table = intervals(carbon, "ours", draws=200)
    real = table.loc["real (seeds + zones)"]
    assert real.scenarios == 2 and real["mean"] == pytest.approx(round((1.1 + 1.5) / 2, 3))
    assert real.pooled == pytest.approx(round(14 / 12, 3))
    synthetic = table.loc["synthetic"]
    assert synthetic["mean"] == pytest.approx(1.5) and synthetic.pooled == pytest.approx(round(13 / 9, 3))
    for _, row in table.iterrows():  # a resampled mean of ratios lies between the smallest and the largest ratio
        assert row["mean 2.5 %"] <= row["mean"] <= row["mean 97.5 %"]
    assert np.isclose(table.loc["seeds", "mean 2.5 %"], 1.1)  # one scenario: every resample is that scenario
    # two scenarios (ratios 1.1 and 1.5) drawn with replacement: both the first (1/4), one of each (1/2: mean 1.3,
    # pooled 14/12) or both the second (1/4), so 2.5 % and 97.5 % of 200 resamples are the extremes
    assert (real["mean 2.5 %"], real["mean 97.5 %"]) == pytest.approx((1.1, 1.5))
    assert (real["pooled 2.5 %"], real["pooled 97.5 %"]) == pytest.approx((1.1, 1.5))


def test_information_counts_the_twins_better_and_worse_scenarios_and_the_tails(capsys: pytest.CaptureFixture[str]) -> None:
    # ratios ours / twin: seeds 1.3 / 1.0; synthetic 1.0 / 1.3 and 1.0 / 1.1
    index = pd.MultiIndex.from_tuples([("fresh1 seeds", 1), ("fresh1 synthetic", 2), ("fresh1 synthetic", 3)],
                                      names=["set", "seed"])
    carbon = pd.DataFrame({"ours": [13.0, 10.0, 5.0], "oracle@ours": [10.0, 10.0, 5.0],
                           "twin": [10.0, 13.0, 5.5], "oracle@twin": [10.0, 10.0, 5.0]}, index=index)
    information(carbon, "ours", "twin")
    out = capsys.readouterr().out
    assert "pooled, ours / twin: {'seeds': '1.300 / 1.000', 'synthetic': '1.000 / 1.233'}" in out  # 18.5 / 15
    assert "better / worse: {'seeds': '1 / 0', 'synthetic': '0 / 2'}" in out
    assert "of ours's 1 scenarios above 1.2, the twin has 1 within 5 % and 0 above 1.2; of the twin's 1, ours has 1" in out
    assert "sets within 5 % by mean, ours / twin: {'seeds': '0 / 1 of 1', 'synthetic': '1 / 0 of 1'}" in out
