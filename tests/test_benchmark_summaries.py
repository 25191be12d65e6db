"""``benchmarks/health_sensitivity.py``'s summary of health runs, by hand: the saving against FGD per warned share."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from health_sensitivity import check_same_failures, one_share, share_folder  # noqa: E402 (benchmarks/ is not a package)

SETUP = "health+drain_errors=1"


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
    row = one_share(runs([10, 20, 30], [7, 16, 18], [42, 43, 47]), SETUP, heldout={47}, threshold=30)
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
        one_share(table[(table.policy != "fgd") | (table.seed == 42)], SETUP, heldout=set(), threshold=30)


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
        one_share(runs([10], [7], [42]), "pwr", heldout=set(), threshold=30, where="share0.7")


def test_the_saving_interval_resamples_seeds_in_pairs() -> None:
    # equal FGD losses, savings 20 % and 40 %: a resample is both seeds of one kind (a quarter each) or one of each (30 %)
    row = one_share(runs([10, 10], [8, 6], [42, 43]), SETUP, heldout=set(), threshold=30)
    assert (row["saving_2.5_pct"], row["saving_pct"], row["saving_97.5_pct"]) == pytest.approx((20.0, 30.0, 40.0))
    one = one_share(runs([10], [7], [42]), SETUP, heldout=set(), threshold=30)  # one seed: every resample is that seed
    assert one["saving_2.5_pct"] == one["saving_97.5_pct"] == pytest.approx(30.0)
