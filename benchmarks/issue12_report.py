"""Issue 12 tables and plot from ``own_policy.py --json`` files: ours vs FGD per trace, per seed.

    python benchmarks/issue12_report.py results/issue12_runs_a.json results/issue12_runs_b.json \
        --tuning 42-45 --out results/issue12_policy

Prints (1) per trace: FGD and ours alloc@130 (mean ± std over all seeds), the paired Δ with
wins on the tuning seeds, the held-out seeds and all, Δ failed pods, failed pods by kind
(CPU-only/sharing/1-GPU/multi-GPU) and s/run; (2) the per-seed Δ alloc@130 table.
Writes ``<out>.csv`` (per trace) and ``<out>.png`` (per-seed Δ, tuning vs held-out seeds).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from own_policy import KINDS, DEFAULT_TRACES, seed_range  # noqa: E402  (benchmarks/ is on sys.path)


def delta(a: np.ndarray, b: np.ndarray, lower_is_better: bool = False) -> str:
    """Mean paired difference ``a − b`` with the seeds where ``a`` is better."""
    d = a - b
    wins = int((d < 0).sum() if lower_is_better else (d > 0).sum())
    return f"{d.mean():+.{1 if lower_is_better else 2}f} ({wins}/{len(d)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="+")
    parser.add_argument("--policy", default="ours")
    parser.add_argument("--base", default="fgd")
    parser.add_argument("--tuning", type=seed_range, default=seed_range("42-45"))
    parser.add_argument("--out", type=Path, default=Path("results/issue12_policy"))
    args = parser.parse_args()
    runs = {k: v for path in args.runs for k, v in json.loads(path.read_text()).items()}
    traces = [t for t in DEFAULT_TRACES if t in runs] + [t for t in runs if t not in DEFAULT_TRACES]
    rows = []
    print(f"| trace | {args.base} | {args.policy} | Δ tuning (wins) | Δ held-out (wins) | Δ all (wins) | Δ failed (wins) "
          f"| failed {'/'.join(KINDS)} {args.base} → {args.policy} | alloc@100 {args.base} → {args.policy} | s/run |")
    print("|---" * 10 + "|")
    for trace in traces:
        base, ours = runs[trace][args.base], runs[trace][args.policy]
        assert base["seeds"] == ours["seeds"], f"{trace}: seeds differ"
        seeds = np.array(base["seeds"])
        tune = np.isin(seeds, args.tuning)
        a, b = np.array(ours["alloc"]), np.array(base["alloc"])
        kinds = ["/".join(f"{np.mean([k[c] for k in r['failed_kinds']]):.0f}" for c in KINDS) for r in (base, ours)]
        a100, b100 = np.mean(ours["alloc100"]), np.mean(base["alloc100"])
        secs = f"{np.mean(base['run_s']):.1f} / {np.mean(ours['run_s']):.1f}"
        cells = [f"{b.mean():.2f} ± {b.std():.2f}", f"{a.mean():.2f} ± {a.std():.2f}", delta(a[tune], b[tune]),
                 delta(a[~tune], b[~tune]) if (~tune).any() else "–", delta(a, b),
                 delta(np.array(ours["failed"]), np.array(base["failed"]), lower_is_better=True),
                 f"{kinds[0]} → {kinds[1]}", f"{b100:.2f} → {a100:.2f}", secs]
        print(f"| {trace.removeprefix('openb-')} | " + " | ".join(cells) + " |")
        rows.append({"trace": trace, "seeds": len(seeds), "fgd": b.mean(), "ours": a.mean(), "delta": (a - b).mean(),
                     "wins": int((a > b).sum()), "delta_tuning": (a - b)[tune].mean(),
                     "delta_heldout": (a - b)[~tune].mean() if (~tune).any() else np.nan,
                     "alloc100_fgd": b100, "alloc100_ours": a100, "per_seed_delta": (a - b).round(3).tolist()})
    print("\nPer seed, Δ alloc@130 (ours − FGD, points); seeds " + ", ".join(map(str, runs[traces[0]][args.base]["seeds"])))
    print("\n| trace | " + " | ".join(str(s) for s in runs[traces[0]][args.base]["seeds"]) + " |")
    print("|---" * (1 + len(runs[traces[0]][args.base]["seeds"])) + "|")
    for row in rows:
        print(f"| {row['trace'].removeprefix('openb-')} | " + " | ".join(f"{d:+.2f}" for d in row["per_seed_delta"]) + " |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.with_suffix(".csv").open("w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerows(rows)
    plot(args.out.with_suffix(".png"), runs, traces, args)


def plot(path: Path, runs: dict, traces: list[str], args: argparse.Namespace) -> None:
    """Per trace, each seed's Δ alloc@130 (tuning seeds and held-out seeds in two colours)."""
    fig, ax = plt.subplots(figsize=(12, 4))
    for x, trace in enumerate(traces):
        base, ours = runs[trace][args.base], runs[trace][args.policy]
        d = np.array(ours["alloc"]) - np.array(base["alloc"])
        tune = np.isin(base["seeds"], args.tuning)
        ax.scatter(np.full(tune.sum(), x - 0.1), d[tune], color="tab:blue", s=12, label="tuning seeds" if x == 0 else None)
        ax.scatter(np.full((~tune).sum(), x + 0.1), d[~tune], color="tab:orange", s=12,
                   label="held-out seeds" if x == 0 else None)
        ax.hlines(d.mean(), x - 0.3, x + 0.3, color="black")
    ax.axhline(0, color="grey", lw=0.8)
    save_trace_axes(fig, ax, traces, f"alloc@130: {args.policy} − {args.base} (points)", path)


def save_trace_axes(fig, ax, traces: list[str], ylabel: str, path: Path) -> None:
    """Trace names on x, ``ylabel``, legend and grid; save to ``path`` and close."""
    ax.set_xticks(range(len(traces)), [t.removeprefix("openb-") for t in traces], rotation=45)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
