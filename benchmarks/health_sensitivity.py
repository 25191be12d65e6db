"""How a health setup's saving against FGD grows with the share of fatal failures a warning announces.

    python benchmarks/health_sensitivity.py --setup "$B" --out results/health/sensitivity \
        --runs 0=results/health/share0.0 0.5=results/health/share0.5 0.9=results/health/share0.9 ...

Each ``--runs`` item is ``SHARE=FOLDER``: the folder's ``health_runs.csv`` comes from ``health.py`` with
``--precursor-share SHARE`` and otherwise the same options (the share of fatal failures that a warning announces; the
failures themselves are the same draw at every share, so FGD's runs must agree to the last digit, and this is
checked). Per share, for ``--setup`` against FGD on the same seeds: the saving ``1 − Σ lost / Σ lost_FGD`` pooled and
per split (``--heldout`` seeds apart from the others) with a 95 % bootstrap interval of the pooled saving (seeds
resampled with replacement, pairs kept; ``--bootstrap`` resamples, seeded), the seeds saving at least ``--threshold`` %,
the least and mean Δ allocation (points) and the mean wait against FGD's. Writes ``health_sensitivity.csv`` and ``.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from placement import seed_range  # noqa: E402  (benchmarks/ is on sys.path when run as a script)


def saving(lost: pd.Series, fgd: pd.Series) -> float:
    """Pooled saving in %, ``100 (1 − Σ lost / Σ lost_FGD)``; NaN for a split without seeds."""
    return float(100 * (1 - lost.sum() / fgd.sum())) if len(fgd) else float("nan")


def interval(lost: np.ndarray, fgd: np.ndarray, draws: int, seed: int = 0) -> tuple[float, float]:
    """2.5 and 97.5 percentiles of the pooled saving (%) over ``draws`` resamples of the seeds (pairs kept)."""
    pick = np.random.default_rng(seed).integers(0, len(lost), (draws, len(lost)))
    pooled = 100 * (1 - lost[pick].sum(axis=1) / fgd[pick].sum(axis=1))
    return float(np.percentile(pooled, 2.5)), float(np.percentile(pooled, 97.5))


def one_share(runs: pd.DataFrame, setup: str, heldout: set[int], threshold: float, draws: int = 5000,
              where: str = "the runs") -> dict[str, float]:
    """The row of one share: ``setup`` against FGD on the seeds both ran (``where`` names the runs in errors)."""
    fgd, ours = (runs[runs.policy == p].set_index("seed") for p in ("fgd", setup))
    if ours.empty:
        raise SystemExit(f"{where}: setup {setup!r} not among the policies: {', '.join(runs.policy.unique())}")
    if missing := sorted(set(ours.index) - set(fgd.index)):
        raise SystemExit(f"{where}: setup {setup!r} ran seeds {missing} that fgd did not; savings are paired by seed")
    fgd = fgd.loc[ours.index]
    held = ours.index.isin(sorted(heldout))
    per_seed = 100 * (1 - ours.lost_gpu_h / fgd.lost_gpu_h)
    alloc = ours.gpu_alloc_avg_pct - fgd.gpu_alloc_avg_pct
    low, high = interval(ours.lost_gpu_h.to_numpy(), fgd.lost_gpu_h.to_numpy(), draws)
    return {"seeds": len(ours), "fgd_lost_gpu_h": float(fgd.lost_gpu_h.sum()), "lost_gpu_h": float(ours.lost_gpu_h.sum()),
            "saving_pct": saving(ours.lost_gpu_h, fgd.lost_gpu_h), "saving_2.5_pct": low, "saving_97.5_pct": high,
            "saving_tuning_pct": saving(ours.lost_gpu_h[~held], fgd.lost_gpu_h[~held]),
            "saving_heldout_pct": saving(ours.lost_gpu_h[held], fgd.lost_gpu_h[held]),
            f"seeds_ge_{threshold:g}": int((per_seed >= threshold).sum()),
            "min_seed_saving_pct": float(per_seed.min()), "max_seed_saving_pct": float(per_seed.max()),
            "dalloc_min": float(alloc.min()), "dalloc_mean": float(alloc.mean()),
            "wait_vs_fgd_pct": float(100 * (ours.wait_mean_s.sum() / fgd.wait_mean_s.sum() - 1)),
            "warnings": float(ours.warnings.mean()),
            "lost_unsignalled_gpu_h": float(ours.lost_unsignalled_gpu_h.mean()),
            "fgd_lost_unsignalled_gpu_h": float(fgd.lost_unsignalled_gpu_h.mean())}


def share_folder(item: str) -> tuple[float, Path]:
    """``"0.7=results/x"`` -> ``(0.7, Path("results/x"))``."""
    share, _, folder = item.partition("=")
    try:
        value = float(share)
    except ValueError:
        value = None
    if value is None or not folder:
        raise SystemExit(f"--runs {item!r}: expected SHARE=FOLDER, e.g. 0.7=results/health/share0.7")
    return value, Path(folder)


def check_same_failures(first: tuple[str, pd.Series], folder: str, lost: pd.Series) -> None:
    """Stop unless FGD's lost GPU-hours per seed in ``folder`` equal those of the first folder ``first`` exactly on
    every seed both ran (the failures are the same draw at every share, and FGD ignores warnings)."""
    first_folder, first_lost = first
    seeds = lost.index.intersection(first_lost.index)
    differ = [int(s) for s in seeds if lost[s] != first_lost[s]]
    if seeds.empty or differ:
        found = f"on seeds {differ} (seed {differ[0]}: {lost[differ[0]]} against {first_lost[differ[0]]})" if differ \
            else "on no common seed"
        raise SystemExit(f"{folder}: FGD's lost GPU-hours differ from {first_folder}'s {found}; "
                         "were the failure options and seeds the same?")


def plot(path: Path, table: pd.DataFrame) -> None:
    """Saving (pooled with its interval, per split, per-seed range) and Δ allocation against the warned share."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    share = table.index.to_numpy()
    left.fill_between(share, table.min_seed_saving_pct, table.max_seed_saving_pct, alpha=0.2, label="per-seed range")
    pooled = table.saving_pct.to_numpy()
    left.errorbar(share, pooled, yerr=[pooled - table["saving_2.5_pct"], table["saving_97.5_pct"] - pooled], marker="o",
                  capsize=3, label="pooled (95 % interval)")
    for column, name in (("saving_tuning_pct", "tuning seeds"), ("saving_heldout_pct", "held-out seeds")):
        left.plot(share, table[column], marker="o", label=name)
    left.set(xlabel="share of fatal failures announced by a warning", ylabel="fewer lost GPU-hours than FGD, %")
    left.legend(fontsize=8)
    right.plot(share, table.dalloc_mean, marker="o", label="mean")
    right.plot(share, table.dalloc_min, marker="v", label="least seed")
    right.set(xlabel="share of fatal failures announced by a warning", ylabel="Δ GPU allocation vs FGD, points")
    right.legend(fontsize=8)
    fig.suptitle("Health-aware setup vs FGD as the failure model gives more warning")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", required=True, help="SHARE=FOLDER items (folders holding health_runs.csv)")
    parser.add_argument("--setup", required=True, help="the setup compared with fgd, as in health.py's --policies")
    parser.add_argument("--heldout", type=seed_range, default=seed_range("47-51"))
    parser.add_argument("--threshold", type=float, default=30.0, help="count the seeds saving at least this %%")
    parser.add_argument("--bootstrap", type=int, default=5000, help="resamples of the seeds for the interval")
    parser.add_argument("--out", type=Path, default=Path("results/health/sensitivity"))
    args = parser.parse_args()
    rows: dict[float, dict[str, float]] = {}
    first: tuple[str, pd.Series] | None = None
    for item in args.runs:
        share, folder = share_folder(item)
        if share in rows:
            raise SystemExit(f"--runs {item!r}: share {share:g} given twice")
        runs = pd.read_csv(folder / "health_runs.csv")
        lost = runs[runs.policy == "fgd"].set_index("seed").lost_gpu_h
        if first is None:
            first = (str(folder), lost)
        check_same_failures(first, str(folder), lost)
        rows[share] = one_share(runs, args.setup, set(args.heldout), args.threshold, args.bootstrap, str(folder))
    table = pd.DataFrame.from_dict(rows, orient="index").sort_index().rename_axis("precursor_share")
    args.out.mkdir(parents=True, exist_ok=True)
    table.round(3).to_csv(args.out / "health_sensitivity.csv")
    plot(args.out / "health_sensitivity.png", table)
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(table.round(2).T.to_string())


if __name__ == "__main__":
    main()
